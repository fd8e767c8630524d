"""The one scheduler: a list of jobs, run on an executor, each written to its run directory as its slices finish.

A **job** (:class:`Job`) is a run the runner can schedule: it plans its fixed slices of questions, gives its workers a
:class:`~reachlens.runner.executor.Shard` that decodes any one of them, and finishes from its parts in the driver.
:class:`~reachlens.studies.AuditJob` (an audit: the deployment and K samples per question) and
:class:`~reachlens.probes.ProbeJob` (a probe run: one candidate bank) are the two. Slice s of a job decodes the
same rows wherever it runs, so :func:`run_jobs` lets any executor decode the slices anywhere and in any order,
while this process (the driver) holds each run directory's writer lock and appends every finished slice as a
part (:class:`~reachlens.store.PartsDir`). A killed driver leaves whole parts behind, and any executor resumes
from them; workers never write, so they need no shared disk.

Executors (:mod:`reachlens.runner.executor`) are chosen by :func:`executor_for` from the jobs'
:class:`~reachlens.execution.ExecConfig`: ``workers=1`` decodes in this process, more in a
:class:`~reachlens.runner.ProcessPool`, ``ray=`` on :class:`~reachlens.runner.RayExecutor` actors. Every audit and
probe run goes through :func:`run_jobs` (an audit, a rerun, a probe run, a training study, an elicitation, the CLI);
so do a routing search, a recognition run and a causal sweep (:class:`~reachlens.runner.tables_job.TablesJob`s).
"""

from __future__ import annotations

import contextlib
import dataclasses
import typing
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.engine.backends import backend_of, bind_backend
from reachlens.errors import ReachlensError, ReachlensWarning
from reachlens.execution import ExecConfig, model_exec
from reachlens.models import ModelSource, identity_of, load_tokenizer, model_identity, resolve_spec
from reachlens.protocol import Protocol
from reachlens.runner.executor import Executor, Shard, Slice
from reachlens.runner.executors import InProcessExecutor, ProcessPool
from reachlens.runner.ray_executor import RayExecutor
from reachlens.store import PartKey, PartsDir, RunRecord
from reachlens.tasks.base import Task
from reachlens.tasks.chat import bind_chat, chat_inner

__all__ = ["Job", "Opened", "ResolvedModel", "executor_for", "model_config", "resolve_model", "run_jobs"]


@typing.runtime_checkable
class Job(typing.Protocol):
    """A run the runner schedules (see the module docstring); a frozen dataclass of what the run is."""

    out: str | Path | None
    """Its run directory (resumable); None keeps the result in memory only."""
    exec_config: ExecConfig

    def check(self) -> None:
        """Refuse, before any model loads or directory opens, what the job cannot do (a budget that cannot fit)."""

    def resolve(self, in_process: bool) -> tuple[Shard, RunRecord]:
        """Its workers' shard and its run record (protocol resolved, model identity, recorded execution settings)."""

    def plan(self, shard: Shard) -> list[Slice]:
        """Every slice of the run, fixed whatever is done already (so a resume decodes the same batches)."""

    def todo(self, shard: Shard, store: PartsDir | None) -> list[Slice]:
        """The slices of :meth:`plan` still to decode: all without a directory, else those whose parts are not whole
        (called under the writer lock, the run started again)."""

    def finish(self, opened: Opened) -> Any:
        """The run, from its parts (the directory's, or :attr:`Opened.parts` in memory), written complete."""


@dataclass
class Opened:
    """One job as the driver holds it: its shard, record, directory, what is left and what came back."""

    job: Job
    shard: Shard
    record: RunRecord
    store: PartsDir | None
    slices: list[Slice]
    """The slices still to decode."""
    total: int
    """Questions of every slice of the plan (a slice of a probe run's unit counts its questions)."""
    was_complete: bool = False
    """Whether its directory held this run complete already (a re-run of a finished run rewrites nothing)."""
    parts: dict[PartKey, dict[str, pd.DataFrame]] = field(default_factory=dict)
    """The parts decoded by this call, by key (what a run without a directory is made of)."""
    seconds: float = 0.0

    @property
    def done(self) -> int:
        return self.total - sum(stop - start for _, start, stop in self.slices)


