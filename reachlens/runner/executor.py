"""The executor interface: who decodes a run's slices, and the one model replica a worker holds.

A job of the runner (:class:`~reachlens.runner.Job`: an audit, a probe run) hands its workers a :class:`Shard`:
everything a worker needs to decode any of its slices (the model's source, the task, the protocol, ...), sent once
per job, never a directory. An :class:`Executor` takes ``[(shard, slices), ...]`` and yields a
:class:`SliceResult` per slice as it finishes, in any order; it only decodes (the driver,
:func:`~reachlens.runner.run_jobs`, writes). Every executor loads models through one :class:`Replica`: one model
at a time, loaded from a shard's source, each job's shard checked against it once (:meth:`Shard.prepare`).

Executors: :class:`~reachlens.runner.InProcessExecutor` (this process), :class:`~reachlens.runner.ProcessPool`
(local processes), :class:`~reachlens.runner.RayExecutor` (Ray actors); :func:`~reachlens.runner.executor_for`
chooses one from an :class:`~reachlens.execution.ExecConfig` (``workers``, ``ray``), as vLLM chooses its executor
from its config.
"""

from __future__ import annotations

import abc
import dataclasses
import time
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.models import ModelSource, same_model

__all__ = ["Executor", "Replica", "Shard", "Shards", "Slice", "SliceResult", "check_replica", "decode_timed"]

Slice = tuple[int, int, int]
"""One slice of a job: ``(unit, start, stop)``, the questions ``task.questions[start:stop]`` of one of its units
(an audit has one unit, 0; a probe run one per decoder)."""


@runtime_checkable
class Shard(Protocol):
    """What a worker needs to decode any slice of one job (picklable, but for :attr:`model`)."""

    source: ModelSource | None
    """What a worker loads; None for a model only this process holds (:attr:`model`)."""
    model: Any
    """The model this process holds (decoded in process, hooks live); None for a shard sent to workers."""

    def prepare(self, model: Any) -> None:
        """Refuse, on the worker, a replica that is not the run's checkpoint or a decode it cannot do."""

    def decode(self, model: Any, part: Slice) -> dict[str, pd.DataFrame]:
        """The tables of one slice (a part of the run: :meth:`reachlens.store.PartsDir.append`)."""


Shards = Sequence[tuple[Shard, Sequence[Slice]]]


@dataclass(frozen=True)
class SliceResult:
    """One decoded slice, as an executor hands it back."""

    job: int
    """Index of its job in the list given to the executor."""
    slice: Slice
    tables: dict[str, pd.DataFrame]
    seconds: float
    """Wall time the worker spent decoding and grading it."""


class Executor(abc.ABC):
    """Decodes the slices of a list of shards; see the module docstring. A context manager (:meth:`close`)."""

    in_process: bool = False
    """Whether slices decode in this process (a model the caller holds is decoded as given, hooks live)."""

    @abc.abstractmethod
    def run(self, shards: Shards) -> Iterator[SliceResult]:
        """Decode every slice of every shard; yield each :class:`SliceResult` as it finishes."""

    def close(self) -> None:
        """Stop the workers (nothing for an executor without any)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Replica:
    """The one model a worker holds: loaded from a shard's source, freed before the next is loaded, and checked
    against each job's shard once (:meth:`Shard.prepare`)."""

    def __init__(self) -> None:
        self.source: ModelSource | None = None
        self.model: Any = None
        self.checked: set[Hashable] = set()

    def model_for(self, shard: Shard, key: Hashable, source: ModelSource | None = None) -> Any:
        """The model of ``shard`` (loaded from ``source``, default its own, unless held already), checked once per
        ``key`` (a job of a run of the executor)."""
        source = source or shard.source
        if source is None:
            raise ReachlensError("this run's model is held by the calling process only; run it in this process "
                                 "(workers=1, no executor)")
        if source != self.source:
            self.model, self.source, self.checked = None, None, set()  # free the last replica first
            self.model = source.load()
            self.source = source
        if key not in self.checked:
            shard.prepare(self.model)
            self.checked.add(key)
        return self.model



def decode_timed(model: Any, shard: Shard, part: Slice) -> tuple[dict[str, pd.DataFrame], float]:
    """``shard.decode(model, part)`` and the seconds it took."""
    t0 = time.perf_counter()
    tables = shard.decode(model, part)
    return tables, time.perf_counter() - t0


def check_replica(model: Any, model_id: Mapping[str, Any], source: ModelSource | None) -> None:
    """Refuse a worker's replica whose files are not the checkpoint the run records (``model_id``)."""
    ident = getattr(model, "reachlens_identity", None)
    if ident is not None and "unknown" not in (model_id.get("fingerprint"), ident.fingerprint):
        if not same_model(model_id, dataclasses.asdict(ident)):
            raise ReachlensError(
                f"the worker's copy of {source.spec if source else 'the model'!r} is another checkpoint "
                f"(fingerprint {ident.fingerprint}, the run's {model_id.get('fingerprint')}); give every node "
                "the same files"
            )
