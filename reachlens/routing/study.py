"""The routing study: search routes for every question at a matched budget, then score the pool.

:func:`run_routing` runs one cell (a model, a task, a route space, a strategy at budget K): the
search (:func:`~reachlens.routing.search.run_search`), the verification scores of the candidates
(:mod:`reachlens.routing.verification`), the greedy deployment (the identity route), and the scoring
(:mod:`reachlens.routing.scoring`). The result holds three tables and is stored as a directory:

    DIR/config.json        the configuration, model identity, task, space and strategy
    DIR/candidates.parquet one row per route evaluation (route, raw text, answer, grade, scores)
    DIR/questions.parquet  one row per question (greedy, oracle, each selector)
    DIR/summary.json       G, O@K, each selector, gap recoveries, evaluations spent

Several cells over the same model and task can share one
:class:`~reachlens.routing.evaluation.RouteEvaluator`, so a (question, route) pair is decoded once
however many strategies and spaces ask for it (decoding is greedy, so the answer is the same).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.protocol import ProtocolMismatch
from reachlens.routing.evaluation import RouteEvaluator
from reachlens.routing.routes import RouteSpace, make_space
from reachlens.routing.scoring import DEFAULT_SELECTORS, cell_summary, question_table
from reachlens.routing.search import SearchConfig, run_search
from reachlens.routing.verification import verification_scores
from reachlens.store import write_json, write_parquet
from reachlens.studies.auditing import _identity
from reachlens.tasks.base import Task

__all__ = ["RoutingConfig", "RoutingResult", "run_routing"]


@dataclass(frozen=True)
class RoutingConfig:
    """Everything about one routing cell except the model, the task, the space and the strategy."""

    budget: int = 32
    """K: route evaluations per question (duplicates included; the identity route is the first)."""
    objective: str = "confidence"
    """Answer-blind objective of the search (``confidence``, ``lowest_window``)."""
    oracle: bool = False
    """Search for correctness instead (reads the gold answer; the explicit oracle mode)."""
    seed: int = 0
    """Seed of the search's random streams."""
    max_new_tokens: int = 96
    """Decode length of every candidate."""
    prompt_format: str | None = None
    """The task's prompt format (its default when None)."""
    verification: str = "rescore"
    """Named verification prompt of the ``self_verify`` selector (``rescore``, ``yes_no``)."""
    window: int = 8
    """Tokens per window of the lowest-window confidence."""
    seed_identity: bool = True
    """Evaluate the identity route first in every search."""
    selectors: tuple[str, ...] = DEFAULT_SELECTORS
    """Selectors scored on each pool."""
    strategy_options: Mapping[str, Any] = field(default_factory=dict)
    """Keyword options of the strategy (``batch``, ``population``, ``c``, ...)."""

    def search_config(self) -> SearchConfig:
        return SearchConfig(self.budget, self.objective, self.oracle, self.seed, self.seed_identity)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["selectors"] = list(self.selectors)
        d["strategy_options"] = dict(self.strategy_options)
        return d


