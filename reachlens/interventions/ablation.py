"""Ablation: replace the activation at one or more sites of a block by zeros or by its mean.

The factories return ``fwd_hooks`` for ``with model.hooks(fwd_hooks=...)``, at TransformerLens'
sites (:mod:`reachlens.engine.sites`). Zeroing ``mlp_out`` (what the MLP adds to the residual
stream) makes the block add nothing from its MLP; ``attn_out`` does the same for attention; the
component ``layer`` is both, so the block passes its input residual through unchanged. Any other
site can be zeroed too (``mlp_post``: every hidden unit; ``resid_post``: the residual stream
itself, which leaves the next block nothing to read). *Mean* ablation replaces the activation by a
fixed vector instead, its mean over a reference set of prompts (:func:`site_means`), so the block
still adds its typical contribution but nothing specific to the input. Because reachlens' engine
runs every forward (prompt prefill and each decoding step) through the hooked components, the
ablation is live on every generated token, not only on the prompt.

Every factory takes ``arm=``: None (the default) acts on every row of any forward; a key acts
only on the rows of :func:`reachlens.engine.generate` whose ``Row.arm`` is that key, so the
ablations of a sweep decode side by side in one batch (:mod:`reachlens.engine.hooks`, "Arms").

Numerics: the silenced contribution is exactly zero (or exactly the mean vector), and rows of
other arms are returned bit for bit; an ablated forward equals a HuggingFace forward whose MLP
returns zeros, up to the fused attention's float32 rounding (about 1e-6 relative).

>>> with model.hooks(fwd_hooks=zero_ablation(model, 3, "mlp_out")):  # doctest: +SKIP
...     result = audit(model, task, protocol)
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterator, Mapping, Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from reachlens.engine.hooks import FwdHook, HookFn, arm_entries, per_arm, row_agnostic
from reachlens.engine.rng import intervention_seed
from reachlens.engine.sites import hook_name, site_shape, sites_of
from reachlens.errors import ReachlensError

__all__ = ["ablated", "displacement_hook", "mean_ablation", "random_displacement", "replace_hook", "site_means",
           "zero_ablation", "zero_hook"]


@row_agnostic
def zero_hook(tensor: Float[Tensor, "..."], *, hook) -> Float[Tensor, "..."]:
    """A hook function that replaces the activation with zeros (same shape, dtype and device)."""
    return torch.zeros_like(tensor)


def replace_hook(value: Float[Tensor, "..."] | None = None, *, arm: Hashable = None) -> HookFn:
    """A hook function that replaces the activation by zeros (``value=None``) or by ``value``
    (broadcast over batch and positions), on every row (``arm=None``) or on ``arm``'s rows only."""
    if value is None and arm is None:
        return zero_hook
    fixed = None if value is None else value.detach().clone()
    placed: dict[tuple, Tensor] = {}

    def filled(tensor: Tensor) -> Tensor:
        key = (tensor.device, tensor.dtype)
        if key not in placed:
            placed[key] = tensor.new_zeros(()) if fixed is None else fixed.to(device=tensor.device, dtype=tensor.dtype)
        return placed[key]

    return _acting_on(arm, lambda tensor: filled(tensor).expand_as(tensor).clone(), zero=fixed is None)


def _acting_on(arm: Hashable, change, *, zero: bool = False) -> HookFn:
    """A hook function applying ``change`` (an activation -> its replacement) to every row (``arm=None``) or to
    ``arm``'s rows only; ``zero``: the arm's rows are zeroed in place of ``change`` (one ``index_fill``: a where over
    the whole batch reads and writes every row)."""
    if arm is None:
        @row_agnostic
        def every_row(tensor: Float[Tensor, "..."], *, hook) -> Float[Tensor, "..."]:
            return change(tensor)

        return every_row
    keys = (arm,)

    @per_arm(keys)
    def arm_rows(tensor: Float[Tensor, "..."], *, hook) -> Float[Tensor, "..."] | None:
        entries = arm_entries(keys, tensor.device)
        if entries is None:
            return None
        if zero:
            return tensor.index_fill(0, entries, 0)
        out = tensor.clone()
        out[entries] = change(tensor[entries])
        return out

    return arm_rows


def zero_ablation(model, layer: int, site: str | Sequence[str] = "mlp_out", *, arm: Hashable = None) -> list[FwdHook]:
    """``fwd_hooks`` that zero ``site`` of block ``layer``: a site (``mlp_out``, ``attn_out``,
    ``mlp_post``, ...), a component (``mlp``, ``attn``, ``layer``: see
    :data:`~reachlens.engine.sites.COMPONENTS`), or several sites (``"attn_out+mlp_out"``, a list).
    ``arm``: None acts on every row; a key only on the rows of that arm (``Row.arm``).

    Hook names and the layer are resolved now: a bad layer or site raises before anything runs.

    >>> zero_ablation(model, 1, "layer")  # doctest: +SKIP
    [('blocks.1.hook_attn_out', <function zero_hook ...>), ('blocks.1.hook_mlp_out', <function zero_hook ...>)]
    >>> zero_ablation(model, 1, "mlp", arm=("silence", 1, "mlp"))  # doctest: +SKIP
    """
    return [(hook_name(model, layer, s, write=True), replace_hook(arm=arm)) for s in sites_of(site)]