def executor_for(exec_config: ExecConfig) -> Executor:
    """The executor ``exec_config`` asks for: :class:`~reachlens.runner.RayExecutor` with ``ray`` (``local``: a
    cluster of its own; else an address) and ``workers`` actors; a :class:`~reachlens.runner.ProcessPool` of
    ``workers`` processes for ``workers > 1``; else this process (:class:`~reachlens.runner.InProcessExecutor`).

    >>> type(executor_for(ExecConfig(workers=2))).__name__
    'ProcessPool'
    """
    if exec_config.ray is not None:
        return RayExecutor(None if exec_config.ray == "local" else exec_config.ray, workers=exec_config.workers,
                           gpus_per_worker=exec_config.gpus_per_worker)
    if exec_config.workers > 1:
        return ProcessPool(exec_config.workers)
    return InProcessExecutor()


@dataclass(frozen=True)
class ResolvedModel:
    """A job's model as its shard carries it: the source its workers load, the model this process holds (in
    process only), the protocol bound to it (backend, chat template), its identity and recorded settings."""

    source: ModelSource | None
    model: Any
    protocol: Protocol
    model_id: dict[str, Any]
    exec: dict[str, Any]


def model_config(model: Any) -> Any:
    """The HuggingFace config of a job's model: a loaded model's, or read from a spec's files (no weights load);
    refused in one line when a spec's config cannot be read (a GGUF file, an adapter: pass the loaded model)."""
    if not isinstance(model, (str, ModelSource)):
        return model.original_model.config
    source = model if isinstance(model, ModelSource) else ModelSource(model)
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(resolve_spec(source.spec)[0], trust_remote_code=source.trust_remote_code)
    except (OSError, ValueError):
        raise ReachlensError(f"the config of {source.spec!r} cannot be read without loading it; pass the loaded "
                             "model instead") from None


def _source_for_workers(model) -> ModelSource:
    """The source an executor's workers load for a model this process holds (refused when it has hooks)."""
    from reachlens.engine.hooks import user_hooks

    hooks = user_hooks(model) if backend_of(model) == "engine" else []
    if hooks:
        raise ReachlensError(f"hooks attached at {', '.join(hooks)} cannot travel to an executor's workers "
                             "(each loads its own replica); run it in one process (workers=1, no executor)")
    return ModelSource.of(model)


def resolve_model(model: Any, task: Task, protocol: Protocol, exec_config: ExecConfig,
                  in_process: bool) -> ResolvedModel:
    """Resolve a job's model (a spec, a :class:`~reachlens.models.ModelSource` or a loaded model) against its
    protocol (resolved against ``task`` first): never loads weights. A spec loads as ``exec_config`` says (device,
    dtype, device map)."""
    protocol = protocol.resolved(task)
    ex = exec_config
    if not isinstance(model, (str, ModelSource)):  # a loaded model
        protocol = bind_chat(bind_backend(model, protocol), getattr(model, "tokenizer", None))
        source = None if in_process else _source_for_workers(model)
        return ResolvedModel(source, model if in_process else None, protocol, identity_of(model),
                             ex.recorded(model_exec(model)))
    source = model if isinstance(model, ModelSource) else \
        ModelSource(model, backend=protocol.backend, device=ex.device, dtype=ex.dtype, device_map=ex.device_map)
    if protocol.backend == "engine" and source.backend != "engine":  # the default follows the model
        protocol = dataclasses.replace(protocol, backend=source.backend)
    elif protocol.backend != source.backend:
        raise ReachlensError(f"backend={protocol.backend!r} but {source.spec!r} is loaded for {source.backend!r}; "
                             f"pass the spec alone, or ModelSource(spec, backend={protocol.backend!r})")
    if chat_inner(protocol.prompt_format) is not None:  # bound to the template of the tokenizer's files
        tokenizer = load_tokenizer(source.spec, trust_remote_code=source.trust_remote_code)
        protocol = bind_chat(protocol, tokenizer, model=repr(source.spec))
    identity = model_identity(source.spec, trust_remote_code=source.trust_remote_code)
    return ResolvedModel(source, None, protocol, dataclasses.asdict(identity), ex.recorded(model_exec(source)))


