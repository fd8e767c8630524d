"""The routing study's run: one cell of a route search, scored (:class:`RoutingResult`, a run of kind ``routing``).

:func:`~reachlens.routing.run_routing` (:mod:`reachlens.routing.job`, on the runner) runs one cell (a model, a
task, a route space, a strategy at budget K): the search (:func:`~reachlens.routing.search.run_search`), the verification scores of the candidates
(:mod:`reachlens.selectors.verification`), the deployment (the identity route, greedy), and the scoring
(:mod:`reachlens.routing.scoring`). Every route decodes by one greedy
:class:`~reachlens.protocol.Protocol`; the search's own options are a :class:`RoutingConfig`. The
result is a run of kind ``routing`` (:class:`RoutingResult`), saved as a run directory:

    DIR/run.json           the run record: protocol, options (config, space, strategy), model, data
    DIR/candidates.parquet one row per route evaluation (route, raw text, answer, grade, scores)
    DIR/questions.parquet  one row per question (realized, reachable, each selector)
    and its summary: D, O_K, each selector, gap recoveries, evaluations spent; on a task with a trace grader
    (``arith*``, ``gsm8k``) D_trace and O_K_trace, reach by verified solutions; on a task that can be built again
    (:func:`~reachlens.studies.lucky_null.task_golds`) O_K's lucky-guess null: ``O_K_null``, ``O_K_null_p95``,
    ``O_K_minus_null`` with its interval (each question's routes scored against another question's gold of its kind)

Several cells over the same model and task can share one
:class:`~reachlens.routing.evaluation.RouteEvaluator`, so a (question, route) pair is decoded once
however many strategies and spaces ask for it (decoding is greedy, so the answer is the same).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pandas as pd

from reachlens.routing.scoring import cell_summary
from reachlens.routing.search import RoutingConfig
from reachlens.store import RecordedProtocol, Run, RunDir, register_kind
from reachlens.studies.lucky_null import lucky_null, task_golds
from reachlens.studies.trace_reach import solutions_valid

__all__ = ["RoutingConfig", "RoutingResult"]


@register_kind
@dataclass(frozen=True)
class RoutingResult(RecordedProtocol, Run):
    """One routing cell (a run of kind ``routing``): its run record and its candidate and question tables."""

    kind: ClassVar[str] = "routing"
    record_fields: ClassVar[dict[str, tuple[type, ...]]] = {
        "protocol": (dict,), "options.config": (dict,), "options.config.selectors": (list,),
        "options.config.budget": (int,), "options.strategy": (str,), "options.space.space": (str,)}

    candidates: pd.DataFrame = field(repr=False)
    """One row per route evaluation (:data:`~reachlens.records.ROUTE_CANDIDATE_COLUMNS`). Its record (always given):
    the greedy protocol, options (``config``, ``strategy``, ``space``, ``evaluation``), model and data identity."""
    questions: pd.DataFrame = field(repr=False)

    @property
    def config(self) -> RoutingConfig:
        return RoutingConfig.from_dict(self.record.options["config"])

    @property
    def strategy(self) -> str:
        return self.record.options["strategy"]

    @property
    def space_name(self) -> str:
        return self.record.options["space"]["space"]

    @property
    def selectors(self) -> tuple[str, ...]:
        return tuple(self.record.options["config"]["selectors"])

    def summary(self) -> dict[str, Any]:
        """D, O_K, selector accuracies, gap recoveries (NaN = undefined), the evaluations spent, O_K's lucky-guess
        null and, on a task with a trace grader, the verified reach."""
        s = cell_summary(self.questions, self.selectors).iloc[0].to_dict()
        s["n"] = int(s["n"])
        s["budget"] = self.config.budget
        s["evaluations"] = len(self.candidates)
        s["unique_routes"] = int(self.candidates.groupby("question_id")["route"].nunique().sum())
        s.update(strategy=self.strategy, space_name=self.space_name, model_spec=self.record.model.get("spec"),
                 task=self.protocol.task)
        s.update(self._null())
        s.update(self._verified())
        return s

    def _null(self) -> dict[str, Any]:
        """O_K's lucky-guess null (:func:`~reachlens.studies.lucky_null.lucky_null` over the route evaluations, the
        golds those of the task built again); none when the task cannot be built again as it was."""
        golds = task_golds(self.protocol.task, self.protocol.split, self.record.data)
        ids = self.questions["question_id"]
        if golds is None or not ids.isin(golds.index).all():
            return {}
        return lucky_null(self.questions.assign(gold=ids.map(golds).to_numpy()), self.candidates).summary()

    def _verified(self) -> dict[str, Any]:
        """On a task with a trace grader: ``O_K_trace``, the share of questions some route *solves* (a right answer
        on a valid worked solution, :func:`~reachlens.studies.trace_reach.solutions_valid`), and ``D_trace``, the
        identity route's (the deployment, the first evaluation; NaN when the search does not seed it)."""
        c = self.candidates
        valid = solutions_valid(c["question_id"], c["text"], self.protocol.task, self.protocol.split)
        if valid is None:
            return {}
        c = c.assign(solved=c["correct"].astype(bool).to_numpy() & valid)
        out = {"O_K_trace": float(c.groupby("question_id")["solved"].any().mean()) if len(c) else math.nan}
        first = c.sort_values("candidate_idx", kind="stable").groupby("question_id", sort=False).head(1)
        graded = self.questions.set_index("question_id")["deployed_scored"].astype(bool)
        first = first[first["question_id"].map(graded).fillna(False).astype(bool)]
        out["D_trace"] = float(first["solved"].mean()) if self.config.seed_identity and len(first) else math.nan
        return out

    def tables(self) -> dict[str, pd.DataFrame]:
        return {"candidates": self.candidates, "questions": self.questions}

    def report_tables(self) -> dict[str, pd.DataFrame]:
        return {"Per question": self.questions}

    @classmethod
    def read(cls, run: RunDir) -> RoutingResult:
        """A routing run directory."""
        return cls(run.read_table("candidates"), run.read_table("questions"), record=run.record(), location=run.path)
