"""One way to load a model from a spec: :class:`ModelSource` (spec, backend, device, dtype, device map).

Every part of reachlens that loads a model by name goes through it: the CLI (each command's model flags), the
runner's workers (an executor's processes and Ray actors receive a source, never a model), a training
study's checkpoints and every control's rerun. ``load()`` returns a TransformerBridge
(:func:`reachlens.load_model`) for the engine, a :class:`~reachlens.engine.backends.vllm_model.VLLMModel`
for vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig
from reachlens.protocol import BACKENDS

__all__ = ["ModelSource", "load_vllm"]


@dataclass(frozen=True)
class ModelSource:
    """How to load a model: what an executor's workers receive instead of the model itself.

    >>> ModelSource("zoo:base").load()  # doctest: +SKIP
    """

    spec: str
    """``zoo:NAME``, a local folder or a hub name (see :func:`reachlens.load_model`)."""
    backend: str = "engine"
    """Which backend loads it (:data:`reachlens.protocol.BACKENDS`)."""
    device: str = "cpu"
    """Where the engine puts it (``cuda`` on a GPU worker); vLLM places its model itself."""
    dtype: str = "float32"
    """Weights and activations: a torch dtype's name (``float32``, ``bfloat16``, ``float16``)."""
    device_map: str | None = None
    """HuggingFace device map for a model larger than one device (``auto``); excludes ``device``."""
    trust_remote_code: bool = False
    """Let the model's own code run (only when the user asks for it)."""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ReachlensError(f"backend={self.backend!r} is not a backend; use one of {', '.join(BACKENDS)}")

    @classmethod
    def from_exec(cls, spec: str, exec_config: ExecConfig, *, backend: str = "engine",
                  trust_remote_code: bool = False) -> ModelSource:
        """``spec`` loaded where and in which precision ``exec_config`` says."""
        return cls(spec, backend, exec_config.device, exec_config.dtype, exec_config.device_map, trust_remote_code)

    @property
    def reachlens_identity(self):
        """The identity of the files under :attr:`spec` (what a worker's replica must match)."""
        from reachlens.models.loading import model_identity

        return model_identity(self.spec, trust_remote_code=self.trust_remote_code)

    def load(self):
        """The loaded model (a TransformerBridge, or a :class:`~reachlens.engine.backends.vllm_model.VLLMModel`)."""
        if self.backend == "vllm":
            return load_vllm(self.spec, dtype=self.dtype)
        import torch

        from reachlens.models.loading import load_model

        return load_model(self.spec, device=self.device, dtype=getattr(torch, self.dtype), device_map=self.device_map,
                          trust_remote_code=self.trust_remote_code)

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
        from reachlens.engine.backends import backend_of

        cfg: Any = getattr(model, "cfg", None)
        dtype = str(getattr(cfg, "dtype", "torch.float32")).removeprefix("torch.")
        return cls(ident.spec, backend_of(model), str(getattr(cfg, "device", "cpu") or "cpu"), dtype)


def load_vllm(spec: str, *, dtype: str = "float32", **options):
    """``spec`` loaded by vLLM in a worker process (see :mod:`reachlens.engine.backends.vllm_model`): ``options`` are
    :class:`~reachlens.engine.backends.vllm_model.VLLMModel`'s (``python``, ``max_model_len``, ``options``)."""
    from reachlens.engine.backends.vllm_model import VLLMModel
    from reachlens.models.loading import model_identity, resolve_spec

    target, _ = resolve_spec(spec)
    return VLLMModel(spec, target=target, identity=model_identity(spec),
                     source=ModelSource(spec, backend="vllm", dtype=dtype), dtype=dtype, **options)
