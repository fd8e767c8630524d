"""The search driver: exact budgets for every strategy, answer-blind objectives, anytime prefixes."""

from __future__ import annotations

import math

import pytest

from reachlens.errors import ReachlensError
from reachlens.protocol import Protocol
from reachlens.routing import (
    STRATEGIES,
    Evaluation,
    NativeSpace,
    ReorderSpace,
    RouteEvaluator,
    RoutingConfig,
    SkipSpace,
    Strategy,
    format_route,
    objective_value,
    run_search,
)
from reachlens.tasks import load_task

STRATEGY_NAMES = ["random", "hill_climb", "genetic", "mcts"]


class FakeEvaluator(RouteEvaluator):
    """Evaluations without a model: confidence falls with the distance from a target route, and the
    answer is correct exactly on the target."""

    def __init__(self, n_layers: int, n_questions: int, target: tuple[int, ...], space=None) -> None:
        self.n_layers = n_layers
        self.space = space
        self.prompts = [f"q{i}" for i in range(n_questions)]
        self.target = target
        self.calls: list[tuple[int, tuple[int, ...]]] = []

    def question_id(self, index: int) -> str:
        return f"q{index}"

    def evaluate(self, pairs):
        self.calls.extend(pairs)
        out = []
        for _, r in pairs:
            if self.space is not None:  # distance in decisions (skip/run/repeat per layer)
                dist = sum(a != b for a, b in zip(self.space.encode(tuple(r)), self.space.encode(self.target)))
            else:
                dist = sum(a != b for a, b in zip(r, self.target)) + abs(len(r) - len(self.target))
            ok = tuple(r) == self.target
            out.append(Evaluation(tuple(r), "x", "1" if ok else str(dist + 1), ok, True, "stop", 1,
                                  -0.1 * dist, -0.1 * dist))
        return out


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
@pytest.mark.parametrize("space", [NativeSpace(6), SkipSpace(6), ReorderSpace(6)], ids=str)
@pytest.mark.parametrize("budget", [1, 7, 40])
def test_every_strategy_spends_exactly_k(strategy, space, budget):
    ev = FakeEvaluator(6, 5, (0, 1, 2, 3, 4, 5))
    cands = run_search(ev, space, strategy, RoutingConfig(budget))
    assert (cands.groupby("question_id").size() == budget).all()
    assert len(ev.calls) == 5 * budget  # duplicates are charged too
    assert list(cands[cands["question_id"] == "q0"]["candidate_idx"]) == list(range(budget))
    assert (cands.groupby("question_id").head(1)["route"] == "0,1,2,3,4,5").all()  # the identity first
    for r in cands["route"]:
        assert space.contains(tuple(int(x) for x in r.split(",")))
    dup = cands.groupby("question_id")["route"].transform(lambda s: s.duplicated())
    assert (cands["duplicate"] == dup).all()


def test_all_four_strategies_are_registered():
    assert set(STRATEGY_NAMES) <= set(STRATEGIES.names())


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_strategies_are_anytime(strategy):
    """The first k evaluations of a budget-K run are a budget-k run (reach@k is read off one run)."""
    space = NativeSpace(6)
    big = run_search(FakeEvaluator(6, 3, (0, 2, 2, 3, 5)), space, strategy, RoutingConfig(30, seed=3))
    small = run_search(FakeEvaluator(6, 3, (0, 2, 2, 3, 5)), space, strategy, RoutingConfig(13, seed=3))
    assert list(big[big["candidate_idx"] < 13]["route"]) == list(small["route"])


def test_structured_search_climbs_a_smooth_objective():
    """On an objective that rises toward one route, the structured searches find it more often than
    random routes at the same budget (a sanity check of the search machinery, not of models)."""
    target = (0, 2, 2, 3, 5)  # skips 1 and 4, repeats 2: 1 of 118 routes
    found = {}
    for strategy in STRATEGY_NAMES:
        cands = run_search(FakeEvaluator(6, 20, target, NativeSpace(6)), NativeSpace(6), strategy, RoutingConfig(24))
        found[strategy] = cands.groupby("question_id")["correct"].any().mean()
    assert found["hill_climb"] > found["random"] and found["genetic"] > found["random"]
    assert found["mcts"] >= found["random"]


