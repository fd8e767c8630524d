"""The routing study: search routes for every question at a matched budget, then score the pool.

:func:`run_routing` runs one cell (a model, a task, a route space, a strategy at budget K): the
search (:func:`~reachlens.routing.search.run_search`), the verification scores of the candidates
(:mod:`reachlens.selectors.verification`), the deployment (the identity route, greedy), and the scoring
(:mod:`reachlens.routing.scoring`). Every route decodes by one greedy
:class:`~reachlens.protocol.Protocol`; the search's own options are a :class:`RoutingConfig`. The
result is a run of kind ``routing`` (:class:`RoutingResult`), saved as a run directory:

    DIR/run.json           the run record: protocol, options (config, space, strategy), model, data
    DIR/candidates.parquet one row per route evaluation (route, raw text, answer, grade, scores)
    DIR/questions.parquet  one row per question (realized, reachable, each selector)
    and its summary: D, O_K, each selector, gap recoveries, evaluations spent; on a task with a trace grader
    (``arith*``, ``gsm8k``) D_trace and O_K_trace, reach by verified solutions

Several cells over the same model and task can share one
:class:`~reachlens.routing.evaluation.RouteEvaluator`, so a (question, route) pair is decoded once
however many strategies and spaces ask for it (decoding is greedy, so the answer is the same).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.models import identity_of
from reachlens.protocol import Protocol
from reachlens.routing.evaluation import RouteEvaluator
from reachlens.routing.routes import RouteSpace, make_space
from reachlens.routing.scoring import cell_summary, question_table
from reachlens.routing.search import RoutingConfig, run_search
from reachlens.selectors import verification_scores
from reachlens.execution import model_exec
from reachlens.store import RecordedProtocol, Run, RunDir, RunRecord, register_kind
from reachlens.studies.trace_reach import solutions_valid
from reachlens.tasks.base import Task
from reachlens.tasks.chat import bind_chat

__all__ = ["RoutingConfig", "RoutingResult", "run_routing"]


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
        """D, O_K, selector accuracies, gap recoveries (NaN = undefined) and the evaluations spent."""
        s = cell_summary(self.questions, self.selectors).iloc[0].to_dict()
        s["n"] = int(s["n"])
        s["budget"] = self.config.budget
        s["evaluations"] = len(self.candidates)
        s["unique_routes"] = int(self.candidates.groupby("question_id")["route"].nunique().sum())
        s.update(strategy=self.strategy, space_name=self.space_name, model_spec=self.record.model.get("spec"),
                 task=self.protocol.task)
        s.update(self._verified())
        return s

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


def run_routing(
    model,
    task: Task,
    space: RouteSpace | str,
    strategy: str,
    budget: int | None = None,
    *,
    protocol: Protocol | None = None,
    config: RoutingConfig | None = None,
    evaluator: RouteEvaluator | None = None,
    out: str | Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> RoutingResult:
    """Search routes for every question of ``task`` and score the candidate pools.

    Args:
        model: a TransformerBridge from :func:`reachlens.load_model`.
        task: the questions (all of them are searched; use ``task.head(n)`` for fewer).
        space: a :class:`~reachlens.routing.routes.RouteSpace`, or a space name built with its defaults.
        strategy: ``random``, ``hill_climb``, ``genetic`` or ``mcts``.
        budget: K (overrides ``config.budget``).
        protocol: how every route decodes, the greedy case (:meth:`Protocol.deployment` of the task when None);
            the evaluator's when one is given.
        config: the search's own options; :class:`RoutingConfig` defaults when None.
        evaluator: a shared evaluator for this model and task (made from ``protocol`` when None).
        out: a directory to store the result in.
        progress: called with the evaluations spent so far after each search round.

    >>> r = run_routing(load_model("zoo:base"), load_task("arith", n=50), "native", "mcts", budget=32)  # doctest: +SKIP
    >>> r.summary()["O_K"], r.summary()["recovery_majority"]  # doctest: +SKIP
    """
    config = config or RoutingConfig()
    if budget is not None:
        config = dataclasses.replace(config, budget=budget)
    n_layers = len(model.blocks)
    space = make_space(space, n_layers) if isinstance(space, str) else space
    evaluator = _evaluator(model, task, protocol, config, evaluator)
    protocol = evaluator.protocol
    options = {"config": config.to_dict(), "strategy": strategy, "space": space.spec(), "evaluation": evaluator.spec()}
    record = RunRecord.new("routing", protocol, identity_of(model), task.data_identity, options,
                           exec={"max_batch_rows": evaluator.max_batch_rows, **model_exec(model)})
    if out is not None:  # refuse a directory of other files or another run now, not after the search
        target = RunDir(out)
        target.check_target()
        target.check_run(record)

    candidates = run_search(evaluator, space, strategy, config, progress=progress)
    qindex = {q.question_id: i for i, q in enumerate(task.questions)}
    if "self_verify" in config.selectors:
        items = [(evaluator.prompts[qindex[r.question_id]], r.text, None if pd.isna(r.answer) else r.answer)
                 for r in candidates.itertuples()]
        candidates["verify_logprob"] = verification_scores(model, items, config.verification)
    questions = question_table(candidates, _deployed(evaluator, task), config.selectors)
    result = RoutingResult(candidates, questions, record=record)
    if out is not None:
        path = result.save(out)
        return dataclasses.replace(result, record=RunDir(path).record(), location=path)
    return result


def _evaluator(model, task: Task, protocol: Protocol | None, config: RoutingConfig,
               evaluator: RouteEvaluator | None) -> RouteEvaluator:
    """The evaluator given (refused when it decodes another model, task, protocol or window), or a new one."""
    if evaluator is None:
        return RouteEvaluator(model, task, protocol, window=config.window)
    if evaluator.model is not model or evaluator.task is not task:
        raise ReachlensError("the evaluator was made for another model or task; pass one made for this pair")
    want = {"window": config.window}
    have = {"window": evaluator.window}
    if protocol is not None:
        want["protocol"] = bind_chat(protocol.resolved(task), getattr(model, "tokenizer", None)).to_dict()
        have["protocol"] = evaluator.protocol.to_dict()
    if want != have:
        diff = {k: (have[k], want[k]) for k in want if want[k] != have[k]}
        raise ReachlensError(f"the evaluator decodes with {diff} (evaluator's, asked for); pass the evaluator's "
                             "protocol and window, or make an evaluator for these")
    return evaluator


def _deployed(evaluator: RouteEvaluator, task: Task) -> pd.DataFrame:
    """The deployment (the identity route, greedy) of every question, graded."""
    deployment = evaluator.deployment(range(len(task)))
    return pd.DataFrame({
        "question_id": [q.question_id for q in task.questions],
        "realized": [bool(e.correct and e.scored) for e in deployment],
        "deployed_answer": [e.answer for e in deployment],
        "deployed_scored": [bool(e.scored) for e in deployment],
    })
