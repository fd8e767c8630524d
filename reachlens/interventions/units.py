"""Unit masks: silence chosen hidden units of one MLP block, and rank units by their contribution.

The hidden units of an MLP are the activations at site ``mlp_post`` (``blocks.L.mlp.hook_post``; for
the gated MLP of Llama/Qwen: ``act(gate(x)) * up(x)``, the input of the down projection ``W_out``).
The MLP's own output is ``W_out @ post`` plus the projection's bias where the family has one (GPT-2,
GPT-NeoX), a sum of one term per unit, so a unit's share of a direction ``v`` in that output (site
``mlp.hook_out``: :data:`MLP_OUTPUT_SITE`; the same hook as ``mlp_out`` except on Gemma 2/3 and
OLMo 2, where ``mlp_out`` is after the post-MLP norm) is exact:

    out . v = sum_i post_i * (W_out[:, i] . v)

:func:`unit_contributions` ranks units by their share of the *difference* between two sets
(failure minus healthy mean activation, times ``W_out[:, i] . v``); the contributions sum to
``(mean_out_failure - mean_out_healthy) . v`` (a bias cancels in the difference), which is the raw
mean-difference norm when ``v`` is the normalized mean difference. :func:`unit_ablation` zeroes the
chosen units on every forward: zeroing all of them equals zeroing the block's MLP output (leaving
the bias, where there is one).

>>> top = top_units(unit_contributions(delta, mlp_out_weight(model, 3), v), k=32)  # doctest: +SKIP
>>> with model.hooks(fwd_hooks=unit_ablation(model, 3, top)):  # doctest: +SKIP
...     outs = generate(model, prompts, rows, params)

Arms: ``unit_ablation(..., arm=KEY)`` masks only the rows whose ``Row.arm`` is ``KEY``;
:func:`unit_ablation_arms` masks a different unit set per arm at one block as one hook, so e.g. the
top-k sets and their random controls decode in one batch (:mod:`reachlens.engine.hooks`, "Arms").
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from reachlens.engine.hooks import FwdHook, arm_index, per_arm, row_agnostic
from reachlens.engine.sites import check_layer, hook_name, site_shape
from reachlens.errors import ReachlensError

__all__ = [
    "MLP_OUTPUT_SITE", "UNIT_SITE", "mlp_out_weight", "top_units", "unit_ablation", "unit_ablation_arms",
    "unit_contributions", "unit_mask_arms_hook", "unit_mask_hook",
]

UNIT_SITE = "mlp_post"
"""Where the hidden units are: the input of the MLP's down projection ``W_out``."""
MLP_OUTPUT_SITE = "mlp.hook_out"
"""The MLP's own output ``W_out @ post (+ b)``, linear in the units (before a post-MLP norm)."""


def mlp_out_weight(model, layer: int) -> Float[Tensor, "d_model d_mlp"]:
    """The down-projection weight ``W_out`` of block ``layer`` (``[d_model, d_mlp]``, a detached view;
    GPT-2's ``Conv1D`` stores it transposed, which is undone here)."""
    from transformers.pytorch_utils import Conv1D

    check_layer(model, layer)
    mlp = model.blocks[layer].mlp
    out = getattr(mlp, "out", None)
    weight = getattr(out, "weight", None)
    if not isinstance(weight, Tensor):
        raise ReachlensError(f"block {layer}'s MLP ({type(mlp).__name__}) has no 'out' projection weight")
    if isinstance(getattr(out, "original_component", None), Conv1D):
        weight = weight.T
    return weight.detach()


def unit_contributions(
    delta_post: Float[Tensor, "d_mlp"], w_out: Float[Tensor, "d_model d_mlp"], direction: Float[Tensor, "d_model"]
) -> Float[Tensor, "d_mlp"]:
    """Per unit, ``delta_post[i] * (W_out[:, i] . direction)``: its share of the output difference along v."""
    return delta_post.float() * (direction.float() @ w_out.float())


def top_units(contributions: Float[Tensor, "d_mlp"], k: int) -> list[int]:
    """The ``k`` units with the largest contribution (ties: the lower index first)."""
    n = contributions.shape[0]
    if not 1 <= k <= n:
        raise ReachlensError(f"k={k!r} must lie in 1..{n} (the block's hidden units)")
    order = sorted(range(n), key=lambda i: (-float(contributions[i]), i))
    return order[:k]


