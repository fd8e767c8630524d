"""A decoder block without the bridge's per-call bookkeeping, used only where it cannot change a hook.

A TransformerLens ``BlockBridge`` call runs, around the HuggingFace decoder layer, the bridge's own per-call work:
capture-hook wiring, a ``stop_at_layer`` check, ``inspect.signature`` of the layer's forward to filter its keyword
arguments, and, for each of the eleven components below it (two norms, attention, the MLP and its three linear maps,
each a ``GeneralizedComponent``), Accelerate's offload alignment and ``nn.Module.__call__``. On the zoo's 6-layer
model that bookkeeping was a quarter of a decoding step's fixed cost (one row: 4.4 ms a step with it, 3.3 ms
without), and the zero-ablation sweep of ``benchmarks/bench_peers.py`` runs 1.07x faster without it.

:func:`fast_blocks` swaps in, for the duration of a reachlens forward, a block forward that does what the
HuggingFace layer does, in the same order, calling each component's own ``forward`` (the fused norm and fused
attention of :mod:`reachlens.engine.fast_norm` and :mod:`reachlens.engine.fast_attention` where those are swapped
in, else the bridge's) and firing every hook point the bridge fires on that path: ``hook_resid_pre``
(``hook_in``), ``ln1``'s, the attention's (``hook_attn_out`` ...), ``ln2``'s (``hook_resid_mid`` is ``ln2.hook_in``),
``hook_mlp_in`` (when the model's ``use_hook_mlp_in`` is on, as the bridge's capture hook does), ``mlp.hook_in``,
each projection's ``hook_in``/``hook_out`` (``hook_pre`` is the gate's, ``hook_pre_linear`` the up projection's,
``hook_post`` the down projection's input), ``hook_mlp_out``, ``hook_resid_post``. The result is bit-identical to
the bridge's (the same operations on the same tensors; ``tests/engine/test_fast_block.py``).

Each call falls back to the bridge's own block forward when anything the shortcut would skip could act: a hook on
any other hook point of the block (``hook_attn_in``, ``hook_q_input``, ``hook_pattern``, ...), a
PyTorch hook on one of the components it calls directly or a global module hook, training mode, a
``stop_at_layer``/``start_at_layer`` run, processed (folded) MLP weights, or a call the layer was not given in the
decoder's own form. Only the pre-norm layer of Llama, Mistral, Qwen2 and Qwen3 with their gated MLP is taken
(``LlamaDecoderLayer`` and its copies, whose forwards are the same code); any other block keeps the bridge's
forward, and so does a block whose components are offloaded by Accelerate.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn
from transformer_lens.hook_points import HookPoint

from reachlens.engine.fast_attention import (
    fire, found_once, fusable_attentions, global_hooks, linear_call, points_hooked, swap_forward, torch_hooked,
)

__all__ = ["fast_blocks", "fusable_blocks"]

_LAYERS = frozenset({"LlamaDecoderLayer", "MistralDecoderLayer", "Qwen2DecoderLayer", "Qwen3DecoderLayer"})
_MLPS = frozenset({"LlamaMLP", "MistralMLP", "Qwen2MLP", "Qwen3MLP"})
_ATTN_ARGS = ("attention_mask", "position_ids", "past_key_values", "use_cache", "position_embeddings")


@dataclass(frozen=True)
class _Parts:
    """One block's components, and what a call must check before it takes the shortcut."""

    ln1: nn.Module
    attn: nn.Module
    ln2: nn.Module
    mlp: nn.Module
    gate: nn.Module
    up: nn.Module
    down: nn.Module
    act: nn.Module
    direct: tuple[nn.Module, ...]
    """Modules whose ``forward`` is called without ``__call__`` or not at all (the HuggingFace layer and MLP): any
    PyTorch hook on one sends the block back."""
    watched: tuple[HookPoint, ...]
    """The block's hook points the shortcut does not fire itself or through a component's forward."""
    points: tuple[HookPoint, ...]
    """The hook points it fires itself: the block's ``hook_in``, ``hook_mlp_in``, ``hook_out``, the MLP's
    ``hook_in``, ``hook_out``."""


