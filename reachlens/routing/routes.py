"""Routes and route spaces: which sequences of a model's layers a search may run.

One module (about 440 lines) because every route space shares the route's validation, its canonical form and
its spec.

A *route* is a tuple of layer indices, run in order between the embedding and the final norm;
``range(n_layers)`` is the model itself (the *identity* route). A *route space* is a set of routes
reachable from the identity by one kind of edit:

* ``skip`` (:class:`SkipSpace`): drop up to ``max_skip`` layers, order kept.
* ``native`` (:class:`NativeSpace`): skip up to ``max_skip`` layers and repeat up to ``max_repeat``
  layers, a repeated layer run twice in a row. This is the per-layer skip/execute/repeat space of
  Dr.LLM and of PoLar/CoLa's MCTS.
* ``reorder`` (:class:`ReorderSpace`): permutations of all layers in which no layer moves more than
  ``window - 1`` places; ``window=2`` is exactly "swap disjoint pairs of neighbouring layers".

Every space is also a sequence of decisions (one per layer position), which is what the searches
use: MCTS walks :meth:`RouteSpace.actions` down a tree, hill climbing takes
:meth:`RouteSpace.neighbours` (change one decision, repair the rest), the genetic search takes
:meth:`RouteSpace.crossover` and :meth:`RouteSpace.mutate`. :meth:`RouteSpace.validate` names the
bad index or the rule a route breaks.

Random routes (:meth:`RouteSpace.sample`) are stratified by edit count for ``skip`` and ``native``:
the number of skips ``s ~ U{0..max_skip}`` and repeats ``r ~ U{0..max_repeat}``, then which layers
uniformly (the family of the peer benchmark). Drawing uniformly over routes instead would put almost
all mass on routes with the most edits. ``reorder`` draws uniformly over its (small) set.
"""

from __future__ import annotations

import dataclasses
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from reachlens._registry import Registry
from reachlens.engine.stack import validate_route
from reachlens.errors import ReachlensError

__all__ = [
    "Route", "RouteSpace", "SkipSpace", "NativeSpace", "ReorderSpace", "SPACES", "make_space",
    "format_route", "parse_route", "identity_route", "space_from_spec",
]

Route = tuple[int, ...]
"""Layer indices in the order they run."""

SKIP, RUN, REPEAT = 0, 1, 2
"""Per-layer decisions of the skip and native spaces."""


def identity_route(n_layers: int) -> Route:
    """The model's own route, ``(0, 1, ..., n_layers - 1)``."""
    return tuple(range(n_layers))


def format_route(route: Sequence[int]) -> str:
    """``(0, 1, 1, 3)`` -> ``"0,1,1,3"`` (how routes are stored in tables).

    >>> format_route((0, 1, 1, 3))
    '0,1,1,3'
    """
    return ",".join(str(int(i)) for i in route)


def parse_route(text: str) -> Route:
    """``"0,1,1,3"`` -> ``(0, 1, 1, 3)``.

    >>> parse_route("0, 1,1,3")
    (0, 1, 1, 3)
    """
    try:
        return tuple(int(p) for p in text.split(","))
    except ValueError:
        raise ReachlensError(f"route {text!r} is not a comma-separated list of layer indices, e.g. '0,1,1,3'") from None