def _open(job: Job, executor: Executor, stack: contextlib.ExitStack) -> Opened:
    """Resolve ``job`` and open its directory: a bad directory or another run in it is refused before any weights
    load; in this process, the model is loaded (one replica at a time) and checked before anything is written."""
    shard, record = job.resolve(executor.in_process)
    store = None if job.out is None else PartsDir(job.out)
    if store is not None:
        store.check_target()
        with warnings.catch_warnings():  # its notes come once, when the run starts
            warnings.simplefilter("ignore", ReachlensWarning)
            store.check_run(record)
    if executor.in_process:
        if shard.model is None:  # loaded (and checked) by the executor's one replica
            shard = dataclasses.replace(shard, model=executor.replica.model_for(shard, id(job)))
        else:
            shard.prepare(shard.model)
    was_complete = False
    if store is not None:
        stack.enter_context(store.writer())
        was_complete = store.is_complete()
        store.start(record)
    plan = job.plan(shard)
    slices = job.todo(shard, store)
    return Opened(job, shard, record, store, slices, sum(b - a for _, a, b in plan), was_complete and not slices)


def run_jobs(
    jobs: Sequence[Job], executor: Executor | None = None, *, progress: Callable[[int, int, int], None] | None = None,
    on_done: Callable[[int, Any, float], None] | None = None,
) -> list:
    """Run (or resume) every job of ``jobs`` on ``executor``; return their runs in order.

    In this process the jobs run one after another, each opened (its directory locked, its model loaded and
    checked) when it starts; with workers, every job is opened first and their slices decode together.

    Args:
        executor: who decodes the slices; None: :func:`executor_for` the first job's execution settings (this
            process unless they ask for workers), closed again when the jobs are done.
        progress: ``progress(job index, questions done, questions in all)`` after each slice (and once at the
            start); a probe run counts each unit's questions.
        on_done: ``on_done(job index, run, seconds)`` as each job completes (its directory is complete then);
            ``seconds`` is the time its slices took in the workers.
    """
    for job in jobs:  # before any model loads or directory opens
        job.check()
    owned = executor is None
    executor = executor_for(jobs[0].exec_config if jobs else ExecConfig()) if owned else executor
    results: list[Any] = [None] * len(jobs)
    try:
        groups = [[i] for i in range(len(jobs))] if executor.in_process else [list(range(len(jobs)))]
        for group in groups:
            with contextlib.ExitStack() as stack:
                opened = {i: _open(jobs[i], executor, stack) for i in group}
                _drive(opened, executor, results, progress, on_done)
        return results
    finally:
        if owned:
            executor.close()


def _drive(opened: dict[int, Opened], executor: Executor, results: list[Any],
           progress: Callable[[int, int, int], None] | None, on_done: Callable[[int, Any, float], None] | None) -> None:
    """Decode the slices of the ``opened`` jobs (by job index) on ``executor``, appending each as it finishes."""
    order = list(opened)
    for i, o in opened.items():
        if progress:
            progress(i, o.done, o.total)
        if not o.slices:
            results[i] = _complete(i, o, on_done)
    for r in executor.run([(opened[i].shard, list(opened[i].slices)) for i in order]):
        i = order[r.job]
        o = opened[i]
        key = r.slice[:2]
        if o.store is not None:
            o.store.append(key, r.tables)
        o.parts[key] = r.tables
        o.slices.remove(r.slice)
        o.seconds += r.seconds
        if progress:
            progress(i, o.done, o.total)
        if not o.slices:
            results[i] = _complete(i, o, on_done)


def _complete(i: int, o: Opened, on_done: Callable[[int, Any, float], None] | None):
    result = o.job.finish(o)
    if on_done is not None:
        on_done(i, result, o.seconds)
    return result
