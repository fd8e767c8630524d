"""The decoding probes: K temperature samples (``sampling``) and K layer routes (``routes``).

Neither is a new decoder; each is a unit of its run (:class:`~reachlens.probes.decode.Decoder`: its own
``slices``, ``decode`` and ``expected``). ``sampling`` is the audit's probe: its candidates are an audit's samples
under the protocol it names (the deployment's protocol with ``k``, ``temperature`` and ``top_p``), decoded by the
audit's slice decoder over the audit's own slices, samples only (:func:`reachlens.runner.sample_slice`: the
deployment is the run's unit 0), so they are the samples of ``reachlens audit`` with the same settings (their
log-probabilities up to the float32 rounding of a batch without the deployment's row). ``routes`` is the routing study's probe: one candidate per route
evaluation of :func:`reachlens.routing.run_search` on a :class:`~reachlens.routing.RouteEvaluator` (the
identity route first, duplicates charged), equal to the candidates of ``reachlens route`` with the same
space, search, budget, objective and seed.

Both are decoding methods (``intervention = False``): the model computes as it was trained.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig
from reachlens.probes.bank import bank_rows
from reachlens.probes.spec import Probe, register_probe
from reachlens.protocol import Protocol
from reachlens.routing import OBJECTIVES, STRATEGIES, RouteEvaluator, RoutingConfig, make_space, run_search
from reachlens.routing.routes import RouteSpace
from reachlens.runner.decode import batch_slices, sample_slice
from reachlens.tasks.base import Task

__all__ = ["Routes", "Sampling"]


@register_probe
@dataclass(frozen=True, kw_only=True)
class Sampling(Probe):
    """K samples at temperature T and top-p: the audit's probe (``sampling:k=6:temperature=0.7``)."""

    family = "sampling"
    intervention = False
    example = "sampling:k=6:temperature=0.7"

    k: int = field(default=6, metadata={"help": "samples per question (the budget K)"})
    temperature: float = field(default=0.8, metadata={"help": "sampling temperature (> 0)"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus mass, in (0, 1]"})
    seed: int | None = field(default=None, metadata={"help": "seed of the sample stream (none: the run's)"})

    def validate(self) -> None:
        if not self.temperature > 0:
            raise ReachlensError(f"sampling temperature={self.temperature!r} must be > 0 (the deployment is the greedy "
                                 "candidate, always in the bank)")
        if not 0 < self.top_p <= 1:
            raise ReachlensError(f"sampling top_p={self.top_p!r} must lie in (0, 1]")

    @property
    def budget(self) -> int:
        return self.k

    def protocol(self, base: Protocol) -> Protocol:
        """The audit protocol whose samples are this probe's candidates: ``base`` with its k, T, top-p, seed."""
        return dataclasses.replace(base, k=self.k, temperature=self.temperature, top_p=self.top_p,
                                   seed=self.run_seed(base))

    def expected(self) -> dict[str, int]:
        return {self.label: self.k}

    def slices(self, task: Task, protocol: Protocol, max_batch_rows: int) -> list[tuple[int, int]]:
        """The audit's own slices under :meth:`protocol`."""
        return batch_slices(task, self.protocol(protocol), max_batch_rows)

    def decode(self, model, task: Task, protocol: Protocol, start: int, stop: int,
               exec_config: ExecConfig) -> list[dict[str, Any]]:
        """The samples of the audit's slice under :meth:`protocol` (its deployment is not decoded)."""
        samples = sample_slice(model, task, self.protocol(protocol), start, stop, exec_config)
        return bank_rows(samples, self.label, self.label, False)


@register_probe
@dataclass(frozen=True, kw_only=True)
class Routes(Probe):
    """K layer routes found by a search (``routes:space=skip:search=random:budget=8``): routing's probe."""

    family = "routes"
    intervention = False
    example = "routes:space=skip:search=random:budget=8"

    space: str = field(default="skip", metadata={"help": "route space: skip, native or reorder"})
    search: str = field(default="random", metadata={"help": "strategy: random, hill_climb, genetic or mcts"})
    budget: int = field(default=8, metadata={"help": "route evaluations per question (the identity route first)"})
    objective: str = field(default="confidence", metadata={"help": "answer-blind objective: confidence or lowest_window"})
    max_skip: int | None = field(default=None, metadata={"help": "skip/native: most layers left out"})
    max_repeat: int | None = field(default=None, metadata={"help": "native: most layers run twice"})
    seed: int | None = field(default=None, metadata={"help": "seed of the search (none: the run's)"})

    def validate(self) -> None:
        if self.search not in STRATEGIES:
            raise ReachlensError(f"routes search={self.search!r} is not a strategy; known: {', '.join(STRATEGIES.names())}")
        if self.objective == "oracle" or self.objective not in OBJECTIVES:
            raise ReachlensError(f"routes objective={self.objective!r} is not an answer-blind objective; use "
                                 "confidence or lowest_window")
        RoutingConfig(budget=self.budget)  # refuses a budget < 1 in its own words

    def config(self, protocol: Protocol) -> RoutingConfig:
        """The routing options of this probe's search."""
        return RoutingConfig(budget=self.budget, objective=self.objective, seed=self.run_seed(protocol))

    def route_space(self, n_layers: int) -> RouteSpace:
        return make_space(self.space, n_layers, max_skip=self.max_skip, max_repeat=self.max_repeat)

    def expected(self) -> dict[str, int]:
        return {self.label: self.budget}

    def slices(self, task: Task, protocol: Protocol, max_batch_rows: int) -> list[tuple[int, int]]:
        """One slice of every question: the search runs them in lockstep."""
        return [(0, len(task))]

    def decode(self, model, task: Task, protocol: Protocol, start: int, stop: int,
               exec_config: ExecConfig) -> list[dict[str, Any]]:
        """One candidate per route evaluation of routing's search (:func:`~reachlens.routing.run_search`)."""
        config = self.config(protocol)
        evaluator = RouteEvaluator(model, task, protocol, window=config.window,
                                   max_batch_rows=exec_config.max_batch_rows)
        cands = run_search(evaluator, self.route_space(len(model.blocks)), self.search, config)
        return bank_rows(cands, self.label, self.label, False, lambda c: f"route={c['route']}")

    def check(self, model, protocol: Protocol) -> None:
        self.route_space(len(model.blocks))
