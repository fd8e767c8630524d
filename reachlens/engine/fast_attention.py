"""A fused attention path for the bridge's rotary attention, used only where it cannot change a hook.

TransformerLens' ``PositionEmbeddingsAttentionBridge`` re-implements attention step by step so that
``hook_rot_q``, ``hook_attn_scores`` and ``hook_pattern`` can fire: two batched matmuls, a causal mask
built and applied on every call, a float32 softmax, a NaN scrub. At the batch sizes of a K-sample
probe that eager path is about half of a decoding step. When none of those *internal* hook points
has a hook attached, the same result comes from ``torch.nn.functional.scaled_dot_product_attention``
in one fused call.

:func:`fused_attention` swaps that path in for the duration of a reachlens forward. Each call checks
the hook points it would skip and falls back to the bridge's own forward if any carries a hook, so a
user who patches ``hook_pattern`` gets the bridge's exact semantics. Hook points that the fused path
still runs keep firing: ``attn.hook_in``, ``hook_cos``/``hook_sin``, the q/k/v/o linear bridges (so
``hook_q``, ``hook_k``, ``hook_v``, ``hook_z``), the QK-norms of Qwen3 and OLMo 2 (``q_norm``/``k_norm``,
``hook_q_normed``/``hook_k_normed``), ``attn.hook_out`` (``hook_attn_out``), and every block- and
MLP-level hook.

Only the plain configuration is fused (Llama, Mistral without a sliding window, Qwen2, Qwen3 and
OLMo 2 with their QK-norm before rotary): no other qk-norm, no split qkv inputs, no gated or
per-head-result modes, no softcapping, sinks or sliding windows.
Anything else always takes the bridge's path. Numerics: SDPA and the eager path agree to float32
rounding (about 1e-6 relative); greedy decoding is tested token for token against HuggingFace,
which itself uses SDPA.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from types import MethodType

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float
from torch import Tensor
from transformer_lens.hook_points import HookPoint
from transformer_lens.model_bridge.generalized_components.linear import LinearBridge

from reachlens.engine.kv_cache import SharedPrefix, SlotKVCache, grouped_matmul

__all__ = [
    "can_fuse", "cascade_attention", "fire", "found_once", "fused_attention", "fusable_attentions", "global_hooks", "linear_call",
    "points_hooked", "rotary", "rotary_tables", "swap_forward", "torch_hooked",
]

_CONFIG_FLAGS = (
    "use_split_qkv_input", "use_attn_in", "gated_q_proj", "rotary_interleaved_cos_sin",
    "rotary_adjacent_pairs", "qk_norm_after_rope", "use_attn_result",
)
_HF_ATTRS = ("key_multiplier", "attn_logit_softcapping", "sinks", "sliding_window")


def can_fuse(attn) -> bool:
    """Whether ``attn`` has the plain configuration the fused path reproduces."""
    from transformer_lens.model_bridge.generalized_components.position_embeddings_attention import (
        PositionEmbeddingsAttentionBridge,
    )

    if type(attn) is not PositionEmbeddingsAttentionBridge:
        return False
    hf = attn.original_component
    if hf is None or any(getattr(hf, a, None) is not None for a in _HF_ATTRS):
        return False
    cfg = attn.config
    if any(bool(getattr(cfg, f, False)) for f in _CONFIG_FLAGS):
        return False
    if "gate" in attn.submodules:
        return False
    norms = [name for name in ("q_norm", "k_norm") if name in attn.submodules]
    if norms and (
        norms != ["q_norm", "k_norm"] or attn._qk_norm_phase not in ("pre_reshape", "post_reshape")
        or attn._qk_norm_per_head or bool(getattr(cfg, "qk_norm_after_rope", False))
    ):
        return False  # QK-norm before rotary, over all heads (OLMo 2) or over each head (Qwen3) only
    hf_cfg = getattr(hf, "config", None)
    if getattr(hf_cfg, "clip_qkv", None) is not None:
        return False
    rope = getattr(hf_cfg, "rope_parameters", None)
    if isinstance(rope, dict) and rope.get("llama_4_scaling_beta") is not None:
        return False
    return all(hasattr(attn, n) for n in ("q", "k", "v", "o"))


def cascade_attention(
    q: Float[Tensor, "batch heads 1 d_head"],
    prefix_k: Float[Tensor, "groups kv_heads prefix d_head"],
    prefix_v: Float[Tensor, "groups kv_heads prefix d_head"],
    own_k: Float[Tensor, "batch kv_heads room d_head"],
    own_v: Float[Tensor, "batch kv_heads room d_head"],
    shared: SharedPrefix,
    attention_mask: Bool[Tensor, "batch 1 1 kv"] | None,
    scale: float,
    own: int | None = None,
) -> Float[Tensor, "batch heads 1 d_head"]:
    """One decoding step of attention over a shared prompt part plus each row's own part.

    Scores against the prompt's keys are one matrix product per prompt for all of its rows (GQA heads
    folded into the rows); scores against a row's own keys are a small batched product. One softmax
    runs over both parts, so the result equals attention over the concatenated keys. The row-own buffers
    may have room beyond the ``own`` positions written (finite there; ``None``: all are written): the
    products run over the whole buffer, the scores of the unwritten positions are dropped before the
    softmax and their probabilities are zeros.
    """
    b, h, _, d = q.shape
    hk = prefix_k.shape[1]
    room = own_k.shape[2]
    own = room if own is None else own
    n_prefix = prefix_k.shape[2]
    qg = q.reshape(b, hk, h // hk, d)
    s_own = torch.matmul(qg, own_k.transpose(-1, -2))[..., :own]
    if n_prefix:
        s_own = torch.cat([grouped_matmul(qg, prefix_k.transpose(-1, -2), shared), s_own], dim=-1)
    scores = s_own.float() * scale
    if attention_mask is not None:
        # where rather than masked_fill(~mask): the same values, one operation fewer and a faster broadcast
        scores = torch.where(attention_mask[:, :, -1:, : scores.shape[-1]], scores, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1).to(q.dtype)
    p_own = probs[..., n_prefix:]
    if room > own:
        p_own = torch.cat([p_own, p_own.new_zeros((*p_own.shape[:-1], room - own))], dim=-1)
    out = torch.matmul(p_own, own_v)
    if n_prefix:
        out = grouped_matmul(probs[..., :n_prefix], prefix_v, shared) + out
    return out.reshape(b, h, 1, d)


_TABLES: tuple = (None, None, None)
"""The last ``(cos, sin, tables)`` of :func:`rotary_tables` kept for reuse (every layer of a forward reads the same
position embeddings); read and replaced as one tuple."""


def rotary_tables(
    cos: Float[Tensor, "batch pos d_head"], sin: Float[Tensor, "batch pos d_head"], *, reuse: bool = False
) -> tuple[Tensor, Tensor]:
    """``cos`` and ``sin`` laid out for :func:`rotary`: ``cos`` with a head axis, ``sin`` with it and with its first
    half negated. ``reuse``: the tables of the last call are returned when ``cos`` and ``sin`` are the same tensors (the
    caller guarantees that nothing edited them in place: no hook on the points that hand them out)."""
    global _TABLES
    last = _TABLES
    if reuse and last[0] is cos and last[1] is sin:
        return last[2]
    half = sin.shape[-1] // 2
    tables = (cos.unsqueeze(1), torch.cat((-sin[..., :half], sin[..., half:]), dim=-1).unsqueeze(1))
    # not reusable: forget the last ones too (a hook that handed these out may have edited them in place)
    _TABLES = (cos, sin, tables) if reuse else (None, None, None)
    return tables


def rotary(x: Float[Tensor, "batch heads pos d_head"], tables: tuple[Tensor, Tensor]) -> Float[Tensor, "batch heads pos d_head"]:
    """HuggingFace's rotary embedding (``apply_rotary_pos_emb`` of Llama and its copies), ``x * cos +
    rotate_half(x) * sin`` with ``rotate_half(x) = cat(-x2, x1)`` of ``x``'s halves, computed as ``x * cos +
    roll(x, d/2) * sin'`` over :func:`rotary_tables` (``sin'``: the sine with its first half negated). Each element is
    the same two products of the same magnitudes (a sign moved from one factor to the other is exact) and the same
    sum: the same bits, in four operations instead of eight. An even head size only."""
    cos, signed = tables
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed


def global_hooks() -> bool:
    """Whether a global PyTorch module hook is registered (it would fire on every module call)."""
    mod = torch.nn.modules.module
    return bool(mod._global_forward_hooks or mod._global_forward_pre_hooks or mod._global_backward_hooks
                or mod._global_backward_pre_hooks)


def torch_hooked(m: torch.nn.Module) -> bool:
    """Whether ``m`` carries a PyTorch forward, forward-pre or backward hook of its own."""
    return bool(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks)


def fire(point: HookPoint, x: Tensor) -> Tensor:
    """``point(x)``: a hook point's call, which returns ``x`` itself unless a hook (its own or a global module hook)
    is attached; then the call runs. Skipping the module call of an unhooked point saves ``nn.Module.__call__`` (a
    few microseconds, some thirty times per decoder layer and step)."""
    if point._forward_hooks or point._forward_pre_hooks or point._backward_hooks or global_hooks():
        return point(x)
    return x


def _linear_parts(lin) -> tuple[HookPoint, torch.nn.Linear, HookPoint] | None:
    """``(hook_in, the wrapped nn.Linear, hook_out)`` of a plain ``LinearBridge`` (looked up once per bridge: the
    bridge's attribute lookups are not free), else None."""
    parts = lin.__dict__.get("_reachlens_linear")
    if parts is None:
        inner = getattr(lin, "original_component", None)
        ok = type(lin) is LinearBridge and type(inner) is torch.nn.Linear
        parts = (lin.hook_in, inner, lin.hook_out) if ok else ()
        object.__setattr__(lin, "_reachlens_linear", parts)  # a bridge forwards attribute writes to the HF module
    return parts or None


def linear_call(lin, x: Tensor) -> Tensor:
    """``lin(x)`` for a TransformerLens ``LinearBridge``, without the component call around its forward when nothing
    could act there: its ``hook_in``, the wrapped map's own ``forward`` (fast_linear's where swapped in), its
    ``hook_out``, as ``LinearBridge.forward`` does. Anything else (a PyTorch hook on the bridge or the map, a global
    module hook, another component class, a pending ``hook_in`` suppression, Accelerate offload) takes ``lin(x)``."""
    parts = _linear_parts(lin)
    if (parts is None or parts[1] is not lin.original_component or lin._suppress_next_hook_in or torch_hooked(lin)
            or torch_hooked(parts[1]) or global_hooks() or "_hf_hook" in parts[1].__dict__):
        return lin(x)
    hook_in, inner, hook_out = parts
    y = fire(hook_out, inner.forward(fire(hook_in, x)))
    object.__setattr__(lin, "_fired_hook_out", True)
    return y


def _skipped_hook_points(attn) -> list[HookPoint]:
    """Hook points inside ``attn`` that the fused path does not run."""
    kept = {id(getattr(attn, n)) for n in ("hook_in", "hook_out", "hook_cos", "hook_sin")}
    norms = ("q_norm", "k_norm") if "q_norm" in attn.submodules else ()
    kept |= {id(getattr(attn, n)) for n in ("hook_q_normed", "hook_k_normed") if norms}
    for proj in ("q", "k", "v", "o", *norms):
        kept |= {id(m) for m in getattr(attn, proj).modules()}
    return [m for m in attn.modules() if isinstance(m, HookPoint) and id(m) not in kept]


def points_hooked(points: Sequence[HookPoint]) -> bool:
    """Whether any of ``points`` carries a hook."""
    return any(p._forward_hooks or p._forward_pre_hooks or p._backward_hooks for p in points)


def _fused_forward(self, *args, **kwargs):
    if points_hooked(self._reachlens_skipped) or self.training:
        return self._reachlens_bridge_forward(*args, **kwargs)
    hidden = kwargs.pop("hidden_states") if "hidden_states" in kwargs else args[0]
    position_embeddings = kwargs.pop("position_embeddings")
    attention_mask = kwargs.pop("attention_mask", None)
    hf = self.original_component
    head_dim = hf.head_dim
    hook_in, q_map, k_map, v_map, o_map, hook_cos, hook_sin, hook_out = self._reachlens_points
    hidden = fire(hook_in, hidden)
    b, q_len = hidden.shape[:2]
    q, k, v = linear_call(q_map, hidden), linear_call(k_map, hidden), linear_call(v_map, hidden)
    phase = self._qk_norm_phase if "q_norm" in self.submodules else None
    if phase == "pre_reshape":  # OLMo 2: one RMSNorm over all heads, before rotary (as the bridge does)
        q, k = self.hook_q_normed(self.q_norm(q)), self.hook_k_normed(self.k_norm(k))
    q = q.view(b, q_len, -1, head_dim).transpose(1, 2)
    k = k.view(b, q_len, -1, head_dim).transpose(1, 2)
    v = v.view(b, q_len, -1, head_dim).transpose(1, 2)
    if phase == "post_reshape":  # Qwen3: RMSNorm over each head, before rotary
        q, k = self.hook_q_normed(self.q_norm(q)), self.hook_k_normed(self.k_norm(k))
    cos, sin = position_embeddings
    quiet = not points_hooked((hook_cos, hook_sin))
    cos, sin = fire(hook_cos, cos), fire(hook_sin, sin)  # the bridge's _apply_position_embedding_hooks
    if head_dim % 2:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        q, k = apply_rotary_pos_emb(q, k, cos, sin)
    else:
        tables = rotary_tables(cos, sin, reuse=quiet and not global_hooks())
        q, k = rotary(q, tables), rotary(k, tables)
    scale = getattr(hf, "scaling", head_dim**-0.5)
    cache = kwargs.get("past_key_values")
    if isinstance(cache, SlotKVCache) and cache.shared is not None and q_len == 1:
        slot = cache.append(k, v, self._layer_idx)
        *own_kv, own = cache.own_padded(slot)
        out = cascade_attention(q, *cache.prefix(slot), *own_kv, cache.row_shared, attention_mask, scale, own=own)
        return fire(hook_out, linear_call(o_map, out.transpose(1, 2).reshape(b, q_len, -1))), None
    k, v = self._update_kv_cache(k, v, **kwargs)
    kv_len = k.shape[-2]
    causal = False
    mask = None
    if attention_mask is not None:
        mask = attention_mask[..., -q_len:, :kv_len]
        if mask.dtype != torch.bool:
            mask = mask.to(q.dtype)
    elif q_len > 1:
        if kv_len == q_len:
            causal = True
        else:
            mask = torch.ones(q_len, kv_len, dtype=torch.bool, device=q.device).tril_(kv_len - q_len)
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal, scale=scale,
        enable_gqa=k.shape[1] != q.shape[1],
    )
    out = out.transpose(1, 2).reshape(b, q_len, -1)
    out = fire(hook_out, linear_call(o_map, out))
    return out, None


