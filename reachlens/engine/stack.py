"""The one way reachlens runs a hooked model: the family's own input side, a route of blocks, its own head.

One module (about 590 lines) because each family's input side, the route of blocks and its head are one
forward, and every caller goes through it.

:class:`LayerStack` runs a TransformerLens ``TransformerBridge``. The bridge installs its hooked
components (``blocks[i]``, ``ln_final``, ``unembed``, ...) *inside* the HuggingFace model, so those
components are the model: every TransformerLens hook the caller attached (``blocks.3.hook_mlp_out``,
``blocks.0.attn.hook_pattern``, ...) fires on every call, prompt prefill and each decoding step alike.
The sampler, the route executor, log-likelihood scoring and every intervention go through
:meth:`LayerStack.forward` (or its three parts :meth:`~LayerStack.prepare`,
:meth:`~LayerStack.run_layers`, :meth:`~LayerStack.unembed`); nothing in reachlens calls
``TransformerBridge.generate``.

A forward is three parts, and everything a family needs around its blocks comes from the family:

* **prepare**: the residual stream entering the first block, and the arguments HuggingFace's own
  model code passes to each decoder layer. On the *generic path* this is the family's own
  ``forward`` (``LlamaModel``, ``Gemma2Model``, ``GPT2Model``, ...) run up to its layer loop, with the
  layer list temporarily replaced by stand-ins that record each layer's arguments and stop the
  forward at the last one. So learned positions (GPT-2), embedding scaling (Gemma), the causal,
  padding and sliding-window masks of each layer type (Gemma 2/3, Mistral), the rotary tables of
  each layer type (Gemma 3's local and global bases) and partial rotary (GPT-NeoX) are computed by
  the family's code, not copied from it.
* **run_layers**: the bridge's blocks, in the order of the route. Step ``i`` runs layer ``route[i]``
  with the arguments HuggingFace gives *that* layer, so a layer keeps its attention type (sliding or
  full) wherever a route puts it; what happens inside a block (parallel attention and MLP, QK-norm,
  post-norms, fused qkv, softcapped attention) is the block's own code. With a KV cache, the
  executor announces each route step to the cache (:class:`~reachlens.engine.kv_cache.SlotKVCache`),
  so a repeated layer keeps its own keys.
* **unembed**: the family's final norm (the bridge's ``ln_final``), then the family's own causal-LM
  ``forward`` with its base model replaced by the normed residual stream, so the LM head and
  anything after it (Gemma 2's final-logit softcapping) are the family's code.

The *fused path* (Llama, Mistral, Qwen2/Qwen3 and OLMo 2 without sliding-window layers) is the same three
parts written out for that one shape (embed, rotary table, one causal mask for all layers; final
norm and head), with the fused attention of :mod:`reachlens.engine.fast_attention`, which steps
aside whenever an attention-internal hook such as ``hook_pattern`` is attached. Both paths are
tested against each other and against HuggingFace. :func:`describe` says which one a model takes.

The identity route ``range(n_layers)`` reproduces the bridge's own forward: exactly on the generic
path (``fused=False`` takes it for any model), to float32 rounding on the fused path. A different route (skip,
repeat, reorder) runs the same weights in another order; hooks are named by the layer that runs,
so a repeated layer fires its hooks twice.

Masks: :meth:`LayerStack.forward` takes HuggingFace's 2-D key mask ``[batch, past + pos]`` (True
where a key is a real token); each family builds its own 4-D masks from it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from reachlens.engine.fast_attention import fusable_attentions, fused_attention
from reachlens.engine.fast_block import fast_blocks
from reachlens.engine.fast_call import bare_call, embed
from reachlens.engine.fast_linear import fast_linears
from reachlens.engine.fast_norm import fused_norms
from reachlens.engine.hooks import restricted_rows
from reachlens.engine.host_reads import to_device, to_host
from reachlens.engine.kv_cache import SlotKVCache
from reachlens.errors import ReachlensError

__all__ = [
    "FUSED_MODEL_TYPES", "EngineInfo", "LayerInputs", "LayerStack", "RowRoutes", "SharedBelow", "UnsupportedModelError",
    "check_architecture", "describe", "validate_route",
]

FUSED_MODEL_TYPES = frozenset({"llama", "mistral", "olmo2", "qwen2", "qwen3"})
"""Families with a hand-written fused path (when they have no sliding-window layers)."""

Path = Literal["fused", "generic"]


class UnsupportedModelError(ReachlensError):
    """A model the engine cannot run (encoder-only, encoder-decoder, or no decoder-layer stack)."""


def check_architecture(config) -> None:
    """Refuse, in one line, a HuggingFace config whose model is not a decoder-only causal LM.

    Called by :func:`reachlens.load_model` on the config alone, before any weights are read.

    >>> check_architecture(transformers.BertConfig())  # doctest: +SKIP
    UnsupportedModelError: 'bert' is an encoder-only model; reachlens runs decoder-only causal LMs (...)
    """
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    model_type = getattr(config, "model_type", None)
    supported = ("reachlens runs decoder-only causal LMs (Llama, Mistral, Qwen2/3, Gemma 2/3, OLMo 2, Phi-3, "
                 "GPT-NeoX/Pythia, GPT-2, ...; see docs/models.md for the families)")
    if getattr(config, "is_encoder_decoder", False):
        raise UnsupportedModelError(f"{model_type!r} is an encoder-decoder model; {supported}")
    if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(config, "is_decoder", False):
        raise UnsupportedModelError(f"{model_type!r} is an encoder-only model; {supported}")
    remote = "AutoModelForCausalLM" in (getattr(config, "auto_map", None) or {})  # trust_remote_code models
    if model_type is not None and model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and not remote:
        raise UnsupportedModelError(f"{model_type!r} has no causal-LM head in transformers; {supported}")


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


@dataclass(frozen=True)
class EngineInfo:
    """How the engine runs one model (see :func:`describe`)."""

    model_type: str
    """HuggingFace ``config.model_type`` (``gemma2``, ``gpt_neox``, ...)."""
    architecture: str
    """The HuggingFace class the bridge wraps (``Gemma2ForCausalLM``, ...)."""
    path: Path
    """``fused``: the hand-written path with fused attention; ``generic``: the family's own forward code."""
    reason: str
    """Why this path (for the generic path: what the fused one does not cover)."""
    n_layers: int
    attention: str
    """What runs attention where no attention-internal hook is attached: ``fused`` (the fused path's
    SDPA with a shared-prompt cache) or ``bridge`` (TransformerLens' own step-by-step attention, which
    also runs wherever such a hook is attached)."""


