"""Route spaces: membership, validation messages, sizes, and the search operators staying in the space."""

from __future__ import annotations

import random

import pytest

from reachlens.errors import ReachlensError
from reachlens.routing import (
    NativeSpace,
    ReorderSpace,
    SkipSpace,
    format_route,
    make_space,
    parse_route,
    space_from_spec,
)

SPACES = [SkipSpace(5), NativeSpace(5), NativeSpace(4, max_skip=1, max_repeat=2), ReorderSpace(5),
          ReorderSpace(5, window=3)]


def test_space_sizes_match_enumeration_and_known_counts():
    assert NativeSpace(6).size() == 118  # the peer benchmark's family
    assert SkipSpace(6).size() == 1 + 6 + 15
    assert ReorderSpace(6).size() == 13  # Fibonacci: disjoint neighbour swaps
    for space in SPACES:
        routes = list(space.enumerate())
        assert len(routes) == len(set(routes)) == space.size()
        assert space.identity in routes


def test_skip_space_routes():
    assert sorted(SkipSpace(3, max_skip=1).enumerate()) == [(0, 1), (0, 1, 2), (0, 2), (1, 2)]
    assert () not in set(SkipSpace(2, max_skip=5).enumerate())  # never the empty route


def test_validation_names_the_rule_broken():
    with pytest.raises(ReachlensError, match="layer 9 is out of range for a 6-layer model"):
        NativeSpace(6).validate([0, 9])
    with pytest.raises(ReachlensError, match="skips 3 layers \\[1, 2, 3\\]; the skip space allows at most max_skip=2"):
        SkipSpace(6).validate([0, 4, 5])
    with pytest.raises(ReachlensError, match="runs layer 1 twice; the skip space runs each layer at most once"):
        SkipSpace(6).validate([0, 1, 1, 2, 3, 4, 5])
    with pytest.raises(ReachlensError, match="layer 1 runs after layer 2 at step 2"):
        NativeSpace(6).validate([0, 2, 1, 3, 4, 5])
    with pytest.raises(ReachlensError, match="runs layer 1 3 times"):
        NativeSpace(6).validate([0, 1, 1, 1, 2, 3, 4, 5])
    with pytest.raises(ReachlensError, match="repeats 2 layers \\[1, 2\\]; the native space allows at most max_repeat=1"):
        NativeSpace(6).validate([0, 1, 1, 2, 2, 3, 4, 5])
    with pytest.raises(ReachlensError, match="runs layer 3 at step 1, 2 places from its own position; window=2"):
        ReorderSpace(6).validate([0, 3, 2, 1, 4, 5])
    with pytest.raises(ReachlensError, match="leaves out layer 5"):
        ReorderSpace(6).validate([0, 1, 2, 3, 4])
    with pytest.raises(ReachlensError, match="not an integer"):
        NativeSpace(6).validate([0, "1"])


@pytest.mark.parametrize("space", SPACES, ids=str)
def test_operators_stay_in_the_space(space):
    rng = random.Random(0)
    for _ in range(100):
        r = space.sample(rng)
        assert space.contains(r)
        for n in space.neighbours(r):
            assert space.contains(n) and n != r
        assert space.contains(space.mutate(r, rng))
        assert space.contains(space.crossover(r, space.sample(rng), rng))
        assert space.contains(space.decode(space.complete((), rng)))
        assert space.decode(space.encode(r)) == r


def test_neighbours_of_identity_are_single_edits():
    assert set(SkipSpace(3).neighbours((0, 1, 2))) == {(1, 2), (0, 2), (0, 1)}
    assert set(ReorderSpace(3).neighbours((0, 1, 2))) == {(1, 0, 2), (0, 2, 1)}
    native = set(NativeSpace(2).neighbours((0, 1)))
    assert native == {(1,), (0,), (0, 0, 1), (0, 1, 1)}


def test_random_routes_are_stratified_by_edit_count():
    rng = random.Random(0)
    space = NativeSpace(6)
    draws = [space.sample(rng) for _ in range(3000)]
    skips = [sum(1 for i in range(6) if i not in r) for r in draws]
    # s ~ U{0, 1, 2}: each skip count about a third of the draws (uniform over routes would give 75/118 two skips)
    for s in (0, 1, 2):
        assert abs(skips.count(s) / len(draws) - 1 / 3) < 0.04


def test_make_space_and_route_strings():
    assert str(make_space("native", 6, max_skip=1)) == "native(max_skip=1,max_repeat=1)"
    with pytest.raises(ReachlensError, match="the skip space has no option\\(s\\) \\['window'\\]"):
        make_space("skip", 6, window=3)
    with pytest.raises(LookupError, match="unknown route space 'loop'; known: native, reorder, skip"):
        make_space("loop", 6)
    space = ReorderSpace(6, window=3)
    assert space_from_spec(space.spec()) == space
    assert parse_route(format_route((0, 1, 1, 3))) == (0, 1, 1, 3)
    with pytest.raises(ReachlensError, match="not a comma-separated list"):
        parse_route("0-1")