def found_once(model, name: str, find: Callable[[], list]) -> list:
    """``find()``, computed on the first call for ``model`` and kept on it as ``name`` (the modules a kernel swap
    stands in for: they are looked for once per model, not at every forward)."""
    found = model.__dict__.get(name)
    if found is None:
        found = find()
        object.__setattr__(model, name, found)  # a bridge forwards unknown attribute writes to the HF module
    return found


def fusable_attentions(model) -> list:
    """The attention bridges of ``model`` the fused path can stand in for (computed once per model)."""

    def find() -> list:
        found = []
        for block in model.blocks:
            attn = getattr(block, "attn", None)
            if attn is not None and can_fuse(attn):
                attn._reachlens_skipped = _skipped_hook_points(attn)
                # the components the fused path calls, looked up once (a bridge's submodule lookups are not free)
                object.__setattr__(attn, "_reachlens_points", tuple(getattr(attn, n) for n in (
                    "hook_in", "q", "k", "v", "o", "hook_cos", "hook_sin", "hook_out")))
                found.append(attn)
        return found

    return found_once(model, "_reachlens_fusable", find)


@contextlib.contextmanager
def swap_forward(modules: Sequence[torch.nn.Module], forward: Callable) -> Iterator[int]:
    """Within the block, each module's ``forward`` is ``forward`` bound to it (the module's own kept as
    ``_reachlens_bridge_forward``, for falling back); yields how many were swapped. A module an
    enclosing call already swapped is left as it is."""
    patched = []
    for module in modules:
        if "forward" in module.__dict__:  # already swapped by an enclosing call
            continue
        module._reachlens_bridge_forward = module.forward
        # object.__setattr__: a bridge forwards unknown attribute writes to the wrapped HF module
        object.__setattr__(module, "forward", MethodType(forward, module))
        patched.append(module)
    try:
        yield len(patched)
    finally:
        for module in patched:
            object.__delattr__(module, "forward")


def fused_attention(model) -> contextlib.AbstractContextManager[int]:
    """Within the block, eligible attention bridges of ``model`` use the fused path; yields how many."""
    return swap_forward(fusable_attentions(model), _fused_forward)
