"""The strategy interface of the route search, and the strategy registry.

A strategy searches one question's route space. The driver (:func:`reachlens.routing.search.run_search`)
owns the budget: it repeatedly asks ``propose(n)`` for at most ``n`` routes (``n`` is what is left of
the budget), evaluates them, and reports each route's objective back through ``observe``. A strategy
sees objective values only, never answers or grades, so an answer-blind objective keeps the whole
search answer-blind.

Strategies are *anytime*: the first ``k`` routes a strategy proposes do not depend on the total
budget (``n`` only truncates a round), so the first ``k`` evaluations of a budget-K run are exactly a
budget-k run. The reach-vs-K curve is read off one run.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from reachlens._registry import Registry
from reachlens.errors import ReachlensError
from reachlens.routing.routes import Route, RouteSpace

__all__ = ["Strategy", "STRATEGIES", "register_strategy", "make_strategy"]


class Strategy(ABC):
    """Proposes routes for one question and learns from their objective values.

    Args:
        space: the route space searched.
        rng: the strategy's own random stream (one per question, seeded by the driver).
    """

    name: ClassVar[str]

    def __init__(self, space: RouteSpace, rng: random.Random) -> None:
        self.space = space
        self.rng = rng

    @abstractmethod
    def propose(self, n: int) -> list[Route]:
        """Between 1 and ``n`` routes to evaluate next."""

    def observe(self, routes: Sequence[Route], scores: Sequence[float]) -> None:  # noqa: B027 (optional hook)
        """The objective of each evaluated route (also called for routes the driver evaluated itself,
        such as the identity route it evaluates first)."""


STRATEGIES: Registry[Callable[..., Strategy]] = Registry("search strategy")


def register_strategy(name: str) -> Callable[[type[Strategy]], type[Strategy]]:
    """Class decorator: register a strategy under ``name`` (also set as its ``name``)."""

    def wrap(cls: type[Strategy]) -> type[Strategy]:
        cls.name = name
        STRATEGIES.register(name, cls)
        return cls

    return wrap


def make_strategy(name: str, space: RouteSpace, rng: random.Random, **options: Any) -> Strategy:
    """The strategy ``name`` over ``space``; ``options`` are its keyword arguments."""
    cls = STRATEGIES[name]
    try:
        return cls(space, rng, **options)
    except TypeError as err:
        raise ReachlensError(f"bad options {options!r} for search strategy {name!r}: {err}") from None
