"""Zero-ablation: silence the attention output, the MLP output, or both, of one block.

The factories return ``fwd_hooks`` for ``with model.hooks(fwd_hooks=...)``. A hook on
``blocks.L.hook_mlp_out`` (the MLP's output before it is added to the residual stream) that returns
zeros makes the block add nothing from its MLP; ``hook_attn_out`` does the same for attention.
Zeroing the whole ``layer`` zeroes both, so the block passes its input residual through unchanged
(the residual stream is never zeroed). Because reachlens' engine runs every forward (prompt prefill
and each decoding step) through the hooked components, the ablation is live on every generated
token, not only on the prompt.

Numerics: the hook returns a fresh zero tensor, so the silenced contribution is exactly zero and an
ablated forward equals a HuggingFace forward whose MLP returns zeros, up to the fused
attention's float32 rounding (about 1e-6 relative).

>>> with model.hooks(fwd_hooks=zero_ablation(model, 3, "mlp")):  # doctest: +SKIP
...     result = audit(model, task, protocol)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from jaxtyping import Float
from torch import Tensor

from reachlens.engine.hooks import row_agnostic
from reachlens.interventions._hooks import INTERVENTIONS, FwdHook, component_hook_names

__all__ = ["zero_hook", "zero_ablation", "ablated"]


@row_agnostic
def zero_hook(tensor: Float[Tensor, "..."], *, hook) -> Float[Tensor, "..."]:
    """A hook function that replaces the activation with zeros (same shape, dtype and device)."""
    return torch.zeros_like(tensor)


@INTERVENTIONS.decorator("zero")
def zero_ablation(model, layer: int, component: str = "mlp") -> list[FwdHook]:
    """``fwd_hooks`` that zero ``component`` (``mlp``, ``attn`` or ``layer``) of block ``layer``.

    Hook names and the layer are resolved now: a bad layer or component raises before anything runs.

    >>> zero_ablation(model, 1, "layer")  # doctest: +SKIP
    [('blocks.1.hook_attn_out', <function zero_hook ...>), ('blocks.1.hook_mlp_out', <function zero_hook ...>)]
    """
    return [(name, zero_hook) for name in component_hook_names(model, layer, component)]


@contextlib.contextmanager
def ablated(model, layer: int, component: str = "mlp") -> Iterator[None]:
    """Within the block, ``component`` of block ``layer`` is zeroed on every forward."""
    with model.hooks(fwd_hooks=zero_ablation(model, layer, component)):
        yield
