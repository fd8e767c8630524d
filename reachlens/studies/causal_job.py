"""A causal sweep as a job of the runner: :class:`SweepJob` (what :func:`run_sweep` runs), and its workers'
:class:`SweepShard`.

A sweep is a list of fixed slices of its questions (the failure set, then the healthy panel), ``max_batch_rows //
conditions`` questions each (:func:`~reachlens.runner.question_slices`: a question decodes once per condition, each
an arm). A worker makes every condition on its own model (:class:`~reachlens.studies.causal_runs.ConditionSpec`) and
decodes the slice's questions under all of them (:func:`~reachlens.studies.causal_runs.evaluate_conditions`); the
driver appends the per-question outcomes as a part of the run directory (:class:`~reachlens.store.PartsDir`), so a
killed sweep resumes from its finished slices, on any executor. When every slice is in, the sweep's table is made
from each condition's outcomes (:attr:`SweepJob.table`), in the order of its conditions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.execution import ExecConfig
from reachlens.runner import Executor, Slice, question_slices, resolve_model, run_jobs
from reachlens.runner.shard import ModelShard
from reachlens.runner.tables_job import TablesJob
from reachlens.store import RunRecord
from reachlens.studies.causal_runs import SWEEPS, CausalResult, ConditionSpec, evaluate_conditions, set_ids
from reachlens.studies.recognition import EvalSets
from reachlens.tasks.base import Task

__all__ = ["SweepJob", "SweepShard", "run_sweep"]


def _sliced(sets: EvalSets, ids: Sequence[str]) -> EvalSets:
    """``sets`` with only the questions ``ids`` (each set keeps its order)."""
    keep = set(ids)
    return dataclasses.replace(sets, failure=tuple(i for i in sets.failure if i in keep),
                               healthy=tuple(i for i in sets.healthy if i in keep))


@dataclass(frozen=True)
class SweepShard(ModelShard):
    """What a worker needs to decode any slice of one sweep (sent once per sweep): the model, task and the sets'
    protocol resolved (:class:`~reachlens.runner.shard.ModelShard`), the sets and the conditions."""

    sets: EvalSets
    conditions: tuple[ConditionSpec, ...]

    def context(self) -> Task:
        return self.task.only(set_ids(self.sets, "both"))  # the sets' questions alone are decoded

    def decode(self, model: Any, part: Slice) -> dict[str, pd.DataFrame]:
        _, start, stop = part
        sets = _sliced(self.sets, set_ids(self.sets, "both")[start:stop])
        per_q = evaluate_conditions(model, self.task, sets, [c.condition(model) for c in self.conditions])
        return {"per_question": pd.concat(per_q, ignore_index=True)}


@dataclass(frozen=True)
class SweepJob(TablesJob):
    """One causal sweep for the runner (:class:`~reachlens.runner.Job`): its ``conditions`` decoded on the ``sets``
    of ``task``; its table made by ``table`` from each condition's per-question outcomes."""

    kind: str
    """``silence``, ``steer`` or ``units`` (:data:`~reachlens.studies.causal_runs.SWEEPS`)."""
    model: Any
    """A loaded model (decoded here, hooks live; workers load its source), a spec or a ModelSource."""
    task: Task
    sets: EvalSets
    conditions: tuple[ConditionSpec, ...]
    table: Callable[[list[pd.DataFrame]], pd.DataFrame] = field(compare=False)
    """The sweep's table from each condition's per-question outcomes, in the order of :attr:`conditions`."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """The sweep's settings (its record's options)."""
    extra: Mapping[str, pd.DataFrame] = field(default_factory=dict, compare=False)
    """Further tables made before the decode (a units sweep's ranking)."""
    out: str | Path | None = None
    exec_config: ExecConfig = field(default_factory=ExecConfig)

    part_tables = ("per_question",)
    redo = "re-run the same sweep command into this directory to decode its slice again"

    def check(self) -> None:
        """Nothing left to refuse: the sweep checked its sets, layers and sites before it made its conditions."""

    def resolve(self, in_process: bool) -> tuple[SweepShard, RunRecord]:
        r = resolve_model(self.model, self.task, self.sets.protocol, self.exec_config, in_process)
        record = RunRecord.new(self.kind, self.sets.protocol, r.model_id, self.task.data_identity,
                               options=dict(self.meta), exec=r.exec)
        return SweepShard(self.sets, self.conditions, source=r.source, task=self.task,
                          protocol=self.sets.protocol.resolved(self.task), model_id=r.model_id, model=r.model), record

    def plan(self, shard: SweepShard) -> list[Slice]:
        n = len(set_ids(self.sets, "both"))
        return [(0, a, b) for a, b in question_slices(n, len(self.conditions), self.exec_config.max_batch_rows)]

    def compose(self, shard: SweepShard, tables: dict[str, pd.DataFrame], record: RunRecord) -> CausalResult:
        rows = tables["per_question"]
        per_q = [rows[rows["condition"] == c.name].reset_index(drop=True) for c in self.conditions]
        return SWEEPS[self.kind](self.table(per_q), pd.concat(per_q, ignore_index=True), dict(self.extra),
                                 record=record)


def run_sweep(
    job: SweepJob, *, one_at_a_time: bool = False, progress: Callable[[int, int], None] | None = None,
    executor: Executor | None = None,
) -> CausalResult:
    """Run ``job`` on the runner (resumable in its ``out``, on any executor); or, with ``one_at_a_time``, decode each
    condition alone in this process, its hooks on every row (the same tables, one decode each; saved to ``out``)."""
    if not one_at_a_time:
        each = None if progress is None else (lambda i, done, total: progress(done, total))
        return run_jobs([job], executor, progress=each)[0]
    model = job.model
    per_q = evaluate_conditions(model, job.task, job.sets, [c.condition(model) for c in job.conditions],
                                one_at_a_time=True)
    _, record = job.resolve(True)
    result = SWEEPS[job.kind](job.table(per_q), pd.concat(per_q, ignore_index=True), dict(job.extra), record=record)
    if job.out is None:
        return result
    path = result.save(job.out)
    return dataclasses.replace(result, location=path)
