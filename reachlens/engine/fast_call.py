"""A component's forward called without the wrappers around it, where they would do nothing.

Calling a TransformerLens component runs, before its ``forward``, the bridge's ``__call__`` (Accelerate's
``align_module_device`` around the wrapped HuggingFace module, a no-op when that module is not offloaded) and
``nn.Module.__call__`` (which only dispatches to ``forward`` when no PyTorch hook is registered on the module and no
global module hook exists). A decoding step calls the decoder blocks, the embedding and the rotary table once each per
forward, so these wrappers are a measurable part of a small model's step. :func:`bare_call` calls ``forward``
directly when every wrapper would be a no-op, and the call itself otherwise; :func:`embed` does the same for the
token embedding, whose bridge also reads the wrapped module's signature (``inspect.signature``) on every call.

Numerics: the same operations on the same tensors; only Python around them is skipped.
"""

from __future__ import annotations

from typing import Any

from jaxtyping import Float, Int
from torch import Tensor, nn

from reachlens.engine.fast_attention import global_hooks, points_hooked, torch_hooked

__all__ = ["bare_call", "embed"]


def _bare(module: nn.Module) -> bool:
    """Whether calling ``module`` would only run its ``forward``: no PyTorch hook on it, no global module hook, and
    the module it wraps (if any) not offloaded by Accelerate."""
    inner = module._modules.get("_original_component")
    return not (torch_hooked(module) or global_hooks() or (inner is not None and "_hf_hook" in inner.__dict__))


def bare_call(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """``module(*args, **kwargs)``, calling ``forward`` directly when the call's wrappers would do nothing."""
    return module.forward(*args, **kwargs) if _bare(module) else module(*args, **kwargs)


def embed(bridge: nn.Module, input_ids: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos d_model"]:
    """``bridge(input_ids)`` for the model's token embedding: for a TransformerLens ``EmbeddingBridge`` around a plain
    ``nn.Embedding`` with no hook on its ``hook_in``/``hook_out`` and nothing the call's wrappers would do, what its
    forward returns (the embedding, in the table's dtype), without the bridge's per-call signature lookup."""
    from transformer_lens.model_bridge.generalized_components.embedding import EmbeddingBridge

    inner = bridge._modules.get("_original_component")
    if (type(bridge) is not EmbeddingBridge or type(inner) is not nn.Embedding or not _bare(bridge)
            or torch_hooked(inner) or points_hooked((bridge.hook_in, bridge.hook_out))):
        return bridge(input_ids)
    out = inner.forward(input_ids)
    return out if out.dtype == inner.weight.dtype else out.to(inner.weight.dtype)