def test_strategy_sees_objectives_only_and_oracle_is_explicit(monkeypatch):
    seen = []

    class Spy(Strategy):
        def propose(self, n):
            return [self.space.sample(self.rng)]

        def observe(self, routes, scores):
            seen.extend(scores)

    monkeypatch.setitem(STRATEGIES._items, "spy_for_test", Spy)  # registered for this test only
    ev = FakeEvaluator(6, 2, (0, 1, 2, 3, 4, 5))
    run_search(ev, NativeSpace(6), "spy_for_test", RoutingConfig(5))
    assert all(0.0 <= s <= 1.0 for s in seen) and any(0 < s < 1 for s in seen)  # confidences, not grades
    seen.clear()
    run_search(ev, NativeSpace(6), "spy_for_test", RoutingConfig(5, oracle=True))
    assert set(seen) <= {0.0, 1.0}
    with pytest.raises(ReachlensError, match="choose it explicitly with oracle=True"):
        RoutingConfig(5, objective="oracle")
    with pytest.raises(LookupError, match="unknown search objective 'agreement'"):
        RoutingConfig(5, objective="agreement")


def test_a_strategy_that_overspends_is_refused(monkeypatch):
    class Greedy(Strategy):
        def propose(self, n):
            return [self.space.identity] * (n + 1)

    monkeypatch.setitem(STRATEGIES._items, "overspend_for_test", Greedy)
    with pytest.raises(RuntimeError, match="proposed 5 routes with 4 left of the budget"):
        run_search(FakeEvaluator(6, 1, (0,)), NativeSpace(6), "overspend_for_test", RoutingConfig(5))


def test_objectives_are_answer_blind_confidences():
    ev = Evaluation((0,), "t", None, False, True, "stop", 3, math.log(0.5), math.log(0.25))
    assert objective_value(ev, "confidence") == 0.0  # no answer: nothing to select
    ev = Evaluation((0,), "t", "3", False, True, "stop", 3, math.log(0.5), math.log(0.25))
    assert objective_value(ev, "confidence") == pytest.approx(0.5)
    assert objective_value(ev, "lowest_window") == pytest.approx(0.25)


def test_search_on_a_real_model_records_every_candidate(tiny_model):
    task = load_task("arith", n=3)
    ev = RouteEvaluator(tiny_model, task, Protocol.greedy("arith", max_new_tokens=8))
    cands = run_search(ev, NativeSpace(3), "mcts", RoutingConfig(6))
    assert len(cands) == 18
    assert ev.n_decoded == len(set(zip(cands["question_id"], cands["route"])))
    deployed = ev.deployment([0])[0]
    first = cands.iloc[0]
    assert first["route"] == format_route(deployed.route) and first["text"] == deployed.text
    assert cands["text"].map(len).gt(0).any() and cands["mean_logprob"].lt(0).all()


@pytest.mark.parametrize("space", [SkipSpace(4, max_skip=1), NativeSpace(3), ReorderSpace(4)], ids=str)
def test_mcts_tries_every_route_before_repeating_one(space):
    # Greedy evaluations are deterministic: MCTS must not spend budget on a route it already tried
    # while untried routes remain (its in-tree leaves are marked exhausted).
    size = space.size()
    ev = FakeEvaluator(space.n_layers, 2, tuple(range(space.n_layers)), space=space)
    cands = run_search(ev, space, "mcts", RoutingConfig(size + 3))
    for _, pool in cands.groupby("question_id"):
        routes = pool["route"].tolist()
        assert len(routes) == size + 3
        # the rollout can land on a route tried before, but the tree never selects one: every route
        # is tried by the end of the first `size` + a few evaluations
        assert len(set(routes)) == size


def test_mcts_identity_rollouts_stay_near_the_model():
    # With the identity rollout every evaluation is the tree's edits on top of the model's own route,
    # so MCTS's early routes are few edits away; uniformly random rollouts pile edits on.
    space = NativeSpace(6)
    ident = space.encode(tuple(range(6)))

    def mean_edits(rollout):
        ev = FakeEvaluator(6, 4, tuple(range(6)), space=space)
        cands = run_search(ev, space, "mcts", RoutingConfig(16), options={"rollout": rollout})
        return sum(sum(a != b for a, b in zip(space.encode(tuple(map(int, r.split(",")))), ident))
                   for r in cands["route"]) / len(cands)

    near, far = mean_edits("identity"), mean_edits("random")
    assert near + 0.8 < far, (near, far)
    with pytest.raises(ReachlensError, match="rollout='greedy'; known: identity, random"):
        run_search(FakeEvaluator(6, 1, tuple(range(6))), space, "mcts", RoutingConfig(4), options={"rollout": "greedy"})
