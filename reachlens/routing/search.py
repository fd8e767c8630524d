"""The route-search driver: any strategy, one budget, one record per evaluation.

**Budget.** K route evaluations per question (one evaluation = one route decoded greedily on the
question, see :mod:`reachlens.routing.evaluation`), counted the same way for every strategy: the
driver asks the strategy for at most the remaining budget, charges every proposed route, duplicates
included, and stops at exactly K. With ``seed_identity`` (the default) the first evaluation of every
strategy is the identity route, so every pool contains the deployed model's own answer and the
strategies differ only in the other K - 1 routes.

**Objective.** What a strategy maximizes is answer-blind unless the oracle mode is chosen
explicitly (``oracle=True``). The answer-blind objectives lie in [0, 1]:

* ``confidence``: ``exp(mean token log-prob)`` of the route's completion (the geometric-mean token
  probability);
* ``lowest_window``: ``exp`` of the DeepConf-style lowest sliding-window mean;

and a completion with no extractable answer scores 0. The oracle objective is 1 for a correct
answer and 0 otherwise; it reads the gold answer and exists to measure what a search *could* find.

**Lockstep.** All questions are searched together, round by round: the driver collects every
question's next proposals and evaluates them in one batch (one engine call, each row along its own
route), so adaptive strategies are batched as well as random search.

Every candidate keeps its route, raw text, answer, grade and scores (:data:`~reachlens.records.ROUTE_CANDIDATE_COLUMNS`).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from reachlens._registry import Registry
from reachlens.errors import ReachlensError
from reachlens.records import ROUTE_CANDIDATE_COLUMNS, candidate_frame
from reachlens.routing.evaluation import Evaluation, RouteEvaluator
from reachlens.routing.routes import Route, RouteSpace, format_route
from reachlens.routing.scoring import DEFAULT_SELECTORS
from reachlens.routing.strategies import make_strategy

__all__ = ["RoutingConfig", "OBJECTIVES", "run_search", "objective_value"]


OBJECTIVES: Registry[Callable[[Evaluation], float]] = Registry("search objective")


def _exp_or_zero(ev: Evaluation, value: float) -> float:
    return math.exp(value) if ev.answer is not None and not math.isnan(value) else 0.0


OBJECTIVES.register("confidence", lambda ev: _exp_or_zero(ev, ev.mean_logprob))
OBJECTIVES.register("lowest_window", lambda ev: _exp_or_zero(ev, ev.lowest_window_logprob))
OBJECTIVES.register("oracle", lambda ev: 1.0 if ev.correct else 0.0)


def objective_value(ev: Evaluation, name: str) -> float:
    """The objective ``name`` of one evaluation.

    >>> ev = Evaluation((0,), " 1+1=2 #### 2", "2", True, True, "stop", 9, math.log(0.5), math.log(0.25))
    >>> objective_value(ev, "confidence"), objective_value(ev, "oracle")
    (0.5, 1.0)
    """
    return float(OBJECTIVES[name](ev))


@dataclass(frozen=True)
class RoutingConfig:
    """A routing run's own options, beside the greedy :class:`~reachlens.protocol.Protocol` each
    route decodes by: the search (budget, objective, seed) and the scoring of its pools."""

    budget: int = 32
    """K: route evaluations per question, duplicates included (the identity route is the first)."""
    objective: str = "confidence"
    """Answer-blind objective the strategy maximizes (``confidence`` or ``lowest_window``)."""
    oracle: bool = False
    """Maximize correctness instead (reads the gold answer): the explicit oracle mode."""
    seed: int = 0
    """Seed of the strategies' random streams (one stream per question)."""
    seed_identity: bool = True
    """Evaluate the identity route first (it counts against the budget)."""
    verification: str = "rescore"
    """Named verification prompt of the ``self_verify`` selector (``rescore``, ``yes_no``)."""
    window: int = 8
    """Tokens per window of the lowest-window confidence."""
    selectors: tuple[str, ...] = DEFAULT_SELECTORS
    """Selectors scored on each pool."""
    strategy_options: Mapping[str, Any] = field(default_factory=dict)
    """Keyword options of the strategy (``batch``, ``population``, ``c``, ...)."""

    def __post_init__(self) -> None:
        if isinstance(self.selectors, list):
            object.__setattr__(self, "selectors", tuple(self.selectors))
        if not isinstance(self.budget, int) or isinstance(self.budget, bool) or self.budget < 1:
            raise ReachlensError(f"budget={self.budget!r} must be an integer >= 1 (route evaluations per question)")
        if self.objective == "oracle" and not self.oracle:
            raise ReachlensError("objective 'oracle' reads the gold answer; choose it explicitly with oracle=True")
        if self.objective != "oracle":
            OBJECTIVES[self.objective]  # noqa: B018 (raises LookupError naming the known objectives)
        if not isinstance(self.window, int) or self.window < 1:
            raise ReachlensError(f"window={self.window!r} must be an integer >= 1")

    @property
    def objective_name(self) -> str:
        """The objective actually maximized (``oracle`` in oracle mode)."""
        return "oracle" if self.oracle else self.objective

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["selectors"] = list(self.selectors)
        d["strategy_options"] = dict(self.strategy_options)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RoutingConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ReachlensError(f"unknown routing options {sorted(unknown)}; known: {sorted(known)}")
        d = dict(d)
        if "selectors" in d:
            d["selectors"] = tuple(d["selectors"])
        return cls(**d)


