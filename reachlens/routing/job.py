"""The routing search as a job of the runner: :class:`RoutingJob` (what :func:`~reachlens.routing.run_routing` runs),
and its workers' :class:`RoutingShard`.

A search is a list of fixed slices of the task's questions, ``max_batch_rows // K`` questions each
(:func:`~reachlens.runner.question_slices`: a slice's lockstep rounds hold at most one proposal per remaining
budget unit of each question). Each question's search depends only on its own random stream (seeded by the search
seed, the strategy, the space and the question) and its own evaluations, so a slice searched alone finds the routes
the whole task searched at once finds. A worker searches a slice into its candidates (one row per route evaluation)
and the deployment of its questions (the identity route); the driver appends them as a part of the run directory
(:class:`~reachlens.store.PartsDir`), so a killed search resumes from its finished slices, on any executor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig
from reachlens.models import ModelSource
from reachlens.protocol import Protocol
from reachlens.routing.evaluation import RouteEvaluator
from reachlens.routing.routes import RouteSpace, make_space
from reachlens.routing.scoring import question_table
from reachlens.routing.search import RoutingConfig, run_search
from reachlens.routing.study import RoutingResult
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
from reachlens.selectors import verification_scores
from reachlens.store import RunRecord
from reachlens.tasks.base import Task
from reachlens.tasks.chat import bind_chat

__all__ = ["DEPLOYED_COLUMNS", "RoutingJob", "RoutingShard", "n_layers_of", "run_routing"]

DEPLOYED_COLUMNS = ["question_id", "realized", "deployed_answer", "deployed_scored"]
"""The deployment of each question of a slice (the identity route, greedy), graded."""


@dataclass(frozen=True)
class RoutingShard(ModelShard):
    """What a worker needs to search any slice of one routing run (sent once per run): the model, task and greedy
    protocol (:class:`~reachlens.runner.shard.ModelShard`), and these."""

    space: RouteSpace
    strategy: str
    config: RoutingConfig
    exec_config: ExecConfig = field(default_factory=ExecConfig)
    evaluator: RouteEvaluator | None = field(default=None, repr=False, compare=False)
    """An evaluator of this process shared with other cells (in process only): pairs it decoded are reused."""

    def check_model(self, model: Any) -> None:
        if self.space.n_layers != len(model.blocks):
            raise ReachlensError(f"the space is built for {self.space.n_layers} layers but the model has "
                                 f"{len(model.blocks)}")

    def decode(self, model: Any, part: Slice) -> dict[str, pd.DataFrame]:
        _, start, stop = part
        evaluator = self.evaluator if self.evaluator is not None else RouteEvaluator(
            model, self.task, self.protocol, window=self.config.window, max_batch_rows=self.exec_config.max_batch_rows)
        indices = range(start, stop)
        candidates = run_search(evaluator, self.space, self.strategy, self.config, questions=indices)
        if "self_verify" in self.config.selectors:
            at = {evaluator.question_id(i): i for i in indices}
            items = [(evaluator.prompts[at[r.question_id]], r.text, None if pd.isna(r.answer) else r.answer)
                     for r in candidates.itertuples()]
            candidates["verify_logprob"] = verification_scores(model, items, self.config.verification)
        deployment = evaluator.deployment(indices)
        deployed = pd.DataFrame({
            "question_id": [evaluator.question_id(i) for i in indices],
            "realized": [bool(e.correct and e.scored) for e in deployment],
            "deployed_answer": [e.answer for e in deployment],
            "deployed_scored": [bool(e.scored) for e in deployment]}, columns=DEPLOYED_COLUMNS)
        return {"deployed": deployed, "candidates": candidates}  # candidates last: they mark the part whole


@dataclass(frozen=True)
class RoutingJob(TablesJob):
    """One routing cell for the runner (:class:`~reachlens.runner.Job`): a search of ``strategy`` in ``space`` at the
    budget ``config.budget`` on every question of ``task``, each route decoded by the greedy ``protocol``."""

    model: Any
    """A spec (loaded as :attr:`exec_config` says), a :class:`~reachlens.models.ModelSource` or a loaded model."""
    task: Task
    space: RouteSpace
    strategy: str
    config: RoutingConfig
    protocol: Protocol
    out: str | Path | None = None
    exec_config: ExecConfig = field(default_factory=ExecConfig)
    evaluator: RouteEvaluator | None = field(default=None, repr=False, compare=False)

    part_tables = ("deployed", "candidates")
    redo = "re-run the same route command into this directory to search its slice again"

    def check(self) -> None:
        if not self.protocol.is_greedy:
            p = self.protocol
            raise ReachlensError(f"a route is decoded greedily; pass a greedy protocol (Protocol.greedy(...)), "
                                 f"not k={p.k}, temperature={p.temperature}")
        if len(self.task) == 0:
            raise ReachlensError(f"task {self.task.name!r} has no questions")

    def resolve(self, in_process: bool) -> tuple[RoutingShard, RunRecord]:
        r = resolve_model(self.model, self.task, self.protocol, self.exec_config, in_process)
        protocol = self.evaluator.protocol if self.evaluator is not None else r.protocol
        evaluation = {"task_source": self.task.source, "n_questions": len(self.task), "window": self.config.window}
        options = {"config": self.config.to_dict(), "strategy": self.strategy, "space": self.space.spec(),
                   "evaluation": evaluation}
        shard = RoutingShard(self.space, self.strategy, self.config, self.exec_config,
                             self.evaluator if in_process else None, source=r.source, task=self.task,
                             protocol=protocol, model_id=r.model_id, model=r.model)
        return shard, RunRecord.new("routing", protocol, r.model_id, self.task.data_identity, options, exec=r.exec)

    def plan(self, shard: RoutingShard) -> list[Slice]:
        return [(0, a, b) for a, b in question_slices(len(self.task), self.config.budget,
                                                      self.exec_config.max_batch_rows)]

    def compose(self, shard: RoutingShard, tables: dict[str, pd.DataFrame], record: RunRecord) -> RoutingResult:
        candidates = tables["candidates"]
        questions = question_table(candidates, tables["deployed"], self.config.selectors)
        return RoutingResult(candidates, questions, record=record)


def run_routing(
    model, task: Task, space: RouteSpace | str, strategy: str, budget: int | None = None, *,
    protocol: Protocol | None = None, config: RoutingConfig | None = None, evaluator: RouteEvaluator | None = None,
    out: str | Path | None = None, exec_config: ExecConfig | None = None,
    progress: Callable[[int, int], None] | None = None, executor: Executor | None = None,
) -> RoutingResult:
    """Search routes for every question of ``task`` and score the candidate pools (one :class:`RoutingJob`).

    Args:
        model: a TransformerBridge from :func:`reachlens.load_model` (hooks the caller attached stay live), or a
            spec (``"zoo:base"``, a :class:`~reachlens.models.ModelSource`), loaded as ``exec_config`` says.
        task: the questions (all of them are searched; use ``task.head(n)`` for fewer).
        space: a :class:`~reachlens.routing.routes.RouteSpace`, or a space name built with its defaults.
        strategy: ``random``, ``hill_climb``, ``genetic`` or ``mcts``.
        budget: K (overrides ``config.budget``).
        protocol: how every route decodes, the greedy case (:meth:`Protocol.deployment` of the task when None);
            the evaluator's when one is given.
        config: the search's own options; :class:`RoutingConfig` defaults when None.
        evaluator: an evaluator of this model and task shared with other cells, in this process (its pairs are
            decoded once however many cells ask for them).
        out: a run directory: slices are written as they finish, and a re-run resumes it.
        exec_config: batch rows (they fix the slices), device and dtype of a spec, and who decodes (``workers``,
            ``ray``); the evaluator's batch rows when one is given.
        progress: called with (questions searched, questions in all) after each slice.
        executor: who decodes; None: the one ``exec_config`` asks for.

    >>> r = run_routing(load_model("zoo:base"), load_task("arith", n=50), "native", "mcts", budget=32)  # doctest: +SKIP
    >>> r.summary()["O_K"], r.summary()["recovery_majority"]  # doctest: +SKIP
    """
    config = config or RoutingConfig()
    if budget is not None:
        config = dataclasses.replace(config, budget=budget)
    space = make_space(space, n_layers_of(model)) if isinstance(space, str) else space
    exec_config = exec_config or ExecConfig()
    if evaluator is not None:
        _check_evaluator(model, task, protocol, config, evaluator)
        protocol = evaluator.protocol
        exec_config = dataclasses.replace(exec_config, max_batch_rows=evaluator.max_batch_rows)
    job = RoutingJob(model, task, space, strategy, config, protocol or Protocol.deployment(task), out, exec_config,
                     evaluator)
    each = None if progress is None else (lambda i, done, total: progress(done, total))
    return run_jobs([job], executor, progress=each)[0]


def n_layers_of(model: Any) -> int:
    """The model's number of blocks: a loaded model's, or read from a spec's config (no weights load)."""
    if not isinstance(model, (str, ModelSource)):
        return len(model.blocks)
    return int(model_config(model).num_hidden_layers)


def _check_evaluator(model, task: Task, protocol: Protocol | None, config: RoutingConfig,
                     evaluator: RouteEvaluator) -> None:
    """Refuse an evaluator that decodes another model, task, protocol or window."""
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