def _parts(block) -> _Parts | None:
    """The parts of ``block`` when it has the one layout the shortcut reproduces, else None."""
    hf = getattr(block, "original_component", None)
    subs = getattr(block, "submodules", None) or {}
    from transformer_lens.model_bridge.generalized_components.block import BlockBridge

    if (type(block) is not BlockBridge or hf is None or type(hf).__name__ not in _LAYERS
            or set(subs) != {"ln1", "attn", "ln2", "mlp"} or block.mlp_reads_resid_directly):
        return None
    ln1, attn, ln2, mlp = subs["ln1"], subs["attn"], subs["ln2"], subs["mlp"]
    if not hasattr(attn, "_reachlens_skipped"):  # an attention the fused path does not cover keeps the bridge's block
        return None
    if (hf.input_layernorm is not ln1 or hf.self_attn is not attn or hf.post_attention_layernorm is not ln2
            or hf.mlp is not mlp):
        return None
    inner = getattr(mlp, "original_component", None)
    mlp_subs = getattr(mlp, "submodules", None) or {}
    if inner is None or type(inner).__name__ not in _MLPS or set(mlp_subs) != {"gate", "in", "out"}:
        return None
    gate, up, down = mlp_subs["gate"], mlp_subs["in"], mlp_subs["out"]
    if inner.gate_proj is not gate or inner.up_proj is not up or inner.down_proj is not down:
        return None
    # the HuggingFace layer and MLP whose forwards the shortcut does not call (the bridge's block calls the layer,
    # firing a PyTorch hook a user put on it) and the components it calls directly; the projections: linear_call
    # checks their own hooks
    direct = (ln1, attn, ln2, mlp, hf, inner)
    if any("_hf_hook" in m.__dict__ for m in block.modules()):  # Accelerate offload: keep the bridge's alignment
        return None
    fired = {id(p) for p in (block.hook_in, block.hook_out, block.hook_mlp_in, mlp.hook_in, mlp.hook_out)}
    for comp in (gate, up, down):
        fired |= {id(comp.hook_in), id(comp.hook_out)}
    # the norms' and the attention's own points: their forward (fused or the bridge's) fires or checks them
    for comp in (ln1, attn, ln2):
        fired |= {id(p) for p in comp.modules() if isinstance(p, HookPoint)}
    attn_skipped = {id(p) for p in attn._reachlens_skipped}
    watched = tuple(p for p in block.modules() if isinstance(p, HookPoint)
                    and (id(p) not in fired or id(p) in attn_skipped))
    points = (block.hook_in, block.hook_mlp_in, block.hook_out, mlp.hook_in, mlp.hook_out)
    return _Parts(ln1, attn, ln2, mlp, gate, up, down, inner.act_fn, direct, watched, points)


def _clear(block, parts: _Parts) -> bool:
    """Whether nothing the shortcut skips could act on this call. The block's own capture hooks (the pre-hooks its
    first forward puts on ``ln1``, keeping the residual for a split-qkv fork that only a watched hook point uses,
    and on ``ln2``, firing ``hook_mlp_in``, which the shortcut fires itself) are not in the way."""
    if global_hooks():
        return False
    for m in parts.direct:
        if torch_hooked(m):
            own = {h.id for h in block._capture_hook_handles}
            if not all(own.issuperset(hooks) for hooks in (m._forward_hooks, m._forward_pre_hooks, m._backward_hooks,
                                                            m._backward_pre_hooks)):
                return False
    return not points_hooked(parts.watched)


def _fast_forward(self, *args, **kwargs):
    parts: _Parts = self._reachlens_parts
    if (self.training or len(args) != 1 or not isinstance(args[0], torch.Tensor) or "hidden_states" in kwargs
            # a bridge keeps "_" attributes in its own __dict__ (a getattr that misses raises inside the bridge's
            # __getattr__: microseconds, three times a call)
            or not kwargs or self.__dict__.get("_stop_at_layer_idx") is not None
            or self.__dict__.get("_start_at_layer_idx") is not None
            or parts.mlp.__dict__.get("_use_processed_weights", False) or not _clear(self, parts)):
        return self._reachlens_bridge_forward(*args, **kwargs)
    rest = dict(kwargs)
    attn_kwargs = {name: rest.pop(name, False if name == "use_cache" else None) for name in _ATTN_ARGS}
    hook_in, hook_mlp_in, hook_out, mlp_in, mlp_out = parts.points
    x = fire(hook_in, args[0])
    h, _ = parts.attn.forward(hidden_states=parts.ln1.forward(x), **attn_kwargs, **rest)
    x = x + h
    h = fire(mlp_in, parts.ln2.forward(fire(hook_mlp_in, x) if self._read_use_hook_mlp_in() else x))
    h = linear_call(parts.down, parts.act(linear_call(parts.gate, h)) * linear_call(parts.up, h))
    x = x + fire(mlp_out, h)
    return fire(hook_out, x)


def fusable_blocks(model) -> list:
    """The blocks of ``model`` the shortcut can stand in for (found once per model)."""

    def find() -> list:
        fusable_attentions(model)  # marks each fusable attention with the hook points it skips
        found = []
        for block in model.blocks:
            parts = _parts(block)
            if parts is not None:
                object.__setattr__(block, "_reachlens_parts", parts)
                found.append(block)
        return found

    return found_once(model, "_reachlens_fast_blocks", find)


def fast_blocks(model) -> contextlib.AbstractContextManager[int]:
    """Within the block, eligible decoder blocks of ``model`` take the shortcut; yields how many."""
    return swap_forward(fusable_blocks(model), _fast_forward)
