"""A recognition run as a job of the runner: :class:`RecognitionJob` (what :func:`recognize` runs), and its workers'
:class:`RecognitionShard`.

A recognition run is a list of fixed slices of the task's questions, ``max_batch_rows`` questions each
(:func:`~reachlens.runner.question_slices`: one greedy generation row a question). A worker runs
:func:`~reachlens.studies.recognition.compare_modes` on a slice (its options' log-likelihoods and its questions'
recognition and generation); the driver appends the two tables as a part of the run directory
(:class:`~reachlens.store.PartsDir`), so a killed run resumes from its finished slices, on any executor. When every
slice is in, the failure rule (if any) picks the failure set and the healthy panel from the whole question table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.engine.scoring import scoring_window
from reachlens.execution import ExecConfig
from reachlens.protocol import Protocol
from reachlens.runner import (
    Executor,
    Slice,
    model_config,
    question_slices,
    resolve_model,
    run_jobs,
)
from reachlens.runner.shard import ModelShard
from reachlens.runner.tables_job import TablesJob
from reachlens.store import RunRecord
from reachlens.studies.recognition import (
    FailureRule,
    FailureSetTooSmall,
    RecognitionConfig,
    RecognitionResult,
    TaskSpec,
    compare_modes,
    generation_protocol,
    select_sets,
)
from reachlens.tasks.base import Task

__all__ = ["RecognitionJob", "RecognitionShard", "recognize"]


@dataclass(frozen=True)
class RecognitionShard(ModelShard):
    """What a worker needs to run any slice of one recognition run (sent once per run): the model, task and the
    greedy generation's protocol (:class:`~reachlens.runner.shard.ModelShard`), and its configuration."""

    config: RecognitionConfig
    """Resolved: the recognition format and the scoring window are explicit."""

    def decode(self, model: Any, part: Slice) -> dict[str, pd.DataFrame]:
        _, start, stop = part
        sub = dataclasses.replace(self.task, questions=self.task.questions[start:stop])
        result = compare_modes(model, sub, self.protocol, self.config)
        return {"options": result.options, "questions": result.questions}  # questions last: they mark it whole


@dataclass(frozen=True)
class RecognitionJob(TablesJob):
    """One recognition run for the runner (:class:`~reachlens.runner.Job`): what :func:`recognize` takes."""

    model: Any
    """A spec (loaded as :attr:`exec_config` says), a :class:`~reachlens.models.ModelSource` or a loaded model."""
    task: Task
    protocol: Protocol
    """The greedy generation's (:func:`~reachlens.studies.recognition.generation_protocol`)."""
    config: RecognitionConfig = field(default_factory=RecognitionConfig)
    rule: FailureRule | None = None
    """The rule that picks the failure set and the healthy panel from the finished run (None: not applied)."""
    spec: TaskSpec | None = None
    """How to rebuild the task (recorded with the run and its sets)."""
    out: str | Path | None = None
    exec_config: ExecConfig = field(default_factory=ExecConfig)

    part_tables = ("options", "questions")
    redo = "re-run the same recognize command into this directory to decode its slice again"

    def check(self) -> None:
        generation_protocol(self.task, self.protocol)  # greedy
        self.config.resolved(self.task)  # a recognition format the task has

    def resolve(self, in_process: bool) -> tuple[RecognitionShard, RunRecord]:
        r = resolve_model(self.model, self.task, generation_protocol(self.task, self.protocol), self.exec_config,
                          in_process)
        config = self.config.resolved(self.task)
        if config.max_length is None:  # the window the run scores with, recorded
            window = scoring_window(r.model if r.model is not None else model_config(self.model))
            config = dataclasses.replace(config, max_length=window)
        options = {"config": config.to_dict(), "rule": None if self.rule is None else dataclasses.asdict(self.rule),
                   "task": None if self.spec is None else dataclasses.asdict(self.spec)}
        record = RunRecord.new("recognition", r.protocol, r.model_id, dict(self.task.data_identity) or None, options,
                               exec=r.exec)
        return RecognitionShard(config, source=r.source, task=self.task, protocol=r.protocol, model_id=r.model_id,
                                model=r.model), record

    def plan(self, shard: RecognitionShard) -> list[Slice]:
        return [(0, a, b) for a, b in question_slices(len(self.task), 1, shard.config.max_batch_rows)]

    def compose(self, shard: RecognitionShard, tables: dict[str, pd.DataFrame],
                record: RunRecord) -> RecognitionResult:
        result = RecognitionResult(shard.protocol, shard.config, record.model, tables["options"], tables["questions"],
                                   dict(self.task.data_identity), self.rule, self.spec, exec=record.exec, record=record)
        if self.rule is None:
            return result
        try:
            return dataclasses.replace(result, sets=select_sets(result, self.rule, self.spec))
        except FailureSetTooSmall:
            return result  # the tables are the run; the caller reports the rule's shortfall (select_sets again)


def recognize(
    model, task: Task, protocol: Protocol | None = None, config: RecognitionConfig | None = None, *,
    rule: FailureRule | None = None, spec: TaskSpec | None = None, out: str | Path | None = None,
    exec_config: ExecConfig | None = None, progress: Callable[[int, int], None] | None = None,
    executor: Executor | None = None,
) -> RecognitionResult:
    """Recognition (option likelihoods) and greedy generation of every question of ``task``, on the runner; with
    ``rule``, the failure set and healthy panel it picks (``sets``; None when too few questions meet it).

    Args:
        model: a TransformerBridge (hooks the caller attached stay live), or a spec loaded as ``exec_config`` says.
        protocol: the greedy protocol of the generation (:func:`generation_protocol`; the task's deployment when
            None).
        config: recognition's own options (its ``max_batch_rows`` fixes the slices: questions decoded together).
        out: a run directory: slices are written as they finish, and a re-run resumes it.
        exec_config: device and dtype of a spec, and who decodes (``workers``, ``ray``).
        progress: called with (questions done, questions in all) after each slice.

    >>> rec = recognize("zoo:base", load_task("arith_mc", n=100), rule=FailureRule(), out="runs/r")  # doctest: +SKIP
    """
    config = config or RecognitionConfig()
    exec_config = dataclasses.replace(exec_config or ExecConfig(), max_batch_rows=config.max_batch_rows)
    job = RecognitionJob(model, task, protocol or Protocol.deployment(task), config, rule, spec, out, exec_config)
    each = None if progress is None else (lambda i, done, total: progress(done, total))
    return run_jobs([job], executor, progress=each)[0]