@dataclass(frozen=True)
class LayerInputs:
    """What :meth:`LayerStack.run_layers` needs: the residual stream entering the first block, and
    the extra arguments each layer's block is called with (HuggingFace's, per layer of the model)."""

    resid: Float[Tensor, "batch pos d_model"]
    calls: tuple[tuple[tuple[Any, ...], dict[str, Any]], ...]
    """Per layer of the model (not per route step): ``(args, kwargs)`` after the hidden states."""

    @property
    def batch(self) -> int:
        return int(self.resid.shape[0])

    def stacked(self, n: int) -> LayerInputs:
        """The arguments for ``n`` stacked copies of the batch (``torch.cat`` of ``n`` residual streams).

        Every tensor argument whose first dimension is the batch is repeated ``n`` times; others
        (a mask or rotary table of batch 1, which broadcasts) are kept."""
        if n == 1:
            return self

        def rep(x: Tensor) -> Tensor:
            return x.repeat(n, *([1] * (x.ndim - 1)))

        return LayerInputs(rep(self.resid), tuple(_per_row(call, self.batch, rep) for call in self.calls))


def _per_row(x: Any, batch: int, fn) -> Any:
    """``x`` with ``fn`` applied to every tensor in it whose first dimension is the batch (``ndim >= 2``, a batch of
    more than one row); other tensors (a mask or rotary table of batch 1, which broadcasts) are kept."""
    if isinstance(x, Tensor):
        return fn(x) if x.ndim >= 2 and x.shape[0] == batch and batch > 1 else x
    if isinstance(x, tuple):
        return tuple(_per_row(v, batch, fn) for v in x)
    if isinstance(x, list):
        return [_per_row(v, batch, fn) for v in x]
    if isinstance(x, dict):
        return {k: _per_row(v, batch, fn) for k, v in x.items()}
    return x


