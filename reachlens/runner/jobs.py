"""The one scheduler: a list of audit jobs, run on an executor, each written to its run directory.

An audit is a list of fixed question slices (:func:`~reachlens.runner.decode.batch_slices`), and slice s of
a run decodes the same rows with the same seeds wherever it runs. So :func:`run_jobs` lets any executor
decode the slices anywhere and in any order, while this process (the driver) holds each audit directory's
writer lock and appends every finished slice as the store's atomic part files. A killed driver leaves
whole parts behind, and any executor resumes from them. Workers never write, so they need no shared disk.

Executors (:mod:`reachlens.runner.executors`, :mod:`reachlens.runner.ray_executor`) have one method,
``run(shards) -> iterator of SliceResult``: ``shards`` is a list of ``(ShardJob, slices)``; results come
back as slices finish, in any order. :func:`reachlens.audit`, the training study, every rerun (budget,
temperature, length, prompt format) and every control go through :func:`run_jobs`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.engine.backends import backend_of, bind_backend
from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig, model_exec
from reachlens.models import ModelSource, identity_of, load_tokenizer, model_identity
from reachlens.protocol import Protocol
from reachlens.records import QUESTION_COLUMNS, SAMPLE_COLUMNS, in_task_order
from reachlens.runner.decode import audit_slice, batch_slices, check_budget, check_context
from reachlens.store import RUN_KINDS, AuditDir, RunRecord
from reachlens.tasks.base import Task
from reachlens.tasks.chat import bind_chat, chat_inner

__all__ = ["AuditJob", "ShardJob", "SliceResult", "prepare_worker", "run_jobs", "run_shard"]


@dataclass(frozen=True)
class AuditJob:
    """One audit for the runner: what :func:`reachlens.audit` takes.

    >>> AuditJob("zoo:base", load_task("arith", n=20), Protocol("arith", k=8), out="runs/base")  # doctest: +SKIP
    """

    model: Any
    """A spec (``"zoo:base"``), a :class:`~reachlens.models.ModelSource`, or a loaded model (decoded in this
    process with its hooks live; an executor's workers load their own replica of it from its source)."""
    task: Task
    protocol: Protocol
    out: str | Path | None = None
    """The audit directory (resumable); None keeps the result in memory only."""
    exec_config: ExecConfig = field(default_factory=ExecConfig)
    """How it runs; for a spec, also where and in which precision the model loads."""
    sample_offset: int = 0
    """Draw samples ``sample_offset .. sample_offset + K - 1`` of the seed stream (a budget extension)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Descriptive fields for the run record (what this audit reruns, and with which change)."""


@dataclass(frozen=True)
class ShardJob:
    """What a worker needs to decode any slice of one audit (sent once per audit, not per slice)."""

    source: ModelSource | None
    """What the worker loads; None for a model only this process holds (decoded in process)."""
    task: Task
    protocol: Protocol
    """Resolved: explicit format, stop strings, grader and backend."""
    model_id: dict[str, Any]
    """The identity the directory records; a worker whose checkpoint differs refuses to run."""
    exec_config: ExecConfig = field(default_factory=ExecConfig)
    done: frozenset[str] = field(default_factory=frozenset)
    sample_offset: int = 0


@dataclass(frozen=True)
class SliceResult:
    """One decoded slice, as an executor hands it back."""

    job: int
    """Index of its job in the list given to the executor."""
    slice: tuple[int, int]
    questions: pd.DataFrame
    samples: pd.DataFrame
    seconds: float
    """Wall time the worker spent decoding and grading it."""


def prepare_worker(model, job: ShardJob) -> None:
    """Refuse, on the worker, a replica that is not the audited checkpoint or a decode that cannot fit."""
    from reachlens.models import same_model

    ident = getattr(model, "reachlens_identity", None)
    if ident is not None and "unknown" not in (job.model_id.get("fingerprint"), ident.fingerprint):
        if not same_model(job.model_id, dataclasses.asdict(ident)):
            raise ReachlensError(
                f"the worker's copy of {job.source.spec if job.source else 'the model'!r} is another checkpoint "
                f"(fingerprint {ident.fingerprint}, the audit's {job.model_id.get('fingerprint')}); give every node "
                "the same files"
            )
    check_context(model, job.task, job.protocol)


def run_shard(model, job: ShardJob, start: int, stop: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Decode and grade one slice of ``job`` (on a worker)."""
    return audit_slice(model, job.task, job.protocol, start, stop, job.exec_config, done=job.done,
                       sample_offset=job.sample_offset)


# --- the driver --------------------------------------------------------------------------------------
@dataclass
class _Open:
    """One job as the driver holds it: its resolved shard, record, directory and what comes back."""

    job: AuditJob
    shard: ShardJob
    record: RunRecord
    store: AuditDir | None
    slices: list[tuple[int, int]]
    was_complete: bool = False
    """Whether its directory held this audit complete already (a re-run of a finished audit rewrites nothing)."""
    frames: tuple[list[pd.DataFrame], list[pd.DataFrame]] = field(default_factory=lambda: ([], []))
    seconds: float = 0.0

    @property
    def n_done(self) -> int:
        return len(self.job.task) - sum(b - a for a, b in self.slices)


def _source_for_executor(model) -> ModelSource:
    """The source an executor's workers load for a model this process holds (refused when it has hooks)."""
    from reachlens.engine.hooks import user_hooks

    hooks = user_hooks(model) if backend_of(model) == "engine" else []
    if hooks:
        raise ReachlensError(f"hooks attached at {', '.join(hooks)} cannot travel to an executor's workers "
                             "(each loads its own replica); run this audit in one process (executor=None)")
    return ModelSource.of(model)


def _resolve(job: AuditJob, in_process: bool) -> tuple[ModelSource | None, Protocol, dict[str, Any], dict[str, Any]]:
    """(source, resolved protocol, model identity, recorded execution settings) of a job."""
    protocol = job.protocol.resolved(job.task)
    ex = job.exec_config
    if not isinstance(job.model, (str, ModelSource)):  # a loaded model
        protocol = bind_chat(bind_backend(job.model, protocol), getattr(job.model, "tokenizer", None))
        check_context(job.model, job.task, protocol)
        source = None if in_process else _source_for_executor(job.model)
        return source, protocol, identity_of(job.model), ex.recorded(model_exec(job.model))
    source = job.model if isinstance(job.model, ModelSource) else \
        ModelSource(job.model, backend=protocol.backend, device=ex.device, dtype=ex.dtype, device_map=ex.device_map)
    if protocol.backend == "engine" and source.backend != "engine":  # the default follows the model
        protocol = dataclasses.replace(protocol, backend=source.backend)
    elif protocol.backend != source.backend:
        raise ReachlensError(f"backend={protocol.backend!r} but {source.spec!r} is loaded for {source.backend!r}; "
                             f"pass the spec alone, or ModelSource(spec, backend={protocol.backend!r})")
    if chat_inner(protocol.prompt_format) is not None:  # bound to the template of the tokenizer's files
        tokenizer = load_tokenizer(source.spec, trust_remote_code=source.trust_remote_code)
        protocol = bind_chat(protocol, tokenizer, model=repr(source.spec))
    identity = model_identity(source.spec, trust_remote_code=source.trust_remote_code)
    return source, protocol, dataclasses.asdict(identity), ex.recorded(model_exec(source))


def _open(job: AuditJob, in_process: bool, stack: contextlib.ExitStack) -> _Open:
    source, protocol, model_id, exec_ = _resolve(job, in_process)
    extra = {"task_source": job.task.source, "n_questions": len(job.task), **job.extra}
    record = RunRecord.new("audit", protocol, model_id, job.task.data_identity, extra=extra, exec=exec_)
    store, was_complete = None, False
    if job.out is not None:
        store = AuditDir(job.out)
        stack.enter_context(store.writer())
        was_complete = store.is_complete()
        store.start(record)
    done = frozenset(store.finished_ids()) if store is not None else frozenset()
    slices = batch_slices(job.task, protocol, job.exec_config.max_batch_rows, done)
    shard = ShardJob(source, job.task, protocol, model_id, job.exec_config, done, job.sample_offset)
    return _Open(job, shard, record, store, slices, was_complete and not slices)


def _finish(o: _Open):
    """The job's audit (a directory's result is every question it holds), written complete to its directory."""
    if o.store is not None:
        questions, samples = o.store.tables()
        record = o.store.record()
    else:
        questions = pd.concat(o.frames[0], ignore_index=True) if o.frames[0] else pd.DataFrame(columns=QUESTION_COLUMNS)
        samples = pd.concat(o.frames[1], ignore_index=True) if o.frames[1] else pd.DataFrame(columns=SAMPLE_COLUMNS)
        record = o.record
    questions, samples = in_task_order(questions, samples, [q.question_id for q in o.job.task.questions])
    result = RUN_KINDS["audit"](o.shard.protocol, o.shard.model_id, questions, samples, dict(o.job.task.data_identity),
                                record=record, location=None if o.store is None else o.store.path)
    if o.store is not None:
        if not o.was_complete:
            result.write_to(o.store)
        o.store.finish(result.summary())
        result = dataclasses.replace(result, record=o.store.record())
    return result


def run_jobs(
    jobs: Sequence[AuditJob], executor=None, *, progress: Callable[[int, int], None] | None = None,
    on_done: Callable[[int, Any, float], None] | None = None,
) -> list:
    """Run (or resume) every audit of ``jobs`` on ``executor``; return their results (audit runs) in order.

    Args:
        executor: None decodes in this process (a loaded model with its hooks live; a spec loaded here);
            a :class:`~reachlens.runner.ProcessPool` or :class:`~reachlens.runner.RayExecutor` decodes the
            slices in workers, each loading its own replica.
        progress: ``progress(job index, questions finished)`` after each slice (and once at the start).
        on_done: ``on_done(job index, result, seconds)`` as each job completes (its directory is complete
            then); ``seconds`` is the time its slices took in the workers.
    """
    from reachlens.runner.executors import InProcessExecutor

    for job in jobs:  # before any model loads or directory opens
        check_budget(job.protocol, job.exec_config.max_batch_rows)
    in_process = executor is None
    if in_process:
        executor = InProcessExecutor({i: job.model for i, job in enumerate(jobs)
                                      if not isinstance(job.model, (str, ModelSource))})
    with contextlib.ExitStack() as stack:
        opened = [_open(job, in_process, stack) for job in jobs]
        results: list[Any] = [None] * len(opened)
        for i, o in enumerate(opened):
            if progress:
                progress(i, o.n_done)
            if not o.slices:
                results[i] = _complete(i, o, on_done)
        for r in executor.run([(o.shard, list(o.slices)) for o in opened]):
            o = opened[r.job]
            if o.store is not None:
                o.store.append(r.questions, r.samples)
            o.frames[0].append(r.questions)
            o.frames[1].append(r.samples)
            o.slices.remove(r.slice)
            o.seconds += r.seconds
            if progress:
                progress(r.job, o.n_done)
            if not o.slices:
                results[r.job] = _complete(r.job, o, on_done)
        return results


def _complete(i: int, o: _Open, on_done: Callable[[int, Any, float], None] | None):
    result = _finish(o)
    if on_done is not None:
        on_done(i, result, o.seconds)
    return result


def iter_slices(shards: Sequence[tuple[ShardJob, Sequence[tuple[int, int]]]]) -> Iterator[tuple[int, tuple[int, int]]]:
    """Every (job index, slice) of ``shards``, job by job (the order executors dispatch in)."""
    for i, (_, slices) in enumerate(shards):
        for s in slices:
            yield i, s
