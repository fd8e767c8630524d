"""Hill climbing over one-decision neighbours, with random restarts at local optima.

The climb starts at the identity route (the driver's first evaluation) or, without it, at a random
route. Each round evaluates up to ``batch`` untried neighbours of the current route (in a random
order fixed when the route became current) and moves to the best of them if it beats the current
objective (first improvement per round). When every neighbour has been tried without improvement,
the climb restarts from a random route it has not evaluated yet. Routes already evaluated are not
proposed again while untried ones remain, so duplicates appear only once the space is exhausted.
"""

from __future__ import annotations

import random

from reachlens.errors import ReachlensError
from reachlens.routing.routes import Route, RouteSpace
from reachlens.routing.strategies.base import Strategy, register_strategy

__all__ = ["HillClimb"]


@register_strategy("hill_climb")
class HillClimb(Strategy):
    """Best-of-batch hill climbing with random restarts.

    Args:
        batch: neighbours evaluated per round.
        restart_tries: random draws tried when looking for an unevaluated restart route.
    """

    def __init__(self, space: RouteSpace, rng: random.Random, *, batch: int = 4, restart_tries: int = 64) -> None:
        super().__init__(space, rng)
        if batch < 1:
            raise ReachlensError(f"batch={batch!r} must be >= 1")
        self.batch = batch
        self.restart_tries = restart_tries
        self.scores: dict[Route, float] = {}
        self.current: Route | None = None
        self.pending: list[Route] = []
        self._restart = False

    def _move_to(self, route: Route) -> None:
        self.current = route
        self.pending = self.space.neighbours(route)
        self.rng.shuffle(self.pending)

    def _fresh_route(self) -> Route:
        r = self.space.sample(self.rng)
        for _ in range(self.restart_tries):
            if r not in self.scores:
                break
            r = self.space.sample(self.rng)
        return r

    def propose(self, n: int) -> list[Route]:
        if self.current is None:
            self._restart = True
            return [self._fresh_route()]
        self.pending = [r for r in self.pending if r not in self.scores]
        if not self.pending:
            self._restart = True
            return [self._fresh_route()]
        take, self.pending = self.pending[: min(self.batch, n)], self.pending[min(self.batch, n) :]
        return take

    def observe(self, routes, scores) -> None:
        for r, s in zip(routes, scores):
            self.scores[r] = max(s, self.scores.get(r, float("-inf")))
        best = max(range(len(routes)), key=lambda i: (scores[i], -i))  # the first of the best
        if self._restart or self.current is None:
            self._restart = False
            self._move_to(routes[best])
        elif scores[best] > self.scores[self.current]:
            self._move_to(routes[best])