class RouteSpace(ABC):
    """A set of routes over an ``n_layers`` model, built as one decision per layer position."""

    name: ClassVar[str]
    n_layers: int

    # --- the decision view (what the searches walk) ----------------------------------------------
    @abstractmethod
    def actions(self, decisions: tuple[int, ...]) -> tuple[int, ...]:
        """Legal next decisions after ``decisions``; empty when they are complete. The first action is
        the one that keeps the route closest to the identity (used when a route is repaired)."""

    @abstractmethod
    def decode(self, decisions: tuple[int, ...]) -> Route:
        """The route a complete decision sequence stands for."""

    @abstractmethod
    def encode(self, route: Route) -> tuple[int, ...]:
        """The decisions of ``route``; raises ``ReachlensError`` naming the rule the route breaks."""

    @abstractmethod
    def sample(self, rng: random.Random) -> Route:
        """One random route of the space (see the module docstring for the distribution)."""

    def _state(self, decisions: tuple[int, ...]) -> Hashable:
        """What the legal completions of ``decisions`` depend on (memo key for :meth:`size`)."""
        return decisions

    @property
    def n_decisions(self) -> int:
        return self.n_layers

    @property
    def identity(self) -> Route:
        return identity_route(self.n_layers)

    # --- generic operations ------------------------------------------------------------------------
    def validate(self, route: Sequence) -> Route:
        """``route`` as a tuple if it lies in the space; otherwise ``ReachlensError`` naming the problem.

        >>> NativeSpace(4).validate([0, 1, 1, 3])
        (0, 1, 1, 3)
        """
        steps = validate_route(route, self.n_layers)
        self.encode(steps)
        return steps

    def contains(self, route: Sequence) -> bool:
        try:
            self.validate(route)
        except ReachlensError:
            return False
        return True

    def complete(self, decisions: tuple[int, ...], rng: random.Random) -> tuple[int, ...]:
        """Extend a prefix to a whole decision sequence with uniformly random legal actions."""
        d = tuple(decisions)
        while acts := self.actions(d):
            d = d + (rng.choice(acts),)
        return d

    def repair(self, decisions: tuple[int, ...], prefix_len: int) -> tuple[int, ...]:
        """Keep ``decisions[:prefix_len]``; keep each later decision where it is still legal, else take
        the first legal action."""
        d = tuple(decisions[:prefix_len])
        i = prefix_len
        while acts := self.actions(d):
            want = decisions[i] if i < len(decisions) else None
            d = d + ((want,) if want in acts else (acts[0],))
            i += 1
        return d

    def neighbours(self, route: Sequence[int]) -> list[Route]:
        """Routes one decision away from ``route`` (the rest repaired to stay legal), in a fixed order."""
        d = self.encode(self.validate(route))
        here = self.decode(d)
        seen: set[Route] = {here}
        out: list[Route] = []
        for i in range(len(d)):
            for a in self.actions(d[:i]):
                if a == d[i]:
                    continue
                r = self.decode(self.repair(d[:i] + (a,) + d[i + 1 :], i + 1))
                if r not in seen:
                    seen.add(r)
                    out.append(r)
        return out

    def mutate(self, route: Sequence[int], rng: random.Random) -> Route:
        """A random neighbour of ``route`` (``route`` itself when it has none)."""
        options = self.neighbours(route)
        return rng.choice(options) if options else tuple(route)

    def crossover(self, a: Sequence[int], b: Sequence[int], rng: random.Random) -> Route:
        """One-point crossover of the decision sequences: ``a``'s decisions before a random cut, then
        ``b``'s where they are legal (repaired otherwise)."""
        da, db = self.encode(self.validate(a)), self.encode(self.validate(b))
        cut = rng.randint(0, self.n_decisions)
        return self.decode(self.repair(da[:cut] + db[cut:], cut))

    def enumerate(self) -> Iterator[Route]:
        """Every route of the space, each once (depth-first in action order)."""
        stack: list[tuple[int, ...]] = [()]
        while stack:
            d = stack.pop()
            acts = self.actions(d)
            if not acts:
                yield self.decode(d)
                continue
            stack.extend(d + (a,) for a in reversed(acts))

    def size(self) -> int:
        """How many routes the space holds (counted, not enumerated)."""
        return self._count(())

    def _count(self, decisions: tuple[int, ...], memo: dict | None = None) -> int:
        memo = {} if memo is None else memo
        key = (len(decisions), self._state(decisions))
        if key in memo:
            return memo[key]
        acts = self.actions(decisions)
        n = 1 if not acts else sum(self._count(decisions + (a,), memo) for a in acts)
        memo[key] = n
        return n

    def sample_uniform(self, rng: random.Random) -> Route:
        """A route drawn uniformly over the whole space (actions weighted by their completions)."""
        memo: dict = {}
        d: tuple[int, ...] = ()
        while acts := self.actions(d):
            weights = [self._count(d + (a,), memo) for a in acts]
            d = d + (rng.choices(acts, weights=weights)[0],)
        return self.decode(d)

    def spec(self) -> dict[str, Any]:
        """The space's name and parameters (stored with every result)."""
        return {"space": self.name, **dataclasses.asdict(self)}  # type: ignore[call-overload]

    def __str__(self) -> str:
        params = ",".join(f"{k}={v}" for k, v in self.spec().items() if k not in ("space", "n_layers"))
        return f"{self.name}({params})"


def _check_params(n_layers: int, **limits: int) -> None:
    if not isinstance(n_layers, int) or n_layers < 1:
        raise ReachlensError(f"n_layers={n_layers!r} must be a positive integer")
    for name, v in limits.items():
        if not isinstance(v, int) or v < 0:
            raise ReachlensError(f"{name}={v!r} must be an integer >= 0")


