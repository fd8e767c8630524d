"""Backends: who draws an audit's completions, and how a worker loads its replica of a model.

Two backends honour the audit's contract (rows of (prompt, per-sample seed) in, :class:`Completion`
out; sample j of question q a function of (seed, q, j) alone):

* ``engine``: reachlens' own decoder over a TransformerBridge (:func:`reachlens.engine.generate`);
  TransformerLens hooks are live on every forward.
* ``vllm``: vLLM, in a worker process of its own (:mod:`reachlens.engine.backends.vllm_model`); no
  hooks, for the hook-free audits it makes fast on GPUs.

The backend is part of the run's identity (``Protocol.backend``): both draw sample j with the seed
``row_seed(seed, q, j)``, but each turns a seed into tokens its own way, so their samples differ
and a comparison across backends is refused unless allowed as a control.

A :class:`ModelSource` says how to load a model (spec, backend, device, dtype, device map): what a
Ray actor receives instead of the model itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reachlens.engine.generate import Completion, Row, generate
from reachlens.errors import ReachlensError
from reachlens.protocol import BACKENDS, Protocol

__all__ = ["BACKENDS", "ModelSource", "backend_of", "bind_backend", "generate_rows", "load_for", "load_vllm"]


def backend_of(model) -> str:
    """The backend a loaded model runs on: its ``reachlens_backend``, ``engine`` for a TransformerBridge."""
    return getattr(model, "reachlens_backend", "engine")


def bind_backend(model, protocol: Protocol) -> Protocol:
    """``protocol`` with the backend ``model`` runs on; a request the model cannot honour is refused.

    A protocol left at the default ``engine`` follows a vLLM model (the model given says how it runs).
    A protocol asking for ``vllm`` with a TransformerBridge is refused, naming any hooks attached to
    it: vLLM runs none, and an audit of a hooked model that silently ran unhooked would be wrong.
    """
    have = backend_of(model)
    if protocol.backend == have:
        return protocol
    if protocol.backend == "engine":
        return dataclasses.replace(protocol, backend=have)
    if have == "engine":
        from reachlens.engine.hooks import user_hooks

        hooks = user_hooks(model)
        if hooks:
            raise ReachlensError(
                f"backend={protocol.backend!r} runs no TransformerLens hooks, but hooks are attached at "
                f"{', '.join(hooks)}; audit with backend='engine' (the hooks stay live) or remove them"
            )
        raise ReachlensError(
            f"backend={protocol.backend!r} but the model given is a TransformerBridge (the engine's); pass "
            f"the model spec instead (audit('zoo:base', ...)) or a model from load_vllm(spec)"
        )
    raise ReachlensError(f"backend={protocol.backend!r} but the model given runs on {have!r}; "
                         f"use Protocol(..., backend={have!r}) or load the model for {protocol.backend!r}")


def generate_rows(
    model, prompts: Sequence[str], rows: Sequence[Row], protocol: Protocol, *,
    max_batch_rows: int = 256, share_prefixes: bool | None = None,
) -> list[Completion]:
    """One :class:`Completion` per row, decoded by ``protocol`` (its length, temperature, top-p and stop
    strings) on the model's backend (:func:`reachlens.engine.generate` for a TransformerBridge)."""
    if backend_of(model) == "engine":
        return generate(model, prompts, rows, protocol, max_batch_rows=max_batch_rows, share_prefixes=share_prefixes)
    return model.generate_rows(prompts, rows, protocol)


@dataclass(frozen=True)
class ModelSource:
    """How to load a model: what an executor's workers receive instead of the model itself.

    >>> ModelSource("zoo:base").load()  # doctest: +SKIP
    """

    spec: str
    """``zoo:NAME``, a local folder or a hub name (see :func:`reachlens.load_model`)."""
    backend: str = "engine"
    """Which backend loads it (:data:`BACKENDS`)."""
    device: str = "cpu"
    """Where the engine puts it (``cuda`` on a GPU worker); vLLM places its model itself."""
    dtype: str = "float32"
    """Weights and activations: a torch dtype's name (``float32``, ``bfloat16``, ``float16``)."""
    device_map: str | None = None
    """HuggingFace device map for a model larger than one device (``auto``); excludes ``device``."""

    @property
    def reachlens_identity(self):
        """The identity of the files under :attr:`spec` (what a worker's replica must match)."""
        from reachlens.models.loading import model_identity

        return model_identity(self.spec)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ReachlensError(f"backend={self.backend!r} is not a backend; use one of {', '.join(BACKENDS)}")

    def load(self):
        """The loaded model (a TransformerBridge, or a :class:`~reachlens.engine.backends.vllm_model.VLLMModel`)."""
        if self.backend == "vllm":
            return load_vllm(self.spec, dtype=self.dtype)
        import torch

        from reachlens.models.loading import load_model

        return load_model(self.spec, device=self.device, dtype=getattr(torch, self.dtype), device_map=self.device_map)

    @classmethod
    def of(cls, model) -> ModelSource:
        """The source of a model loaded by :func:`reachlens.load_model` or :func:`load_vllm`."""
        if isinstance(model, ModelSource):
            return model
        if isinstance(model, str):
            return cls(model)
        source = getattr(model, "reachlens_source", None)
        if isinstance(source, ModelSource):
            return source
        ident = getattr(model, "reachlens_identity", None)
        if ident is None:
            raise ReachlensError("the model was not loaded by reachlens.load_model, so workers cannot load their "
                                 "own replica of it; pass its spec (audit('zoo:base', ...)) or a ModelSource")
        cfg: Any = getattr(model, "cfg", None)
        dtype = str(getattr(cfg, "dtype", "torch.float32")).removeprefix("torch.")
        return cls(ident.spec, backend_of(model), str(getattr(cfg, "device", "cpu") or "cpu"), dtype)


def load_for(model, protocol: Protocol):
    """``model`` loaded for ``protocol.backend`` when it is a spec or a :class:`ModelSource`; else itself."""
    if isinstance(model, str):
        model = ModelSource(model, backend=protocol.backend)
    if isinstance(model, ModelSource):
        return model.load()
    return model


def load_vllm(spec: str, *, dtype: str = "float32", **options):
    """``spec`` loaded by vLLM in a worker process (see :mod:`reachlens.engine.backends.vllm_model`)."""
    from reachlens.engine.backends.vllm_model import VLLMModel

    return VLLMModel(spec, dtype=dtype, **options)
