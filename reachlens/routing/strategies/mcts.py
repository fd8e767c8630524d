"""Monte Carlo tree search over the decisions that build a route (the PoLar/CoLa search).

A route is built one decision per layer position (skip / run / repeat for the ``skip`` and ``native``
spaces, which layer comes next for ``reorder``; see :mod:`reachlens.routing.routes`). Each tree node
is a decision prefix. One iteration selects down the tree by UCB1 (``mean + c * sqrt(ln N / n)``),
expands one untried action, completes the route (the rollout) and backs the route's objective up
the path. Rewards are objective values in ``[0, 1]``.

The rollout policy (``rollout``): ``"identity"`` (default) completes a prefix with the actions that
keep the route closest to the model's own (run each remaining layer once), so every evaluation is
the tree's edits and nothing else, as in the layer-path searches that start from the original model;
``"random"`` completes with uniformly random legal actions, which in the skip/repeat spaces piles
edits onto most routes (about two of every three positions) and lands far from the identity, where
the zoo's useful routes are not.

Up to ``batch`` iterations are proposed per round so that the driver can batch their evaluation; the
visit counts of a proposed path are raised at once and its reward added when it is observed (a
"virtual loss" that steers the round's other iterations elsewhere). A route the driver evaluated by
itself (the identity route) is backed up along its own decision path.
"""

from __future__ import annotations

import math
import random

from reachlens.errors import ReachlensError
from reachlens.routing.routes import Route, RouteSpace
from reachlens.routing.strategies.base import Strategy, register_strategy

__all__ = ["MCTS"]


class _Node:
    __slots__ = ("visits", "total", "children", "untried", "exhausted")

    def __init__(self, untried: list[int]) -> None:
        self.visits = 0
        self.total = 0.0
        self.children: dict[int, _Node] = {}
        self.untried = untried
        self.exhausted = False


@register_strategy("mcts")
class MCTS(Strategy):
    """UCT over route decisions.

    Args:
        c: exploration constant of UCB1 (rewards lie in [0, 1]).
        batch: iterations proposed per round.
        rollout: ``"identity"`` or ``"random"`` (see the module docstring).
    """

    ROLLOUTS = ("identity", "random")

    def __init__(self, space: RouteSpace, rng: random.Random, *, c: float = 0.5, batch: int = 4,
                 rollout: str = "identity") -> None:
        super().__init__(space, rng)
        if batch < 1:
            raise ReachlensError(f"batch={batch!r} must be >= 1")
        if c < 0:
            raise ReachlensError(f"c={c!r} must be >= 0")
        if rollout not in self.ROLLOUTS:
            raise ReachlensError(f"rollout={rollout!r}; known: {', '.join(self.ROLLOUTS)}")
        self.rollout = rollout
        self.c = c
        self.batch = batch
        self.root = _Node(list(space.actions(())))
        self._pending: list[tuple[Route, list[_Node]]] = []
        self._seen: set[Route] = set()

    _MAX_RETRIES = 32

    def _ucb(self, parent: _Node, child: _Node) -> float:
        if child.visits == 0:  # a leaf found already tried by a rollout, never selected itself
            return math.inf
        return child.total / child.visits + self.c * math.sqrt(math.log(parent.visits) / child.visits)

    def _child(self, node: _Node, decisions: tuple[int, ...], action: int) -> _Node:
        child = node.children.get(action)
        if child is None:
            child = _Node(list(self.space.actions(decisions + (action,))))
            node.children[action] = child
            if action in node.untried:
                node.untried.remove(action)
        return child

    def _descend(self) -> tuple[tuple[int, ...], list[_Node]]:
        """Select by UCB1 (skipping exhausted children) and expand one untried action."""
        node, d, path = self.root, (), [self.root]
        fresh_only = not self.root.exhausted  # once everything was tried, re-propose by UCB1
        while True:
            if node.untried:
                a = node.untried[self.rng.randrange(len(node.untried))]
                node = self._child(node, d, a)
                return d + (a,), path + [node]
            if not node.children:  # a complete route
                return d, path
            parent = node
            options = [kv for kv in parent.children.items() if not (fresh_only and kv[1].exhausted)]
            a, node = max(options, key=lambda kv: self._ucb(parent, kv[1]))
            d, path = d + (a,), path + [node]

    def _iteration(self) -> tuple[Route, list[_Node]]:
        for _ in range(self._MAX_RETRIES):
            d, path = self._descend()
            if not path[-1].untried and not path[-1].children:  # the tree reached a complete route
                self._mark_exhausted(path)
                route = self.space.decode(d)
                if route in self._seen and not self.root.exhausted:
                    continue  # an earlier rollout tried it: select again, elsewhere
                break
            # the rollout, avoiding routes already tried where it can: under the identity policy the
            # identity completion, else one more edit after the prefix; then random completions
            route = None
            if self.rollout == "identity":
                route = self.space.decode(self._identity_completion(d))
                for _ in range(self._MAX_RETRIES):
                    if route not in self._seen:
                        break
                    route = self.space.decode(self._one_edit_completion(d))
            for _ in range(self._MAX_RETRIES):
                if route is not None and route not in self._seen:
                    break
                route = self.space.decode(self.space.complete(d, self.rng))
            break
        for n in path:
            n.visits += 1
        self._seen.add(route)
        return route, path

    def _identity_completion(self, decisions: tuple[int, ...]) -> tuple[int, ...]:
        d = tuple(decisions)
        while acts := self.space.actions(d):
            d = d + (acts[0],)
        return d

    def _one_edit_completion(self, decisions: tuple[int, ...]) -> tuple[int, ...]:
        """The identity completion with one non-identity action at a random later position."""
        full = self._identity_completion(decisions)
        j = self.rng.randrange(len(decisions), len(full)) if len(full) > len(decisions) else len(full)
        acts = self.space.actions(full[:j])
        if len(acts) < 2:
            return full
        return self._identity_completion(full[:j] + (self.rng.choice(acts[1:]),))

    @staticmethod
    def _mark_exhausted(path: list[_Node]) -> None:
        """``path`` ends at a complete route: mark it, then every ancestor whose subtree is all tried."""
        path[-1].exhausted = True
        for node in reversed(path[:-1]):
            if node.untried or not all(c.exhausted for c in node.children.values()):
                break
            node.exhausted = True

    def propose(self, n: int) -> list[Route]:
        out = []
        for _ in range(min(self.batch, n)):
            route, path = self._iteration()
            self._pending.append((route, path))
            out.append(route)
        return out

    def _path_of(self, route: Route) -> list[_Node]:
        d = self.space.encode(route)
        node, path = self.root, [self.root]
        for i, a in enumerate(d):
            node = self._child(node, d[:i], a)
            path.append(node)
        for n in path:
            n.visits += 1
        self._mark_exhausted(path)
        self._seen.add(tuple(route))
        return path

    def observe(self, routes, scores) -> None:
        for r, s in zip(routes, scores):
            if self._pending and self._pending[0][0] == r:
                path = self._pending.pop(0)[1]
            else:
                path = self._path_of(r)
            for n in path:
                n.total += s