def unit_mask_hook(units: Int[Tensor, "k"]):
    """A hook function that zeroes the given hidden units (the last dimension) at every position."""
    idx = units.detach().clone().long()
    placed: dict[torch.device, Tensor] = {}

    @row_agnostic
    def hook(tensor: Float[Tensor, "batch pos d_mlp"], *, hook) -> Float[Tensor, "batch pos d_mlp"]:
        if tensor.device not in placed:
            placed[tensor.device] = idx.to(tensor.device)
        out = tensor.clone()
        out[..., placed[tensor.device]] = 0
        return out

    return hook


def unit_mask_arms_hook(masks: Mapping[Hashable, Bool[Tensor, "d_mlp"]]):
    """A hook function that zeroes, at every position of the rows of each arm in ``masks``, the
    hidden units where that arm's mask is True; rows of other arms are returned unchanged."""
    keys = tuple(masks)
    table = torch.stack([torch.zeros_like(masks[keys[0]])] + [masks[k] for k in keys]).bool()
    placed: dict[torch.device, Tensor] = {}

    @per_arm(keys)
    def hook(tensor: Float[Tensor, "batch pos d_mlp"], *, hook) -> Float[Tensor, "batch pos d_mlp"] | None:
        idx = arm_index(keys, tensor.device)
        if idx is None:
            return None
        if tensor.device not in placed:
            placed[tensor.device] = table.to(tensor.device)
        return tensor.masked_fill(placed[tensor.device].index_select(0, idx + 1).unsqueeze(1), 0)

    return hook


def _unit_list(layer: int, units: Sequence[int], d_mlp: int) -> list[int]:
    units = [int(u) for u in units]
    if not units:
        raise ReachlensError("unit_ablation needs at least one unit")
    bad = [u for u in units if not 0 <= u < d_mlp]
    if bad:
        raise ReachlensError(f"units {bad!r} are out of range for block {layer}'s MLP (valid: 0-{d_mlp - 1})")
    if len(set(units)) != len(units):
        raise ReachlensError(f"units {units!r} repeat an index")
    return units


def unit_ablation(model, layer: int, units: Sequence[int], *, arm: Hashable = None) -> list[FwdHook]:
    """``fwd_hooks`` that zero ``units`` of block ``layer``'s MLP hidden layer (site ``mlp_post``) on
    every forward; ``arm``: None on every row, a key only on the rows of that arm (``Row.arm``).

    Raises:
        ReachlensError: no units, a repeated unit, or a unit outside ``0..d_mlp-1``.
    """
    if arm is not None:
        return unit_ablation_arms(model, layer, {arm: units})
    name = hook_name(model, layer, UNIT_SITE, write=True)
    (d_mlp,) = site_shape(model, name)
    return [(name, unit_mask_hook(torch.tensor(_unit_list(layer, units, d_mlp), dtype=torch.long)))]


def unit_ablation_arms(model, layer: int, units: Mapping[Hashable, Sequence[int]]) -> list[FwdHook]:
    """``fwd_hooks`` that zero, for each arm of ``units`` (arm key -> unit indices), its units of
    block ``layer``'s MLP hidden layer on that arm's rows: one hook for every arm.

    Raises:
        ReachlensError: as :func:`unit_ablation`, for any arm; no arms; an arm key None.

    >>> unit_ablation_arms(model, 3, {("top", 8): top[:8], ("random", 8): rand[:8]})  # doctest: +SKIP
    """
    if not units:
        raise ReachlensError("unit_ablation_arms needs at least one arm")
    if None in units:
        raise ReachlensError("arm None is the plain model; name each unit-mask arm with a key such as ('top', 8)")
    name = hook_name(model, layer, UNIT_SITE, write=True)
    (d_mlp,) = site_shape(model, name)
    masks = {}
    for arm, chosen in units.items():
        mask = torch.zeros(d_mlp, dtype=torch.bool)
        mask[_unit_list(layer, chosen, d_mlp)] = True
        masks[arm] = mask
    return [(name, unit_mask_arms_hook(masks))]