@dataclass(frozen=True)
class RowRoutes:
    """Entries of one batch on different routes: entry ``i`` runs ``routes[of_entry[i]]``.

    :meth:`LayerStack.forward` runs each route step as one block call per distinct layer at that step, on the
    entries whose route runs it (one call on the whole batch where every route agrees), and an entry whose route is
    shorter skips the later steps. So many routes decode together, one forward per token (route search's answers,
    :func:`~reachlens.routing.executor.generate_along_routes`). Hooks see, at a block called on some entries,
    those entries only (:func:`~reachlens.engine.hooks.current_rows` says which rows they stand for).

    >>> rr = RowRoutes(((0, 1, 2), (0, 2)), torch.tensor([0, 1, 1]))
    >>> [[(layer, None if idx is None else idx.tolist()) for layer, idx in step] for step in rr.plan()]
    [[(0, None)], [(1, [0]), (2, [1, 2])], [(2, [0])]]
    """

    routes: tuple[tuple[int, ...], ...]
    of_entry: Int[Tensor, "batch"] | np.ndarray
    """Per batch entry, the index of its route in :attr:`routes` (a host array; a tensor is read once); -1: an entry that runs no layer
    (a free slot of the decoder), except at a step where every other entry runs the same one."""

    @property
    def slot_layers(self) -> tuple[frozenset[int], ...]:
        """Per route step, the layers some route runs there (what a cache slot may hold)."""
        depth = max(len(r) for r in self.routes)
        return tuple(frozenset(r[s] for r in self.routes if s < len(r)) for s in range(depth))

    def plan(self) -> list[list[tuple[int, np.ndarray | None]]]:
        """Per route step, ``(layer, entries)`` for each layer run at that step: the batch entries that run it
        (a host array, one object per set of routes; None: all of them)."""
        of = to_host(self.of_entry)  # a host array as the engine gives it; a tensor is read once
        present = [r for r in np.unique(of).tolist() if r >= 0]
        depth = max(len(self.routes[r]) for r in present)
        found: dict[tuple[int, ...], np.ndarray] = {}  # one index array per set of routes (the cache keys on it)
        out = []
        for s in range(depth):
            by_layer: dict[int, list[int]] = {}
            for r in present:
                if s < len(self.routes[r]):
                    by_layer.setdefault(self.routes[r][s], []).append(r)
            step = []
            for layer, members in sorted(by_layer.items()):
                if len(members) == len(present):
                    step.append((layer, None))
                    continue
                key = tuple(members)
                if key not in found:
                    found[key] = np.flatnonzero(np.isin(of, members))
                step.append((layer, found[key]))
            out.append(step)
        return out


@dataclass(frozen=True)
class SharedBelow:
    """Entries of one forward over the full model that equal another entry below some layer: entry ``i`` runs layers
    ``join[i]`` and up, and below ``join[i]`` its activations and keys are those of entry ``base[i]`` (which runs
    every layer; ``base[i] == i`` for such an entry). The prefill of arms (:func:`~reachlens.engine.hooks.plain_below`):
    an arm hooked from layer L on computes, below L, what the plain model computes on the same prompt.

    >>> sb = SharedBelow(join=(0, 2, 1), base=(0, 0, 0))
    >>> [(None if run is None else run.tolist(), dst.tolist(), src.tolist()) for run, dst, src in sb.plan(3)]
    [([0], [], []), ([0, 2], [2], [0]), (None, [1], [0])]
    """

    join: tuple[int, ...]
    base: tuple[int, ...]

    def plan(self, n_layers: int) -> list[tuple[Int[Tensor, "run"] | None, Int[Tensor, "n"], Int[Tensor, "n"]]]:
        """Per layer: the entries that run it (None: all), and the entries that start there with the activations
        of their base (``dst``, ``src``), on the CPU."""
        join = torch.tensor([0 if b == i else j for i, (j, b) in enumerate(zip(self.join, self.base))])
        base = torch.tensor(self.base)
        out = []
        for layer in range(n_layers):
            run = join <= layer
            starts = ((join == layer) & (join > 0)).nonzero().flatten()
            out.append((None if bool(run.all()) else run.nonzero().flatten(), starts, base[starts]))
        return out

    def after(self, n_layers: int) -> tuple[Int[Tensor, "n"], Int[Tensor, "n"]]:
        """The entries that run no layer (``dst``) and their bases (``src``): their final activations are the base's."""
        rest = [i for i, (j, b) in enumerate(zip(self.join, self.base)) if b != i and j >= n_layers]
        return torch.tensor(rest, dtype=torch.long), torch.tensor([self.base[i] for i in rest], dtype=torch.long)