def _layer_order_error(route: Route, name: str) -> ReachlensError | None:
    for step in range(1, len(route)):
        if route[step] < route[step - 1]:
            return ReachlensError(
                f"route {format_route(route)!r} is not in the {name} space: layer {route[step]} runs after "
                f"layer {route[step - 1]} at step {step}; the {name} space keeps the layers in order"
            )
    return None


@dataclass(frozen=True)
class SkipSpace(RouteSpace):
    """Drop up to ``max_skip`` layers; the rest run once, in order.

    >>> sorted(SkipSpace(3, max_skip=1).enumerate())
    [(0, 1), (0, 1, 2), (0, 2), (1, 2)]
    """

    name: ClassVar[str] = "skip"
    n_layers: int
    """Depth of the model."""
    max_skip: int = 2
    """Most layers a route may leave out."""

    def __post_init__(self) -> None:
        _check_params(self.n_layers, max_skip=self.max_skip)

    def actions(self, decisions: tuple[int, ...]) -> tuple[int, ...]:
        i = len(decisions)
        if i >= self.n_layers:
            return ()
        skips = decisions.count(SKIP)
        must_run = i == self.n_layers - 1 and skips == i  # never an empty route
        return (RUN,) if skips >= self.max_skip or must_run else (RUN, SKIP)

    def _state(self, decisions: tuple[int, ...]) -> Hashable:
        return (decisions.count(SKIP), RUN in decisions)

    def decode(self, decisions: tuple[int, ...]) -> Route:
        return tuple(i for i, a in enumerate(decisions) if a == RUN)

    def encode(self, route: Route) -> tuple[int, ...]:
        route = tuple(route)
        if err := _layer_order_error(route, self.name):
            raise err
        if len(set(route)) != len(route):
            twice = next(layer for layer in route if route.count(layer) > 1)
            raise ReachlensError(f"route {format_route(route)!r} runs layer {twice} twice; the skip space runs each "
                             "layer at most once (use the native space for repeats)")
        skipped = [i for i in range(self.n_layers) if i not in route]
        if len(skipped) > self.max_skip:
            raise ReachlensError(f"route {format_route(route)!r} skips {len(skipped)} layers {skipped}; the skip "
                             f"space allows at most max_skip={self.max_skip}")
        return tuple(RUN if i in route else SKIP for i in range(self.n_layers))

    def sample(self, rng: random.Random) -> Route:
        s = rng.randint(0, min(self.max_skip, self.n_layers - 1))
        skipped = set(rng.sample(range(self.n_layers), s))
        return tuple(i for i in range(self.n_layers) if i not in skipped)


@dataclass(frozen=True)
class NativeSpace(RouteSpace):
    """Skip up to ``max_skip`` layers and repeat up to ``max_repeat`` (run twice in a row); order kept.

    >>> NativeSpace(6).size()
    118
    """

    name: ClassVar[str] = "native"
    n_layers: int
    """Depth of the model."""
    max_skip: int = 2
    """Most layers a route may leave out."""
    max_repeat: int = 1
    """Most layers a route may run twice (immediately one after the other)."""

    def __post_init__(self) -> None:
        _check_params(self.n_layers, max_skip=self.max_skip, max_repeat=self.max_repeat)

    def actions(self, decisions: tuple[int, ...]) -> tuple[int, ...]:
        i = len(decisions)
        if i >= self.n_layers:
            return ()
        acts = [RUN]
        ran = any(a != SKIP for a in decisions)
        if decisions.count(SKIP) < self.max_skip and (ran or i < self.n_layers - 1):
            acts.append(SKIP)
        if decisions.count(REPEAT) < self.max_repeat:
            acts.append(REPEAT)
        return tuple(acts)

    def _state(self, decisions: tuple[int, ...]) -> Hashable:
        return (decisions.count(SKIP), decisions.count(REPEAT), any(a != SKIP for a in decisions))

    def decode(self, decisions: tuple[int, ...]) -> Route:
        return tuple(i for i, a in enumerate(decisions) for _ in range(a))

    def encode(self, route: Route) -> tuple[int, ...]:
        route = tuple(route)
        if err := _layer_order_error(route, self.name):
            raise err
        counts = [route.count(i) for i in range(self.n_layers)]
        for layer, c in enumerate(counts):
            if c > 2:
                raise ReachlensError(f"route {format_route(route)!r} runs layer {layer} {c} times; the native space "
                                 "runs a layer at most twice in a row")
        skipped = [i for i, c in enumerate(counts) if c == 0]
        repeated = [i for i, c in enumerate(counts) if c == 2]
        if len(skipped) > self.max_skip:
            raise ReachlensError(f"route {format_route(route)!r} skips {len(skipped)} layers {skipped}; the native "
                             f"space allows at most max_skip={self.max_skip}")
        if len(repeated) > self.max_repeat:
            raise ReachlensError(f"route {format_route(route)!r} repeats {len(repeated)} layers {repeated}; the "
                             f"native space allows at most max_repeat={self.max_repeat}")
        return tuple(counts)

    def sample(self, rng: random.Random) -> Route:
        s = rng.randint(0, min(self.max_skip, self.n_layers - 1))
        skipped = set(rng.sample(range(self.n_layers), s))
        kept = [i for i in range(self.n_layers) if i not in skipped]
        r = rng.randint(0, min(self.max_repeat, len(kept)))
        repeated = set(rng.sample(kept, r))
        return tuple(i for i in kept for _ in range(2 if i in repeated else 1))


