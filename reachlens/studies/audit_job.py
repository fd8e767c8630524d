"""The audit as a job of the runner: :class:`AuditJob` (what :func:`audit` runs), and its workers' :class:`AuditShard`.

An audit is a list of fixed question slices (:func:`~reachlens.runner.batch_slices`: ``max_batch_rows // (K + 1)``
questions each, counted from the task's first question whatever is done), one unit. A worker decodes a slice
into its question and sample tables (:func:`~reachlens.runner.audit_slice`: the greedy deployment and K seeded
samples per question); the driver appends them as a part of the audit directory
(:class:`~reachlens.store.PartsDir`), and when every slice is in, the audit's tables are its finished questions in
task order (:func:`~reachlens.store.audit_tables`), written whole with the summary; an audit of a task with a trace
grader (``arith*``, ``gsm8k``) is trace-graded then too (:func:`~reachlens.studies.trace_reach.task_trace`: its
``trace`` table, and D^trace, O_K^trace, ... in its summary).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.engine.memory import check_budget
from reachlens.execution import ExecConfig
from reachlens.protocol import Protocol
from reachlens.records import QUESTION_COLUMNS, SAMPLE_COLUMNS, in_task_order
from reachlens.runner import (
    Executor,
    Opened,
    Slice,
    audit_slice,
    batch_slices,
    resolve_model,
    run_jobs,
)
from reachlens.runner.shard import ModelShard
from reachlens.store import PartsDir, RunRecord, audit_tables
from reachlens.studies.auditing import AuditResult, stored_trace
from reachlens.studies.trace_reach import task_trace
from reachlens.tasks.base import Task

__all__ = ["AuditJob", "AuditShard", "audit"]


@dataclass(frozen=True)
class AuditShard(ModelShard):
    """What a worker needs to decode any slice of one audit (sent once per audit, not per slice): the model, task and
    protocol (:class:`~reachlens.runner.shard.ModelShard`; the protocol with its backend), and these."""

    exec_config: ExecConfig = field(default_factory=ExecConfig)
    sample_offset: int = 0

    def decode(self, model: Any, part: Slice) -> dict[str, pd.DataFrame]:
        _, start, stop = part
        questions, samples = audit_slice(model, self.task, self.protocol, start, stop, self.exec_config,
                                         sample_offset=self.sample_offset)
        return {"samples": samples, "questions": questions}  # samples first: a part's questions imply them


@dataclass(frozen=True)
class AuditJob:
    """One audit for the runner (:class:`~reachlens.runner.Job`): what :func:`audit` takes.

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

    def check(self) -> None:
        check_budget(self.protocol, self.exec_config.max_batch_rows)

    def resolve(self, in_process: bool) -> tuple[AuditShard, RunRecord]:
        r = resolve_model(self.model, self.task, self.protocol, self.exec_config, in_process)
        extra = {"task_source": self.task.source, "n_questions": len(self.task), **self.extra}
        record = RunRecord.new("audit", r.protocol, r.model_id, self.task.data_identity, extra=extra, exec=r.exec)
        return AuditShard(self.exec_config, self.sample_offset, source=r.source, task=self.task, protocol=r.protocol,
                          model_id=r.model_id, model=r.model), record

    def plan(self, shard: AuditShard) -> list[Slice]:
        return [(0, a, b) for a, b in batch_slices(self.task, shard.protocol, self.exec_config.max_batch_rows)]

    def todo(self, shard: AuditShard, store: PartsDir | None) -> list[Slice]:
        """The slices holding a question not finished yet (one lacking samples is not finished)."""
        if store is None:
            return self.plan(shard)
        questions, _ = audit_tables(store)
        done = set(questions["question_id"]) if len(questions) else set()
        return [s for s in self.plan(shard) if any(q.question_id not in done for q in self.task.questions[s[1]:s[2]])]

    def finish(self, o: Opened) -> AuditResult:
        """The audit (a directory's result is every question it holds), written complete to its directory."""
        if o.store is not None:
            questions, samples = audit_tables(o.store)
        else:
            parts = [o.parts[key] for key in sorted(o.parts)]
            questions = pd.concat([p["questions"] for p in parts], ignore_index=True) if parts else \
                pd.DataFrame(columns=QUESTION_COLUMNS)
            samples = pd.concat([p["samples"] for p in parts], ignore_index=True) if parts else \
                pd.DataFrame(columns=SAMPLE_COLUMNS)
        questions, samples = in_task_order(questions, samples, [q.question_id for q in self.task.questions])
        record = o.store.record() if o.store is not None else o.record
        trace = stored_trace(o.store) if o.was_complete and o.store is not None else None
        if trace is None:
            trace = task_trace(questions, samples, self.task)
        result = AuditResult(questions, samples, trace, record=record,
                             location=None if o.store is None else o.store.path)
        if o.store is not None:
            if not o.was_complete:
                result.write_to(o.store)
            elif trace is not None and stored_trace(o.store) is None:
                o.store.write_table("trace", trace)  # written before audits were trace-graded as they finish
            o.store.finish(result.summary())
            result = dataclasses.replace(result, record=o.store.record())
        return result


def audit(
    model, task: Task, protocol: Protocol, *, out: str | Path | None = None, exec_config: ExecConfig | None = None,
    progress: Callable[[int, int], None] | None = None, executor: Executor | None = None,
) -> AuditResult:
    """Audit ``model`` on ``task`` under ``protocol``.

    Args:
        model: a TransformerBridge from :func:`reachlens.load_model` (hooks the caller attached stay live),
            a model of another backend (:func:`reachlens.models.load_vllm`), or a model spec
            (``"zoo:base"``, a :class:`~reachlens.models.ModelSource`) loaded for ``protocol.backend``
            (by this process, or with workers by each of them).
        task: the questions; all of them are audited (use ``task.head(n)`` for fewer).
        protocol: how each question is probed; ``default``/None fields are filled from the task.
        out: an audit directory; finished questions are written as they finish and skipped on a re-run.
        exec_config: how it runs (:class:`~reachlens.execution.ExecConfig`: batch rows, prefix sharing, for a
            spec the device and precision it loads in, and who decodes: ``workers``, ``ray``); its
            result-changing settings are recorded and checked on a re-run.
        progress: called with (questions finished, questions in all) after each batch.
        executor: who decodes (:class:`~reachlens.runner.Executor`); None: the one ``exec_config`` asks for
            (:func:`~reachlens.runner.executor_for`). The result is the same either way: sample j of question q
            depends on (seed, q, j) only and the batches are the same.

    >>> result = audit(load_model("zoo:base"), load_task("arith", n=20), Protocol("arith", k=8))  # doctest: +SKIP
    >>> result.D, result.O_K  # doctest: +SKIP
    """
    job = AuditJob(model, task, protocol, out, exec_config or ExecConfig())
    return run_jobs([job], executor, progress=None if progress is None else (lambda i, done, total: progress(done, total)))[0]