class _Stop(Exception):
    """Raised by the last stand-in layer: the family's forward has prepared every layer's inputs."""


class _LayerProbe(nn.Module):
    """Stands in for decoder layer ``index`` in the family's forward: records its arguments."""

    def __init__(self, block: nn.Module, index: int, sink: dict, last: bool) -> None:
        super().__init__()
        object.__setattr__(self, "_block", block)  # not a submodule: the probe owns no weights
        self.index, self.sink, self.last = index, sink, last

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:  # e.g. ``decoder_layer.attention_type`` read by the family's loop
            return getattr(object.__getattribute__(self, "_block"), name)

    def forward(self, hidden_states, *args, **kwargs):
        if isinstance(kwargs.get("attention_mask"), Tensor):
            kwargs = {**kwargs, "attention_mask": _see_self(kwargs["attention_mask"])}
        self.sink[self.index] = (args, kwargs)
        if self.last:
            self.sink["resid"] = hidden_states
            raise _Stop
        return hidden_states


class _BaseModelOutput:
    """What the family's causal-LM forward reads from its base model: the final hidden states."""

    def __init__(self, hidden: Tensor) -> None:
        self.last_hidden_state = hidden

    def __getattr__(self, name: str):  # past_key_values, hidden_states, attentions, ...: none
        return None

    def __getitem__(self, i):
        return (self.last_hidden_state,)[i]


class _Hidden(nn.Module):
    """Stands in for the family's base model: returns the given (normed) residual stream."""

    def __init__(self, hidden: Tensor) -> None:
        super().__init__()
        self.hidden = hidden

    def forward(self, *args, **kwargs) -> _BaseModelOutput:
        return _BaseModelOutput(self.hidden)


@contextlib.contextmanager
def _swapped(parent: nn.Module, name: str, module: nn.Module) -> Iterator[None]:
    old = parent._modules[name]
    parent._modules[name] = module
    try:
        yield
    finally:
        parent._modules[name] = old


def _layer_list(model) -> tuple[nn.Module, str]:
    """(parent, attribute) of the HuggingFace ``ModuleList`` that holds the bridge's blocks."""
    found = model.__dict__.get("_reachlens_layer_list")
    if found is None:
        hf = model.original_model
        blocks = list(model.blocks)
        for name, mod in hf.named_modules():
            if isinstance(mod, nn.ModuleList) and len(mod) == len(blocks) and all(a is b for a, b in zip(mod, blocks)):
                parent_name, _, attr = name.rpartition(".")
                found = (hf.get_submodule(parent_name) if parent_name else hf, attr)
                break
        else:
            raise UnsupportedModelError(
                f"{type(hf).__name__}: the bridge's blocks are not one layer list of the HuggingFace model; "
                "reachlens cannot route this architecture"
            )
        object.__setattr__(model, "_reachlens_layer_list", found)
    return found


