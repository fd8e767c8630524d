"""Random search: routes drawn independently from the space, with replacement (the control).

Each proposal is :meth:`RouteSpace.sample <reachlens.routing.routes.RouteSpace.sample>`; nothing is
learned from the objective. Duplicates are kept: they count against the budget, as they would for
any sampler that draws routes blindly.
"""

from __future__ import annotations

from reachlens.routing.routes import Route
from reachlens.routing.strategies.base import Strategy, register_strategy

__all__ = ["RandomSearch"]


@register_strategy("random")
class RandomSearch(Strategy):
    """Independent random routes.

    >>> import random
    >>> from reachlens.routing.routes import SkipSpace
    >>> s = RandomSearch(SkipSpace(4, max_skip=1), random.Random(0))
    >>> len(s.propose(3))
    3
    """

    def propose(self, n: int) -> list[Route]:
        return [self.space.sample(self.rng) for _ in range(n)]
