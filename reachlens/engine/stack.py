"""The one way reachlens runs a hooked model: embed, a route of blocks, final norm, unembed.

:class:`LayerStack` drives the components of a TransformerLens ``TransformerBridge`` directly
(``embed``, ``rotary_emb``, ``blocks[i]``, ``ln_final``, ``unembed``). Because the bridge installs
those components inside the HuggingFace model, they *are* the model: every TransformerLens hook the
caller attached (``blocks.3.hook_mlp_out``, ``blocks.0.attn.hook_pattern``, ...) fires on every call,
prompt prefill and each decoding step alike. The sampler, the route executor, log-likelihood scoring
and every intervention go through :meth:`LayerStack.forward`; nothing in reachlens calls the HF
``forward`` or ``TransformerBridge.generate``.

The identity route ``range(n_layers)`` reproduces the bridge's own forward: exactly with
``fused=False``, and to float32 rounding with the default fused attention path (which steps aside
whenever an attention-internal hook such as ``hook_pattern`` is attached). A different route (skip, repeat, reorder) runs the same weights in another
order; hooks are named by the layer that runs, so a repeated layer fires its hooks twice.

Supported architectures are the decoder-only families whose bridge blocks take rotary
``position_embeddings`` and whose embedding is unscaled: Llama, Mistral, Qwen2, Qwen3. Others are
refused by name rather than run subtly wrong.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from reachlens.engine.fast_attention import fused_attention
from reachlens.engine.kv_cache import SlotKVCache
from reachlens.errors import ReachlensError

__all__ = ["LayerStack", "SUPPORTED_MODEL_TYPES", "validate_route"]

SUPPORTED_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})


def validate_route(route: Sequence[int], n_layers: int) -> tuple[int, ...]:
    """``route`` as a tuple of layer indices, each checked against the model's depth.

    >>> validate_route([0, 1, 1, 2], n_layers=3)
    (0, 1, 1, 2)
    """
    out = []
    for step, layer in enumerate(route):
        if isinstance(layer, bool) or not isinstance(layer, (int,)) and not (
            isinstance(layer, Tensor) and layer.ndim == 0
        ):
            raise ReachlensError(f"route step {step}: layer {layer!r} is not an integer index")
        layer = int(layer)
        if not 0 <= layer < n_layers:
            raise ReachlensError(
                f"route step {step}: layer {layer} is out of range for a {n_layers}-layer model "
                f"(valid: 0-{n_layers - 1})"
            )
        out.append(layer)
    if not out:
        raise ReachlensError("a route needs at least one layer")
    return tuple(out)


class LayerStack:
    """The executable view of a TransformerBridge: components, depth, and a route-aware forward.

    >>> stack = LayerStack(model)  # doctest: +SKIP
    >>> logits = stack.forward(ids)  # doctest: +SKIP
    """

    def __init__(self, model: torch.nn.Module, *, fused: bool = True) -> None:
        for part in ("embed", "blocks", "ln_final", "unembed", "rotary_emb"):
            if not hasattr(model, part):
                raise ReachlensError(
                    f"{type(model).__name__} has no {part!r}: reachlens runs TransformerLens "
                    "TransformerBridge models with rotary attention (load them with reachlens.load_model)"
                )
        hf = getattr(model, "original_model", None)
        model_type = getattr(getattr(hf, "config", None), "model_type", None)
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise NotImplementedError(
                f"model_type {model_type!r} is not supported by reachlens' executor yet; supported: "
                f"{sorted(SUPPORTED_MODEL_TYPES)}"
            )
        self.model = model
        self.model_type = model_type
        self.fused = fused
        """Use the fused attention path where no attention-internal hook is attached (see
        :mod:`reachlens.engine.fast_attention`); False runs the bridge's eager attention everywhere."""
        self.n_layers = len(model.blocks)
        self.identity = tuple(range(self.n_layers))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def route(self, route: Sequence[int] | None) -> tuple[int, ...]:
        return self.identity if route is None else validate_route(route, self.n_layers)

    def new_cache(self, max_len: int, route: Sequence[int] | None = None) -> SlotKVCache:
        return SlotKVCache(self.route(route), max_len)

    def embed(self, input_ids: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos d_model"]:
        return self.model.embed(input_ids)

    def run_blocks(
        self,
        resid: Float[Tensor, "batch pos d_model"],
        position_ids: Int[Tensor, "batch pos"],
        attention_mask: Bool[Tensor, "batch 1 pos kv"] | None,
        route: tuple[int, ...],
        cache: SlotKVCache | None = None,
        first_step: int = 0,
    ) -> Float[Tensor, "batch pos d_model"]:
        """Run ``route`` from ``resid``; route step ``i`` uses cache slot ``first_step + i``."""
        pos_emb = self.model.rotary_emb(resid, position_ids)
        for i, layer in enumerate(route):
            if cache is not None:
                cache.enter(first_step + i)
            resid = self.model.blocks[layer](
                resid,
                attention_mask=attention_mask,
                position_ids=position_ids,
                position_embeddings=pos_emb,
                past_key_values=cache,
                use_cache=cache is not None,
            )
            if isinstance(resid, tuple):
                resid = resid[0]
        return resid

    def unembed(self, resid: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_vocab"]:
        return self.model.unembed(self.model.ln_final(resid))

    def forward(
        self,
        input_ids: Int[Tensor, "batch pos"],
        *,
        position_ids: Int[Tensor, "batch pos"] | None = None,
        attention_mask: Bool[Tensor, "batch 1 pos kv"] | None = None,
        cache: SlotKVCache | None = None,
        route: Sequence[int] | None = None,
        last_only: bool = False,
    ) -> Float[Tensor, "batch out_pos d_vocab"]:
        """Logits of ``input_ids`` along ``route`` (the full model when None).

        Args:
            position_ids: rotary positions per row (default ``past + arange(pos)``).
            attention_mask: boolean ``[batch, 1, pos, kv]``, True where a query may attend; None means
                plain causal attention over the cache and the new positions.
            cache: a :class:`SlotKVCache` built for the same route; it is extended by ``pos``.
            last_only: unembed only the last position (what decoding needs).
        """
        steps = self.route(route)
        if cache is not None and cache.route != steps:
            raise ValueError(f"cache was built for route {cache.route}, not {steps}")
        past = 0 if cache is None else cache.length
        if position_ids is None:
            position_ids = torch.arange(past, past + input_ids.shape[1], device=input_ids.device).expand(
                input_ids.shape[0], -1
            )
        with fused_attention(self.model) if self.fused else contextlib.nullcontext():
            resid = self.run_blocks(self.embed(input_ids), position_ids, attention_mask, steps, cache)
        if cache is not None:
            cache.commit()
        if last_only:
            resid = resid[:, -1:]
        return self.unembed(resid)