@dataclass(frozen=True)
class RoutingResult:
    """One routing cell: its configuration and its candidate, question and summary tables."""

    header: dict[str, Any]
    """Configuration, model identity, task, space and strategy (``config.json``)."""
    candidates: pd.DataFrame = field(repr=False)
    questions: pd.DataFrame = field(repr=False)

    @property
    def selectors(self) -> tuple[str, ...]:
        return tuple(self.header["config"]["selectors"])

    def summary(self) -> dict[str, Any]:
        """G, O@K, selector accuracies, gap recoveries (NaN = undefined) and the evaluations spent."""
        s = cell_summary(self.questions, self.selectors).iloc[0].to_dict()
        s["n"] = int(s["n"])
        s["budget"] = self.header["config"]["budget"]
        s["evaluations"] = len(self.candidates)
        s["unique_routes"] = int(self.candidates.groupby("question_id")["route"].nunique().sum())
        s.update({k: self.header[k] for k in ("strategy", "space_name", "model_spec", "task")})
        return s

    def save(self, out: str | Path) -> Path:
        """Write the result to ``out``; a directory holding a different configuration is refused."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        cfg = out / "config.json"
        if cfg.is_file():
            old = json.loads(cfg.read_text())
            diff = {k: (old.get(k), self.header.get(k)) for k in set(old) | set(self.header)
                    if old.get(k) != self.header.get(k)}
            if diff:
                raise ProtocolMismatch(diff, what=f"{str(out)!r} holds a routing run with another configuration")
        write_json(cfg, self.header)
        write_parquet(out / "candidates.parquet", self.candidates)
        write_parquet(out / "questions.parquet", self.questions)
        summary = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in self.summary().items()}
        write_json(out / "summary.json", summary)
        return out

    @classmethod
    def load(cls, path: str | Path) -> RoutingResult:
        path = Path(path)
        header = json.loads((path / "config.json").read_text())
        return cls(header, pd.read_parquet(path / "candidates.parquet"), pd.read_parquet(path / "questions.parquet"))


def run_routing(
    model,
    task: Task,
    space: RouteSpace | str,
    strategy: str,
    budget: int | None = None,
    *,
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
        config: everything else; :class:`RoutingConfig` defaults when None.
        evaluator: a shared evaluator for this model and task (made from ``config`` when None).
        out: a directory to store the result in.
        progress: called with the evaluations spent so far after each search round.

    >>> r = run_routing(load_model("zoo:base"), load_task("arith", n=50), "native", "mcts", budget=32)  # doctest: +SKIP
    >>> r.summary()["oracle"], r.summary()["recovery_majority"]  # doctest: +SKIP
    """
    config = config or RoutingConfig()
    if budget is not None:
        config = dataclasses.replace(config, budget=budget)
    n_layers = len(model.blocks)
    space = make_space(space, n_layers) if isinstance(space, str) else space
    if evaluator is None:
        evaluator = RouteEvaluator(model, task, max_new_tokens=config.max_new_tokens,
                                   prompt_format=config.prompt_format, window=config.window)
    elif evaluator.model is not model or evaluator.task is not task:
        raise ReachlensError("the evaluator was made for another model or task; pass one made for this pair")
    else:
        want = {"max_new_tokens": config.max_new_tokens, "window": config.window,
                "prompt_format": task.format(config.prompt_format).name}
        have = {k: evaluator.spec()[k] for k in want}
        if want != have:
            raise ReachlensError(f"the evaluator decodes with {have} but the config asks for {want}")

    candidates = run_search(evaluator, space, strategy, config.search_config(),
                            options=config.strategy_options, progress=progress)
    qindex = {q.question_id: i for i, q in enumerate(task.questions)}
    if "self_verify" in config.selectors:
        items = [(evaluator.prompts[qindex[r.question_id]], r.text, None if pd.isna(r.answer) else r.answer)
                 for r in candidates.itertuples()]
        candidates["verify_logprob"] = verification_scores(model, items, config.verification)
    greedy_ev = evaluator.greedy(range(len(task)))
    greedy = pd.DataFrame({
        "question_id": [q.question_id for q in task.questions],
        "greedy_correct": [(1.0 if e.correct else 0.0) if e.scored else math.nan for e in greedy_ev],
        "greedy_answer": [e.answer for e in greedy_ev],
    })
    questions = question_table(candidates, greedy, config.selectors)
    ident = _identity(model)
    header = {
        "study": "routing", "strategy": strategy, "space_name": space.name, "space": space.spec(),
        "model": ident, "model_spec": ident.get("spec"), "task": task.name, "evaluation": evaluator.spec(),
        "config": config.to_dict(),
    }
    result = RoutingResult(header, candidates, questions)
    if out is not None:
        result.save(out)
    return result