def displacement_hook(direction: Float[Tensor, " d"], *, arm: Hashable = None) -> HookFn:
    """A hook function that adds ``|x| * direction`` to the activation ``x`` at every position (``|x|`` the norm
    of that position's vector over its last dimension): a move as large as zeroing it, along ``direction``
    (unit norm) instead of along ``-x``. On every row (``arm=None``) or on ``arm``'s rows only."""
    unit = direction.detach().float().clone()
    if unit.ndim != 1 or not bool(torch.isfinite(unit).all()) or abs(float(unit.norm()) - 1.0) > 1e-4:
        raise ReachlensError(f"the displacement direction must be a finite unit vector (shape {tuple(unit.shape)}, "
                             f"norm {float(unit.norm()):.4g}); divide it by its norm")

    def moved(tensor: Tensor) -> Tensor:
        step = unit.to(device=tensor.device, dtype=tensor.dtype)
        return tensor + tensor.norm(dim=-1, keepdim=True) * step

    return _acting_on(arm, moved)


def random_displacement(
    model, layer: int, site: str | Sequence[str] = "mlp_out", *, seed: int = 0, arm: Hashable = None
) -> list[FwdHook]:
    """``fwd_hooks`` that move ``site`` of block ``layer`` (sites and components as in :func:`zero_ablation`) by a
    random direction scaled to the activation's own norm at each position: a perturbation the size of
    :func:`zero_ablation`'s that carries nothing of the site's content, the null a silencing effect is read against.
    The direction is a unit Gaussian vector drawn from ``(seed, layer, site)`` alone (one per site).

    >>> random_displacement(model, 3, "mlp", seed=0)  # doctest: +SKIP
    """
    hooks = []
    for s in sites_of(site):
        name = hook_name(model, layer, s, write=True)
        d = site_shape(model, name)[-1]
        gen = torch.Generator().manual_seed(intervention_seed(seed, name, layer))
        v = torch.randn(d, generator=gen, dtype=torch.float64)
        hooks.append((name, displacement_hook((v / v.norm()).float(), arm=arm)))
    return hooks


def mean_ablation(
    model, layer: int, site: str | Sequence[str], means: Mapping[str, Float[Tensor, "..."]], *, arm: Hashable = None
) -> list[FwdHook]:
    """``fwd_hooks`` that replace ``site`` of block ``layer`` (sites and components as in
    :func:`zero_ablation`) by a fixed vector: ``means[hook name]``, e.g. from :func:`site_means`.

    Raises:
        ReachlensError: a site has no mean in ``means``, or its mean is not the site's shape.

    >>> means = site_means(model, prompts, [hook_name(model, 3, "mlp_out")])  # doctest: +SKIP
    >>> mean_ablation(model, 3, "mlp", means, arm="L3 mean")  # doctest: +SKIP
    """
    hooks = []
    for s in sites_of(site):
        name = hook_name(model, layer, s, write=True)
        if name not in means:
            raise ReachlensError(f"no mean for {name!r} (means has: {', '.join(means) or 'nothing'}); compute it with "
                                 f"site_means(model, prompts, [{name!r}])")
        mean = means[name]
        shape = site_shape(model, name)
        if tuple(mean.shape) != shape or not bool(torch.isfinite(mean).all()):
            raise ReachlensError(f"the mean for {name!r} has shape {tuple(mean.shape)}; the site needs {shape}, finite")
        hooks.append((name, replace_hook(mean, arm=arm)))
    return hooks


@torch.inference_mode()
def site_means(model, prompts: Sequence[str], names: Sequence[str]) -> dict[str, Float[Tensor, "..."]]:
    """Per hook name, the mean activation over every token of ``prompts`` (each prompt run alone
    through the engine's forward, no padding), in float32: the reference of :func:`mean_ablation`.

    >>> site_means(model, ["Q: 1+2=?\\nA:"], [hook_name(model, 3, "mlp_out")])  # doctest: +SKIP
    """
    from reachlens.engine.stack import LayerStack
    from reachlens.engine.tokens import encode_prompts, tokenizer_of

    if not prompts:
        raise ReachlensError("site_means needs at least one prompt")
    for name in names:
        site_shape(model, name)  # an unknown hook raises now
    sums: dict[str, Tensor] = {}
    count = 0

    def add(tensor: Tensor, *, hook) -> None:
        part = tensor.detach().float().flatten(0, 1).sum(0)
        sums[hook.name] = sums[hook.name] + part if hook.name in sums else part

    stack = LayerStack(model)
    by_alias = [(n, add) for n in names]
    with model.hooks(fwd_hooks=by_alias):
        for ids in encode_prompts(tokenizer_of(model), prompts):
            stack.forward(torch.tensor([ids], device=stack.device))
            count += len(ids)
    canonical = {n: model.hook_dict[n].name for n in names}
    return {n: sums[canonical[n]] / count for n in names}


@contextlib.contextmanager
def ablated(model, layer: int, site: str | Sequence[str] = "mlp_out") -> Iterator[None]:
    """Within the block, ``site`` of block ``layer`` is zeroed on every forward (see :func:`zero_ablation`)."""
    with model.hooks(fwd_hooks=zero_ablation(model, layer, site)):
        yield
