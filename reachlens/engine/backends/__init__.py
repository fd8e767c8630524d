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

How a model is loaded for a backend (:class:`reachlens.models.ModelSource`) is the models layer's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from reachlens.engine.generate import Completion, Row, generate
from reachlens.errors import ReachlensError
from reachlens.protocol import BACKENDS, Protocol

__all__ = ["BACKENDS", "backend_of", "bind_backend", "generate_rows"]


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
            f"the model spec instead (audit('zoo:base', ...)) or a model from reachlens.models.load_vllm(spec)"
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
