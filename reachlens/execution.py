"""Execution settings: how a run is computed, beside what it computes (the :class:`~reachlens.protocol.Protocol`).

One frozen object, :class:`ExecConfig`, holds every setting of *how* a run is computed: how many completions
are decoded together, whether samples share a batch row while they agree, where and in which precision
the model runs, and who decodes (``workers`` processes side by side, or Ray actors with ``ray``: the runner's
:func:`~reachlens.runner.executor_for` reads them, for an audit, a rerun, a probe run and a training study
alike). The protocol says *what* is measured; these say how the machine gets there.

Some of them change a result, and those are part of a run's identity (:data:`RECORDED`, written to
``run.json`` as ``exec`` and checked when a run resumes, is extended or is compared):

* ``dtype`` and ``device``: a bfloat16 audit differs from a float32 one in some deployed answers, and two
  kinds of device round differently;
* ``max_batch_rows``: it fixes the question slices decoded together (``max_batch_rows // (K + 1)``
  questions each), and so the batch shapes that a bit-exact resume rests on.

``share_prefixes`` decodes samples that agree so far as one batch row: the same tokens by construction
(:func:`reachlens.engine.generate`), so it is not recorded; neither are ``workers`` and ``ray``, since a slice
decodes the same rows in any process.

>>> ExecConfig(max_batch_rows=512, dtype="bfloat16").recorded({"dtype": "bfloat16", "device": "cuda"})
{'max_batch_rows': 512, 'dtype': 'bfloat16', 'device': 'cuda'}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reachlens.errors import ReachlensError

__all__ = ["DTYPES", "ExecConfig", "RECORDED", "model_exec"]

DTYPES = ("float32", "bfloat16", "float16")
"""The precisions a model can be loaded in (names of torch dtypes)."""
RECORDED = ("max_batch_rows", "dtype", "device")
"""The execution settings that can change a result: recorded in ``run.json`` (``exec``) and checked."""


@dataclass(frozen=True)
class ExecConfig:
    """How a run is computed. Frozen; pass one to :func:`reachlens.audit`, the runner and every study.

    >>> ExecConfig(max_batch_rows=256, workers=2).workers
    2
    """

    max_batch_rows: int = 1024
    """Most completions decoded together (the memory bound). Fixes the question slices of an audit:
    ``max_batch_rows // (K + 1)`` questions each (at least one)."""
    share_prefixes: bool | None = None
    """Decode samples that agree so far as one batch row. None: share unless a hook other than
    reachlens' own is attached (see :func:`reachlens.engine.generate`)."""
    device: str = "cpu"
    """Where a model loaded from a spec runs (``cpu``, ``cuda``, ``cuda:1``, ``mps``)."""
    dtype: str = "float32"
    """Precision of a model loaded from a spec (:data:`DTYPES`)."""
    device_map: str | None = None
    """A HuggingFace device map for a model larger than one device (``auto``); replaces ``device``."""
    workers: int = 1
    """Processes decoding side by side (a :class:`~reachlens.runner.ProcessPool`), or Ray actors with :attr:`ray`;
    1 (without ``ray``) decodes in this process."""
    ray: str | None = None
    """Decode on Ray actors: ``local`` starts a cluster of this process's own, else a cluster's address
    (``HOST:PORT``, ``auto``); None: no Ray."""
    gpus_per_worker: float = 0.0
    """With :attr:`ray`: the GPUs each actor reserves (the engine then runs on ``cuda``); 0 for CPU."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_batch_rows, int) or isinstance(self.max_batch_rows, bool) or self.max_batch_rows < 1:
            raise ReachlensError(f"max_batch_rows={self.max_batch_rows!r} must be an integer >= 1")
        if not isinstance(self.workers, int) or isinstance(self.workers, bool) or self.workers < 1:
            raise ReachlensError(f"workers={self.workers!r} must be at least 1")
        if self.dtype not in DTYPES:
            raise ReachlensError(f"dtype={self.dtype!r} is not a precision; use one of {', '.join(DTYPES)}")
        if self.ray is not None and (not isinstance(self.ray, str) or not self.ray):
            raise ReachlensError(f"ray={self.ray!r} must be 'local' or a Ray cluster's address (HOST:PORT, auto)")
        if isinstance(self.gpus_per_worker, bool) or not isinstance(self.gpus_per_worker, (int, float)) or \
                not self.gpus_per_worker >= 0:
            raise ReachlensError(f"gpus_per_worker={self.gpus_per_worker!r} must be a number >= 0")
        if self.gpus_per_worker and self.ray is None:
            raise ReachlensError(f"gpus_per_worker={self.gpus_per_worker!r} goes with Ray actors; pass ray='local' "
                                 "(or a cluster's address), or drop it")
        if self.share_prefixes not in (None, True, False):
            raise ReachlensError(f"share_prefixes={self.share_prefixes!r} must be True, False or None")

    def recorded(self, model_settings: dict[str, str] | None = None) -> dict[str, Any]:
        """The result-changing settings as ``run.json`` records them: ``max_batch_rows`` from here,
        ``dtype`` and ``device`` from ``model_settings`` (:func:`model_exec` of the model that ran), else
        from here."""
        mine = {"dtype": self.dtype, "device": _device_kind(self.device, self.device_map)}
        return {"max_batch_rows": self.max_batch_rows, **mine, **(model_settings or {})}


def _device_kind(device: Any, device_map: str | None = None) -> str:
    """``cuda:1`` -> ``cuda``: the kind of device is what changes a result, not which one of a kind."""
    if device_map is not None:
        return f"device_map={device_map}"
    return str(device or "cpu").split(":")[0]


def model_exec(model: Any) -> dict[str, str]:
    """``{"dtype", "device"}`` of a loaded model (its config), or of a :class:`~reachlens.engine.backends.ModelSource`
    or a model that carries one (vLLM); ``unknown`` where the model does not say."""
    source = model if hasattr(model, "device_map") and hasattr(model, "backend") else getattr(model, "reachlens_source", None)
    if source is not None:
        return {"dtype": str(source.dtype), "device": _device_kind(source.device, source.device_map)}
    cfg = getattr(model, "cfg", None)
    dtype = getattr(cfg, "dtype", None)
    device = getattr(cfg, "device", None)
    return {"dtype": str(dtype).removeprefix("torch.") if dtype is not None else "unknown",
            "device": _device_kind(device) if device is not None else "unknown"}