def _windows(config, n_layers: int) -> tuple[int | None, ...]:
    """Per layer, its sliding window (None: full attention), from ``sliding_window`` and ``layer_types``."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if not isinstance(window, int) or window <= 0:
        return (None,) * n_layers
    if types is None:  # Mistral: one window for every layer
        return (window,) * n_layers
    return tuple(window if t == "sliding_attention" else None for t in types[:n_layers])


def _choose_path(model) -> tuple[Path, str]:
    hf = model.original_model
    cfg = hf.config
    model_type = getattr(cfg, "model_type", None)
    if model_type not in FUSED_MODEL_TYPES:
        return "generic", f"no fused path for {model_type!r} (fused: {', '.join(sorted(FUSED_MODEL_TYPES))})"
    if any(w is not None for w in _windows(cfg, len(model.blocks))):
        return "generic", "sliding-window attention layers (the fused path has one causal mask for all layers)"
    if not all(hasattr(model, part) for part in ("embed", "rotary_emb", "ln_final", "unembed")):
        return "generic", "the bridge does not expose embed/rotary_emb/ln_final/unembed"
    return "fused", f"{model_type}: rotary attention, unscaled embedding, full causal attention in every layer"


def _model_type(model) -> str:
    hf = getattr(model, "original_model", None)
    model_type = getattr(getattr(hf, "config", None), "model_type", None)
    if hf is None or model_type is None or not hasattr(model, "blocks"):
        raise ReachlensError(
            f"{type(model).__name__} is not a TransformerLens TransformerBridge over a HuggingFace causal LM "
            "(load it with reachlens.load_model)"
        )
    check_architecture(hf.config)
    return model_type


def describe(model) -> EngineInfo:
    """Which execution path the engine takes for ``model``, and why.

    >>> describe(load_model("zoo:base")).path  # doctest: +SKIP
    'fused'
    """
    stack = LayerStack(model)
    hf = model.original_model
    attention = "fused" if stack.fused and fusable_attentions(model) else "bridge"
    return EngineInfo(stack.model_type, type(hf).__name__, stack.path, stack.reason, stack.n_layers, attention)


def _see_self(mask: Tensor) -> Tensor:
    """A family's 4-D attention mask (bool, True: may attend; or additive float, 0 where it may) with every query
    that may attend to no key (a left-pad position of a prompt) let to see its own position, as
    :func:`_fused_mask` does: a fully masked row's softmax is NaN under some eager kernels (float64), and a NaN at
    a pad position reaches real tokens through the next layer's values (0 x NaN). Real queries are unchanged."""
    if mask.dim() != 4 or mask.shape[-2] < 2:
        return mask
    allowed = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    empty = ~allowed.any(-1)  # [batch, heads or 1, q]
    if not bool(empty.any()):
        return mask
    q, kv = mask.shape[-2:]
    own = torch.zeros(q, kv, dtype=torch.bool, device=mask.device)
    own[torch.arange(q), torch.arange(kv - q, kv)] = True
    fix = empty[..., None] & own
    return mask | fix if mask.dtype == torch.bool else mask.masked_fill(fix, 0.0)


def _fused_mask(
    key_valid: Bool[Tensor, "batch kv"], q_len: int
) -> Bool[Tensor, "batch 1 pos kv"]:
    """Causal and padding mask for the last ``q_len`` of ``kv`` positions (True: may attend).

    A query with no real key to its left (a left-pad position of the prompt) sees itself, so its
    softmax has something to normalise (its output is never read)."""
    kv = key_valid.shape[1]
    causal = torch.ones(q_len, kv, dtype=torch.bool, device=key_valid.device).tril_(kv - q_len)
    mask = causal[None] & key_valid[:, None, :]
    if q_len > 1:
        empty = ~mask.any(-1)  # [batch, q]
        if bool(empty.any()):
            own = torch.zeros(q_len, kv, dtype=torch.bool, device=key_valid.device)
            own[torch.arange(q_len), torch.arange(kv - q_len, kv)] = True
            mask |= empty[..., None] & own[None]
    return mask[:, None]


