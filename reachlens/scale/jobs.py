"""Audits run by an executor: the driver that writes, and the worker side that decodes one batch.

An audit is a list of fixed question slices (:func:`~reachlens.studies.auditing.batch_slices`), and
slice s of a run decodes the same rows with the same seeds wherever it runs. So any executor may
decode the slices anywhere and in any order: the driver (:func:`run_audits`, in this process) holds
each audit directory's writer lock and appends every finished slice as the store's atomic part
files, exactly as a single-process run does; a killed driver leaves whole parts behind, and any
executor resumes from them. Workers never write to the directory, so they need no shared disk.

An executor is an object with ``run(shards) -> iterator`` (:class:`LocalExecutor`,
:class:`~reachlens.scale.ray_executor.RayExecutor`): ``shards`` is a list of ``(ShardJob, slices)``,
and it yields ``(job index, slice, questions, samples)`` as slices finish, in any order.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.engine.backends import ModelSource, backend_of
from reachlens.errors import ReachlensError
from reachlens.protocol import Protocol
from reachlens.store import AuditDir
from reachlens.studies.auditing import AuditResult, audit_batch, batch_slices, check_context, finish_audit
from reachlens.tasks.base import Task

__all__ = ["AuditJob", "LocalExecutor", "ShardJob", "prepare_worker", "run_audits", "run_shard"]


@dataclass(frozen=True)
class AuditJob:
    """One audit for an executor: what :func:`reachlens.audit` takes, with the model as a spec."""

    model: Any
    """A spec (``"zoo:base"``), a :class:`ModelSource`, or a model loaded by reachlens (its source is used)."""
    task: Task
    protocol: Protocol
    out: str | Path | None = None
    """The audit directory (resumable); None keeps the result in memory only."""
    max_batch_rows: int = 1024
    sample_offset: int = 0
    share_prefixes: bool | None = None


@dataclass(frozen=True)
class ShardJob:
    """What a worker needs to decode any slice of one audit (sent once per audit, not per slice)."""

    source: ModelSource
    task: Task
    protocol: Protocol
    """Resolved: explicit format, stop strings, grader and backend."""
    model_id: dict[str, Any]
    """The identity the directory records; a worker whose checkpoint differs refuses to run."""
    done: frozenset[str] = field(default_factory=frozenset)
    max_batch_rows: int = 1024
    sample_offset: int = 0
    share_prefixes: bool | None = None


def prepare_worker(model, job: ShardJob) -> None:
    """Refuse, on the worker, a replica that is not the audited checkpoint or a decode that cannot fit."""
    from reachlens.models.loading import same_model

    ident = getattr(model, "reachlens_identity", None)
    if ident is not None and "unknown" not in (job.model_id.get("fingerprint"), ident.fingerprint):
        if not same_model(job.model_id, dataclasses.asdict(ident)):
            raise ReachlensError(
                f"the worker's copy of {job.source.spec!r} is another checkpoint (fingerprint {ident.fingerprint}, "
                f"the audit's {job.model_id.get('fingerprint')}); give every node the same files"
            )
    check_context(model, job.task, job.protocol)


def run_shard(model, job: ShardJob, start: int, stop: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Decode and grade one slice of ``job`` (on a worker)."""
    return audit_batch(model, job.task, job.protocol, start, stop, done=job.done, max_batch_rows=job.max_batch_rows,
                       sample_offset=job.sample_offset, share_prefixes=job.share_prefixes)


def _source(job: AuditJob) -> ModelSource:
    model = job.model
    if isinstance(model, str):
        return ModelSource(model, backend=job.protocol.backend)
    if not isinstance(model, ModelSource):
        from reachlens.engine.hooks import user_hooks

        hooks = user_hooks(model) if backend_of(model) == "engine" else []
        if hooks:
            raise ReachlensError(f"hooks attached at {', '.join(hooks)} cannot travel to an executor's workers "
                                 "(each loads its own replica); run this audit in one process (executor=None)")
    return ModelSource.of(model)


def run_audits(
    jobs: Sequence[AuditJob], executor, *, progress: Callable[[int, int], None] | None = None,
) -> list[AuditResult]:
    """Run (or resume) every audit of ``jobs`` on ``executor``; return their results in order.

    Each audit directory is locked, opened (its run checked against the directory's) and written
    here; the executor only decodes. ``progress(job index, questions finished)`` follows each audit.
    """
    from reachlens.models.loading import model_identity

    with contextlib.ExitStack() as stack:
        shards, stores, frames = [], [], []
        for job in jobs:
            source = _source(job)
            protocol = job.protocol.resolved(job.task)
            if protocol.backend == "engine" and source.backend != "engine":  # the default follows the model
                protocol = dataclasses.replace(protocol, backend=source.backend)
            elif protocol.backend != source.backend:
                raise ReachlensError(f"backend={protocol.backend!r} but {source.spec!r} is loaded for "
                                     f"{source.backend!r}; pass the spec alone, or ModelSource(spec, "
                                     f"backend={protocol.backend!r})")
            model_id = dataclasses.asdict(model_identity(source.spec))
            store = None
            if job.out is not None:
                store = AuditDir(job.out)
                stack.enter_context(store.writer())
                store.open(protocol, model_id, extra={"task_source": job.task.source, "n_questions": len(job.task)},
                           data=job.task.data_identity)
            done = frozenset(store.finished_ids()) if store is not None else frozenset()
            slices = batch_slices(job.task, protocol, job.max_batch_rows, done)
            shards.append((ShardJob(source, job.task, protocol, model_id, done, job.max_batch_rows,
                                    job.sample_offset, job.share_prefixes), slices))
            stores.append(store)
            frames.append(([], []))
        n_done = [len(job.task) - sum(b - a for a, b in slices) for job, (_, slices) in zip(jobs, shards)]
        if progress:
            for i, n in enumerate(n_done):
                progress(i, n)
        for i, (start, stop), q_df, s_df in executor.run(shards):
            if stores[i] is not None:
                stores[i].append(q_df, s_df)
            frames[i][0].append(q_df)
            frames[i][1].append(s_df)
            n_done[i] += stop - start
            if progress:
                progress(i, n_done[i])
        return [finish_audit(job.task, shard.protocol, shard.model_id, store, *fr)
                for job, (shard, _), store, fr in zip(jobs, shards, stores, frames)]


class LocalExecutor:
    """Every slice in this process, one after another: the executor with no cluster.

    A job whose model was passed loaded is decoded with that very model (its hooks stay live);
    a spec is loaded once and kept while consecutive slices need it.
    """

    def __init__(self, models: dict[ModelSource, Any] | None = None) -> None:
        self._models = dict(models or {})

    def run(self, shards: Sequence[tuple[ShardJob, Sequence[tuple[int, int]]]]) -> Iterator[tuple[int, tuple[int, int], pd.DataFrame, pd.DataFrame]]:
        for i, (job, slices) in enumerate(shards):
            if not slices:
                continue
            model = self._models.get(job.source)
            if model is None:
                self._models = {job.source: job.source.load()}  # one replica at a time
                model = self._models[job.source]
            prepare_worker(model, job)
            for start, stop in slices:
                q_df, s_df = run_shard(model, job, start, stop)
                yield i, (start, stop), q_df, s_df