@dataclass(frozen=True)
class ReorderSpace(RouteSpace):
    """Permutations of all layers in which no layer moves more than ``window - 1`` places.

    ``window=2`` swaps disjoint pairs of neighbouring layers; larger windows permute more freely.

    >>> sorted(ReorderSpace(3).enumerate())
    [(0, 1, 2), (0, 2, 1), (1, 0, 2)]
    """

    name: ClassVar[str] = "reorder"
    n_layers: int
    """Depth of the model."""
    window: int = 2
    """A layer may run at most ``window - 1`` positions from its own index (2: neighbour swaps)."""

    def __post_init__(self) -> None:
        _check_params(self.n_layers, window=self.window)
        if self.window < 1:
            raise ReachlensError(f"window={self.window!r} must be >= 1 (1 allows only the identity route)")

    def actions(self, decisions: tuple[int, ...]) -> tuple[int, ...]:
        p = len(decisions)
        if p >= self.n_layers:
            return ()
        reach = self.window - 1
        used = set(decisions)
        forced = p - reach
        if forced >= 0 and forced not in used:
            return (forced,)  # the last position this layer may take
        lo, hi = max(0, p - reach), min(self.n_layers - 1, p + reach)
        free = [j for j in range(lo, hi + 1) if j not in used]
        return tuple(sorted(free, key=lambda j: (j != p, j)))

    def _state(self, decisions: tuple[int, ...]) -> Hashable:
        lo = len(decisions) - self.window + 1
        return frozenset(j for j in decisions if j >= lo)

    def decode(self, decisions: tuple[int, ...]) -> Route:
        return tuple(decisions)

    def encode(self, route: Route) -> tuple[int, ...]:
        route = tuple(route)
        for layer in range(self.n_layers):
            c = route.count(layer)
            if c == 0:
                raise ReachlensError(f"route {format_route(route)!r} leaves out layer {layer}; the reorder space runs "
                                 "every layer exactly once")
            if c > 1:
                raise ReachlensError(f"route {format_route(route)!r} runs layer {layer} {c} times; the reorder space "
                                 "runs every layer exactly once")
        for step, layer in enumerate(route):
            if abs(step - layer) > self.window - 1:
                raise ReachlensError(
                    f"route {format_route(route)!r} runs layer {layer} at step {step}, {abs(step - layer)} places "
                    f"from its own position; window={self.window} allows at most {self.window - 1}"
                )
        return route

    def sample(self, rng: random.Random) -> Route:
        return self.sample_uniform(rng)


SPACES: Registry[Callable[..., RouteSpace]] = Registry("route space")
SPACES.register("skip", SkipSpace)
SPACES.register("native", NativeSpace)
SPACES.register("reorder", ReorderSpace)


def make_space(name: str, n_layers: int, **options: Any) -> RouteSpace:
    """The route space ``name`` (``skip``, ``native``, ``reorder``) for an ``n_layers`` model.

    Options left at None take the space's default.

    >>> str(make_space("native", 6, max_skip=1))
    'native(max_skip=1,max_repeat=1)'
    """
    cls = SPACES[name]
    fields = {f.name for f in dataclasses.fields(cls)} - {"n_layers"}  # type: ignore[arg-type]
    given = {k: v for k, v in options.items() if v is not None}
    unknown = set(given) - fields
    if unknown:
        raise ReachlensError(f"the {name} space has no option(s) {sorted(unknown)}; its options: {sorted(fields)}")
    return cls(n_layers, **given)


def space_from_spec(spec: dict[str, Any]) -> RouteSpace:
    """Rebuild a space from :meth:`RouteSpace.spec` (as stored with a result)."""
    spec = dict(spec)
    return make_space(spec.pop("space"), spec.pop("n_layers"), **spec)