class LayerStack:
    """The executable view of a TransformerBridge: depth, execution path, and a route-aware forward.

    Args:
        model: a TransformerBridge over a decoder-only HuggingFace causal LM.
        fused: take the fused path where it applies (see :func:`describe`); False runs the generic
            path (the family's own forward code and the bridge's own attention) for any model.

    >>> stack = LayerStack(model)  # doctest: +SKIP
    >>> logits = stack.forward(ids, route=[0, 1, 1, 2])  # doctest: +SKIP
    """

    def __init__(self, model: nn.Module, *, fused: bool = True) -> None:
        self.model_type = _model_type(model)
        self.model = model
        path, reason = _choose_path(model)
        if path == "fused" and not fused:
            path, reason = "generic", "fused=False"
        self.path: Path = path
        self.reason = reason
        self.n_layers = len(model.blocks)
        self.identity = tuple(range(self.n_layers))
        self.windows: tuple[int | None, ...] = _windows(model.original_model.config, self.n_layers)
        """Per layer, its sliding window (None: full attention), as the family's config declares."""
        if self.path == "generic":
            _layer_list(model)  # refuse an unroutable layout now, not mid-run
        self._in_kernels = False
        """Whether :meth:`kernels` is entered (a nested entry does nothing)."""

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def route(self, route: Sequence[int] | None) -> tuple[int, ...]:
        return self.identity if route is None else validate_route(route, self.n_layers)

    def new_cache(self, max_len: int, route: Sequence[int] | RowRoutes | None = None, *,
                  grow: bool = False) -> SlotKVCache:
        """A :class:`SlotKVCache` for ``route`` (``grow``: buffers sized to what is written, for a cache shared
        after its prefill)."""
        if isinstance(route, RowRoutes):
            if any(w is not None for w in self.windows):
                raise ReachlensError(f"{self.model_type} has sliding-window layers, whose cache slots cannot hold "
                                     "layers of different windows: decode rows of different routes in separate calls")
            return SlotKVCache(route.slot_layers, max_len, grow=grow)
        steps = self.route(route)
        return SlotKVCache(steps, max_len, windows=[self.windows[layer] for layer in steps], grow=grow)

    @property
    def fused(self) -> bool:
        """Whether this stack takes the fused path."""
        return self.path == "fused"

    @property
    def cascade(self) -> bool:
        """Whether every block's attention runs fused (so a shared prompt cache pays; see
        :class:`~reachlens.engine.kv_cache.SlotKVCache`). Qwen3's QK-norm, say, keeps the bridge's own."""
        return self.fused and len(fusable_attentions(self.model)) == self.n_layers

    @contextlib.contextmanager
    def kernels(self) -> Iterator[None]:
        """The context every forward runs in: norms that skip unhooked hook statistics
        (:mod:`reachlens.engine.fast_norm`, exact), a real model's large linear maps through oneDNN on a CPU
        (:mod:`reachlens.engine.fast_linear`, to float32 rounding) and, on the fused path, fused attention
        (:mod:`reachlens.engine.fast_attention`) wherever no attention-internal hook is attached and decoder blocks
        without the bridge's per-call bookkeeping (:mod:`reachlens.engine.fast_block`, exact) wherever no hook it
        would skip is attached. Nested (a decoding loop enters it once around all its forwards), the inner
        context does nothing."""
        if self._in_kernels:
            yield
            return
        self._in_kernels = True
        try:
            with fused_norms(self.model), fast_linears(self.model), \
                    (fused_attention(self.model) if self.fused else contextlib.nullcontext()), \
                    (fast_blocks(self.model) if self.fused else contextlib.nullcontext()):
                yield
        finally:
            self._in_kernels = False

    # --- the three parts of a forward ------------------------------------------------------------
    def prepare(
        self,
        input_ids: Int[Tensor, "batch pos"],
        *,
        position_ids: Int[Tensor, "batch pos"] | None = None,
        attention_mask: Bool[Tensor, "batch kv"] | None = None,
        cache: SlotKVCache | None = None,
    ) -> LayerInputs:
        """The residual stream entering the first block and every layer's call arguments.

        Args:
            position_ids: positions per row (default ``past + arange(pos)``).
            attention_mask: HuggingFace's 2-D key mask over the cached and the new positions
                (True: a real token); None means no padding.
            cache: the KV cache the layers write to (it must not be shared with another forward).
        """
        past = 0 if cache is None else cache.length
        if position_ids is None:
            position_ids = torch.arange(past, past + input_ids.shape[1], device=input_ids.device).expand(
                input_ids.shape[0], -1
            )
        if self.path == "fused":
            resid = embed(self.model.embed, input_ids)
            kwargs = {
                "attention_mask": None if attention_mask is None else _fused_mask(attention_mask, input_ids.shape[1]),
                "position_ids": position_ids,
                "position_embeddings": bare_call(self.model.rotary_emb, resid, position_ids),
                "past_key_values": cache,
                "use_cache": cache is not None,
            }
            return LayerInputs(resid, ((((), kwargs),) * self.n_layers))
        hf = self.model.original_model
        base = getattr(hf, hf.base_model_prefix)
        parent, name = _layer_list(self.model)
        sink: dict = {}
        probes = nn.ModuleList(
            [_LayerProbe(b, i, sink, i == self.n_layers - 1) for i, b in enumerate(self.model.blocks)]
        )
        with _swapped(parent, name, probes):
            try:
                base(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                     past_key_values=cache, use_cache=cache is not None)
            except _Stop:
                pass
            else:
                raise RuntimeError(f"{type(base).__name__}.forward returned without running its layer list")
        return LayerInputs(sink["resid"], tuple(sink[i] for i in range(self.n_layers)))

    def run_layers(
        self,
        inputs: LayerInputs,
        route: Sequence[int],
        *,
        resid: Float[Tensor, "batch pos d_model"] | None = None,
        cache: SlotKVCache | None = None,
        first_step: int = 0,
    ) -> Float[Tensor, "batch pos d_model"]:
        """Run ``route`` from ``resid`` (default ``inputs.resid``); route step ``i`` uses cache slot
        ``first_step + i`` of ``cache`` (the cache the inputs were prepared with)."""
        x = inputs.resid if resid is None else resid
        for i, layer in enumerate(route):
            if cache is not None:
                cache.enter(first_step + i)
            args, kwargs = inputs.calls[layer]
            x = bare_call(self.model.blocks[layer], x, *args, **kwargs)
            if isinstance(x, tuple):
                x = x[0]
        return x

    def run_row_routes(
        self, inputs: LayerInputs, routes: RowRoutes, *, cache: SlotKVCache | None = None
    ) -> Float[Tensor, "batch pos d_model"]:
        """Run every entry of ``inputs`` along its own route (:class:`RowRoutes`): per route step, one block call
        per layer run there, on the entries that run it; route step ``i`` uses cache slot ``i``."""
        x = inputs.resid
        b = inputs.batch
        on_device: dict[int, Tensor] = {}  # one device copy per set of entries (the cache keys on its identity)
        for step, groups in enumerate(routes.plan()):
            for layer, entries in groups:
                args, kwargs = inputs.calls[layer]
                if entries is None:
                    if cache is not None:
                        cache.enter(step, layer=layer)
                    out = bare_call(self.model.blocks[layer], x, *args, **kwargs)
                    x = out[0] if isinstance(out, tuple) else out
                    continue
                idx = on_device.setdefault(id(entries), to_device(entries, x.device))
                if cache is not None:
                    cache.enter(step, layer=layer, rows=idx, rows_host=entries)
                args, kwargs = _per_row((args, kwargs), b, lambda t: t.index_select(0, idx))
                with restricted_rows(entries):  # the host copy: the rows' bookkeeping lives there
                    out = bare_call(self.model.blocks[layer], x.index_select(0, idx), *args, **kwargs)
                x = x.index_copy(0, idx, out[0] if isinstance(out, tuple) else out)
        return x

    def run_shared_below(
        self, inputs: LayerInputs, shared: SharedBelow, *, cache: SlotKVCache | None = None
    ) -> Float[Tensor, "batch pos d_model"]:
        """Run every layer (the identity route) on the entries that need it (:class:`SharedBelow`): a layer runs on
        the entries that have started; an entry starts with its base's activation entering its first layer, and the
        keys the base wrote at each layer it skipped are copied to it."""
        x = inputs.resid
        device = x.device
        if cache is not None and cache.batch is None:
            cache.batch = inputs.batch  # the first block call writes some of its rows only
        for layer, (run, dst, src) in enumerate(shared.plan(self.n_layers)):
            if dst.numel():
                x = x.index_copy(0, dst.to(device), x.index_select(0, src.to(device)))
            args, kwargs = inputs.calls[layer]
            if run is None:
                if cache is not None:
                    cache.enter(layer)
                out = bare_call(self.model.blocks[layer], x, *args, **kwargs)
                x = out[0] if isinstance(out, tuple) else out
                continue
            idx = run.to(device)
            if cache is not None:
                cache.enter(layer, rows=idx)
            args, kwargs = _per_row((args, kwargs), inputs.batch, lambda t: t.index_select(0, idx))
            with restricted_rows(run):
                out = bare_call(self.model.blocks[layer], x.index_select(0, idx), *args, **kwargs)
            x = x.index_copy(0, idx, out[0] if isinstance(out, tuple) else out)
            if cache is not None:
                idle = torch.tensor(sorted(set(range(inputs.batch)) - set(run.tolist())), dtype=torch.long)
                cache.copy_pending(layer, torch.tensor(shared.base)[idle].to(device), idle.to(device))
        dst, src = shared.after(self.n_layers)
        if dst.numel():
            x = x.index_copy(0, dst.to(device), x.index_select(0, src.to(device)))
        return x

    def unembed(self, resid: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_vocab"]:
        """Final norm, LM head and whatever the family does after it (e.g. logit softcapping)."""
        normed = self.model.ln_final(resid)
        if self.path == "fused":
            return self.model.unembed(normed)
        hf = self.model.original_model
        with _swapped(hf, hf.base_model_prefix, _Hidden(normed)):
            return hf(inputs_embeds=normed, use_cache=False).logits

    def forward(
        self,
        input_ids: Int[Tensor, "batch pos"],
        *,
        position_ids: Int[Tensor, "batch pos"] | None = None,
        attention_mask: Bool[Tensor, "batch kv"] | None = None,
        cache: SlotKVCache | None = None,
        route: Sequence[int] | RowRoutes | None = None,
        last_only: bool = False,
        shared: SharedBelow | None = None,
    ) -> Float[Tensor, "batch out_pos d_vocab"]:
        """Logits of ``input_ids`` along ``route`` (the full model when None; a :class:`RowRoutes`: each entry
        along its own).

        Args:
            position_ids: positions per row (default ``past + arange(pos)``).
            attention_mask: 2-D key mask ``[batch, past + pos]``, True at real tokens (HuggingFace's
                convention); None means no padding.
            cache: a :class:`SlotKVCache` built for the same route; it is extended by ``pos``.
            last_only: unembed only the last position (what decoding needs).
            shared: entries that equal another below some layer (:class:`SharedBelow`; the full model's route only).
        """
        steps = route.slot_layers if isinstance(route, RowRoutes) else self.route(route)
        if cache is not None and cache.route != steps:
            raise ValueError(f"cache was built for route {cache.route}, not {steps}")
        with self.kernels():
            inputs = self.prepare(input_ids, position_ids=position_ids, attention_mask=attention_mask, cache=cache)
            if shared is not None:
                if steps != self.identity:
                    raise ValueError(f"shared entries run the full model's route, not {steps}")
                resid = self.run_shared_below(inputs, shared, cache=cache)
            elif isinstance(route, RowRoutes):
                if cache is not None and cache.batch is None:
                    cache.batch = inputs.batch  # the first block call may write some of its rows only
                resid = self.run_row_routes(inputs, route, cache=cache)
            else:
                resid = self.run_layers(inputs, steps, cache=cache)
            if cache is not None:
                cache.commit()
            if last_only:
                resid = resid[:, -1:]
            return self.unembed(resid)