def _rng(config: RoutingConfig, strategy: str, space: RouteSpace, question_id: str) -> random.Random:
    # string seeds are hashed with SHA-512 by CPython: stable across processes and machines
    return random.Random(f"route-search/{config.seed}/{strategy}/{space}/{question_id}")


def run_search(
    evaluator: RouteEvaluator,
    space: RouteSpace,
    strategy: str,
    config: RoutingConfig,
    *,
    questions: Sequence[int] | None = None,
    options: Mapping[str, Any] | None = None,
    progress: Callable[[int], None] | None = None,
) -> pd.DataFrame:
    """Search routes for every question; return one row per evaluation (:data:`~reachlens.records.ROUTE_CANDIDATE_COLUMNS`).

    Args:
        evaluator: evaluates (question, route) pairs on one model and task.
        space: the route space searched (its depth must match the model's).
        strategy: a registered strategy name (``random``, ``hill_climb``, ``genetic``, ``mcts``).
        config: budget, objective, seed (:class:`RoutingConfig`).
        questions: indices into the evaluator's task (all when None).
        options: keyword options of the strategy (``batch=8``, ``population=12``, ...); the config's
            ``strategy_options`` when None.
        progress: called with the evaluations spent so far, summed over questions, after each round.

    >>> cands = run_search(RouteEvaluator(model, task), NativeSpace(6), "mcts", RoutingConfig(32))  # doctest: +SKIP
    """
    if space.n_layers != evaluator.n_layers:
        raise ReachlensError(f"the space is built for {space.n_layers} layers but the model has {evaluator.n_layers}")
    idx = list(range(len(evaluator.prompts))) if questions is None else list(questions)
    objective = config.objective_name
    opts = dict(config.strategy_options if options is None else options)
    strategies = {
        qi: make_strategy(strategy, space, _rng(config, strategy, space, evaluator.question_id(qi)), **opts)
        for qi in idx
    }
    pools: dict[int, list[tuple[Evaluation, float, bool]]] = {qi: [] for qi in idx}
    seen: dict[int, set[Route]] = {qi: set() for qi in idx}

    def charge(proposals: dict[int, list[Route]]) -> None:
        pairs = [(qi, r) for qi, routes in proposals.items() for r in routes]
        evals = iter(evaluator.evaluate(pairs))
        for qi, routes in proposals.items():
            scores = []
            for r in routes:
                ev = next(evals)
                s = objective_value(ev, objective)
                pools[qi].append((ev, s, r in seen[qi]))
                seen[qi].add(r)
                scores.append(s)
            strategies[qi].observe(routes, scores)

    if config.seed_identity:
        charge({qi: [space.identity] for qi in idx})
    while True:
        proposals = _proposals(strategies, {qi: config.budget - len(pools[qi]) for qi in idx}, space, strategy)
        if not proposals:
            break
        charge(proposals)
        if progress is not None:
            progress(sum(len(p) for p in pools.values()))
    return _candidates(evaluator, pools)


def _proposals(strategies: Mapping[int, Any], left: Mapping[int, int], space: RouteSpace,
               strategy: str) -> dict[int, list[Route]]:
    """The next round: each question's strategy proposes routes within what is ``left`` of its budget."""
    proposals: dict[int, list[Route]] = {}
    for qi, n in left.items():
        if n <= 0:
            continue
        routes = strategies[qi].propose(n)
        if not 1 <= len(routes) <= n:
            raise RuntimeError(f"strategy {strategy!r} proposed {len(routes)} routes with {n} left of the "
                               f"budget; a strategy must propose between 1 and {n}")
        proposals[qi] = [space.validate(r) for r in routes]
    return proposals


def _candidates(evaluator: RouteEvaluator, pools: Mapping[int, list[tuple[Evaluation, float, bool]]]) -> pd.DataFrame:
    """One row per evaluation of each question's pool, in the order they were charged."""
    rows = []
    for qi, pool in pools.items():
        qid = evaluator.question_id(qi)
        for j, (ev, s, dup) in enumerate(pool):
            rows.append({
                "question_id": qid, "candidate_idx": j, "text": ev.text, "answer": ev.answer, "correct": ev.correct,
                "scored": ev.scored, "finish_reason": ev.finish_reason, "n_tokens": ev.n_tokens,
                "mean_logprob": ev.mean_logprob, "route": format_route(ev.route), "route_len": len(ev.route),
                "duplicate": dup, "lowest_window_logprob": ev.lowest_window_logprob, "objective": s,
            })
    return candidate_frame(rows, ROUTE_CANDIDATE_COLUMNS)
