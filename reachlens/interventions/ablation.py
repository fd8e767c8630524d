"""Zero-ablation: replace the activation at one or more sites of a block by zeros.

The factories return ``fwd_hooks`` for ``with model.hooks(fwd_hooks=...)``, at TransformerLens'
sites (:mod:`reachlens.engine.sites`). Zeroing ``mlp_out`` (what the MLP adds to the residual
stream) makes the block add nothing from its MLP; ``attn_out`` does the same for attention; the
component ``layer`` is both, so the block passes its input residual through unchanged. Any other
site can be zeroed too (``mlp_post``: every hidden unit; ``resid_post``: the residual stream
itself, which leaves the next block nothing to read). Because reachlens' engine runs every forward
(prompt prefill and each decoding step) through the hooked components, the ablation is live on
every generated token, not only on the prompt.

Numerics: the hook returns a fresh zero tensor, so the silenced contribution is exactly zero and an
ablated forward equals a HuggingFace forward whose MLP returns zeros, up to the fused
attention's float32 rounding (about 1e-6 relative).

>>> with model.hooks(fwd_hooks=zero_ablation(model, 3, "mlp_out")):  # doctest: +SKIP
...     result = audit(model, task, protocol)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from reachlens.engine.hooks import FwdHook, row_agnostic
from reachlens.engine.sites import hook_name, sites_of

__all__ = ["zero_hook", "zero_ablation", "ablated"]


@row_agnostic
def zero_hook(tensor: Float[Tensor, "..."], *, hook) -> Float[Tensor, "..."]:
    """A hook function that replaces the activation with zeros (same shape, dtype and device)."""
    return torch.zeros_like(tensor)


def zero_ablation(model, layer: int, site: str | Sequence[str] = "mlp_out") -> list[FwdHook]:
    """``fwd_hooks`` that zero ``site`` of block ``layer``: a site (``mlp_out``, ``attn_out``,
    ``mlp_post``, ...), a component (``mlp``, ``attn``, ``layer``: see
    :data:`~reachlens.engine.sites.COMPONENTS`), or several sites (``"attn_out+mlp_out"``, a list).

    Hook names and the layer are resolved now: a bad layer or site raises before anything runs.

    >>> zero_ablation(model, 1, "layer")  # doctest: +SKIP
    [('blocks.1.hook_attn_out', <function zero_hook ...>), ('blocks.1.hook_mlp_out', <function zero_hook ...>)]
    """
    return [(hook_name(model, layer, s, write=True), zero_hook) for s in sites_of(site)]


@contextlib.contextmanager
def ablated(model, layer: int, site: str | Sequence[str] = "mlp_out") -> Iterator[None]:
    """Within the block, ``site`` of block ``layer`` is zeroed on every forward (see :func:`zero_ablation`)."""
    with model.hooks(fwd_hooks=zero_ablation(model, layer, site)):
        yield
