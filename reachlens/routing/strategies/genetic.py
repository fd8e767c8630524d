"""A genetic search: elitist (mu + lambda) evolution of routes by crossover and mutation.

The first generation is the driver's identity route plus random routes up to ``population``. Each
later generation proposes ``population`` children: two parents picked by tournaments of size
``tournament``, one-point crossover of their decision sequences
(:meth:`RouteSpace.crossover <reachlens.routing.routes.RouteSpace.crossover>`) with probability
``crossover_rate``, then a one-decision mutation with probability ``mutation_rate``. A child that was
already evaluated is mutated again (up to ``retries`` times) so the budget goes to new routes while
they exist. The next population is the best ``population`` distinct routes seen so far.
"""

from __future__ import annotations

import random

from reachlens.errors import ReachlensError
from reachlens.routing.routes import Route, RouteSpace
from reachlens.routing.strategies.base import Strategy, register_strategy

__all__ = ["Genetic"]


@register_strategy("genetic")
class Genetic(Strategy):
    """Elitist genetic search over routes.

    Args:
        population: routes kept per generation and children proposed per generation.
        tournament: entrants per parent tournament.
        crossover_rate: probability that a child is a crossover (else a copy of the first parent).
        mutation_rate: probability that a child is mutated.
        retries: extra mutations tried to turn an already evaluated child into a new route.
    """

    def __init__(
        self, space: RouteSpace, rng: random.Random, *, population: int = 8, tournament: int = 2,
        crossover_rate: float = 0.9, mutation_rate: float = 0.5, retries: int = 8,
    ) -> None:
        super().__init__(space, rng)
        if population < 2:
            raise ReachlensError(f"population={population!r} must be >= 2")
        self.population = population
        self.tournament = tournament
        self.crossover_rate = crossover_rate
        self.mutation_rate = mutation_rate
        self.retries = retries
        self.scores: dict[Route, float] = {}
        self.pop: list[Route] = []
        self._queue: list[Route] = []
        self._started = False

    def _pick(self) -> Route:
        entrants = [self.rng.choice(self.pop) for _ in range(self.tournament)]
        return max(entrants, key=lambda r: self.scores[r])

    def _child(self) -> Route:
        a = self._pick()
        child = self.space.crossover(a, self._pick(), self.rng) if self.rng.random() < self.crossover_rate else a
        if self.rng.random() < self.mutation_rate:
            child = self.space.mutate(child, self.rng)
        for _ in range(self.retries):
            if child not in self.scores:
                break
            child = self.space.mutate(child, self.rng)
        return child

    def propose(self, n: int) -> list[Route]:
        if not self._queue and not self._started:
            # the first generation: what the driver evaluated (the identity route), then random routes
            self._started = True
            self._queue = [self.space.sample(self.rng) for _ in range(self.population - len(self.scores))]
        if not self._queue:
            self._queue = [self._child() for _ in range(self.population)]
        take, self._queue = self._queue[:n], self._queue[n:]
        return take

    def observe(self, routes, scores) -> None:
        for r, s in zip(routes, scores):
            self.scores[r] = max(s, self.scores.get(r, float("-inf")))
        self.pop = sorted(self.scores, key=lambda r: -self.scores[r])[: self.population]
