"""Rows on different routes in one ``generate`` call (``Row.route``) decode as each route alone does.

Each route is decoded alone (``generate(route=r)``) and all routes together in one call, on a tiny model of
each engine path: a Llama on the fused path (with and without the shared-prompt cascade), a GPT-2 on the
generic one, a Gemma 2 (sliding-window layers: the call splits into one per route). Tokens must be equal,
log-probabilities equal to float32 rounding (the batch's composition changes the matmul shapes). Hand-built
HuggingFace forwards as the independent reference are in tests/routing/test_routing_executor.py.
"""

from __future__ import annotations

import pytest
import torch

from reachlens.engine import Row, current_rows, generate
from reachlens.engine.kv_cache import SlotKVCache
from reachlens.engine.stack import RowRoutes
from reachlens.interventions import zero_ablation
from reachlens.models.testing import make_tiny_model
from reachlens.protocol import Protocol

PROMPTS = ["Q: 12+34=?\nA:", "hello world, a b c", "Q: 7*8-9=?\nA: 7"]
PROTOCOL = Protocol("test", k=1, temperature=1.0, max_new_tokens=7)
ROUTES = [(0, 1), (0, 0, 1), (1, 0), (0, 1, 1, 1), (0,)]
"""Routes of a 2-layer model: the identity, a repeat, a reorder, a long repeat, a skip (shorter than the rest)."""


@pytest.fixture(scope="module", params=["llama", "gpt2", "gemma2"])
def model(request, tmp_path_factory):
    from reachlens.models import load_model

    return load_model(str(make_tiny_model(request.param, tmp_path_factory.mktemp(request.param))))


def mixed_rows(arms=(None,)) -> list[Row]:
    """Per prompt, route and arm: the greedy row and two samples (routes interleaved, so chunks mix them)."""
    return [Row(p, seed, (p, route, arm, seed), arm=arm, route=route)
            for p in range(len(PROMPTS)) for seed in (None, 11, 12) for route in ROUTES for arm in arms]


def alone(model, rows, hooks_of=lambda arm: [], **kwargs):
    """Each (route, arm) group of ``rows`` decoded in a call of its own, the arm's hooks acting on every row."""
    out = [None] * len(rows)
    for route in ROUTES:
        for arm in dict.fromkeys(r.arm for r in rows):
            members = [i for i, r in enumerate(rows) if r.route == route and r.arm == arm]
            with model.hooks(fwd_hooks=hooks_of(arm)):
                comps = generate(model, PROMPTS, [Row(rows[i].prompt, rows[i].seed) for i in members], PROTOCOL,
                                 stop_at_eos=False, route=route, **kwargs)
            for i, c in zip(members, comps):
                out[i] = c
    return out


def assert_same(together, apart, rows):
    for row, a, b in zip(rows, together, apart):
        assert a.token_ids == b.token_ids, row
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=0, atol=1e-4)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("share", [None, False])
def test_routes_in_one_call_equal_one_route_at_a_time(model, fused, share):
    rows = mixed_rows()
    together = generate(model, PROMPTS, rows, PROTOCOL, stop_at_eos=False, fused=fused, share_prefixes=share)
    assert_same(together, alone(model, rows, fused=fused, share_prefixes=share), rows)


def test_routes_and_arms_in_one_call_equal_each_alone(model):
    """A per-arm zero-ablation of layer 1's MLP, on rows of every route: a route that runs layer 1 twice is
    ablated twice, one that skips it not at all, as in a one-route call with the hook on every row."""
    rows = mixed_rows(arms=(None, "z1"))
    with model.hooks(fwd_hooks=zero_ablation(model, 1, "mlp", arm="z1")):
        together = generate(model, PROMPTS, rows, PROTOCOL, stop_at_eos=False)
    apart = alone(model, rows, lambda arm: zero_ablation(model, 1, "mlp") if arm == "z1" else [])
    assert_same(together, apart, rows)
    ablated = [c for r, c in zip(rows, together) if r.arm == "z1" and r.route == (0, 1)]
    plain = [c for r, c in zip(rows, together) if r.arm is None and r.route == (0, 1)]
    assert any(a.token_ids != b.token_ids for a, b in zip(ablated, plain))  # the ablation did something


def test_a_hook_sees_the_rows_a_block_runs_on(model):
    """A block run on some entries (the rows whose route runs it at that step): its hooks see those entries,
    and current_rows() describes exactly them."""
    seen = []

    def record(x, hook):
        rows = current_rows()
        assert x.shape[0] == rows.n_entries
        if rows.prompt_mask is not None:
            assert rows.prompt_mask.shape[0] == x.shape[0]
        seen.append((rows.step, sorted(rows.tags[r][1] for e in rows.entries for r in e)))

    rows = mixed_rows()
    with model.hooks(fwd_hooks=[("blocks.1.hook_resid_pre", record)]):
        generate(model, PROMPTS, rows, PROTOCOL, stop_at_eos=False, share_prefixes=True)
    prefill = [routes for step, routes in seen if step == -1]
    # layer 1 runs at route step 0 in (1, 0), at step 1 in (0, 1) and (0, 1, 1, 1), at steps 2 and 3 in
    # (0, 1, 1, 1), at step 2 in (0, 0, 1); never in (0,)
    expected = [{(1, 0)}, {(0, 1), (0, 1, 1, 1)}, {(0, 0, 1), (0, 1, 1, 1)}, {(0, 1, 1, 1)}]
    if model.original_model.config.model_type == "gemma2":  # one call per route: each route's own steps
        expected = [{(0, 1)}, {(0, 0, 1)}, {(1, 0)}] + [{(0, 1, 1, 1)}] * 3
        assert sorted(map(sorted, map(set, prefill))) == sorted(map(sorted, expected))
    else:
        assert [set(r) for r in prefill] == expected
    assert all((0,) not in routes for _, routes in seen)
    assert {r for _, routes in seen for r in routes} == {r for r in ROUTES if 1 in r}


def test_row_routes_plan_groups_entries_by_the_layer_they_run():
    rr = RowRoutes(((0, 1, 2), (0, 2), (1,)), torch.tensor([0, 1, 1, 2, 0]))
    plan = [[(layer, None if idx is None else idx.tolist()) for layer, idx in step] for step in rr.plan()]
    assert plan == [[(0, [0, 1, 2, 4]), (1, [3])], [(1, [0, 4]), (2, [1, 2])], [(2, [0, 4])]]
    assert rr.slot_layers == (frozenset({0, 1}), frozenset({1, 2}), frozenset({2}))
    # a free entry (-1) runs nothing, except where every other entry runs the same layer
    free = RowRoutes(((0, 1, 2), (0, 2)), torch.tensor([0, -1, 1]))
    plan = [[(layer, None if idx is None else idx.tolist()) for layer, idx in step] for step in free.plan()]
    assert plan == [[(0, None)], [(1, [0]), (2, [2])], [(2, [0])]]
    # only the routes present: every entry on (0, 2) runs each step on the whole batch
    only = RowRoutes(((0, 1, 2), (0, 2)), torch.tensor([1, 1]))
    assert [[(layer, idx) for layer, idx in step] for step in only.plan()] == [[(0, None)], [(2, None)]]


def test_the_cache_refuses_a_layer_its_step_does_not_hold():
    cache = SlotKVCache((frozenset({0, 1}), 2), max_len=8)
    cache.batch = 3
    k = torch.zeros(2, 1, 1, 4)
    cache.enter(0)  # a step of several layers needs the layer named
    with pytest.raises(RuntimeError, match="should run layer"):
        cache.update(k, k, 0)
    cache.enter(0, layer=1, rows=torch.tensor([0, 2]))
    with pytest.raises(RuntimeError, match="should run layer 1"):
        cache.update(k, k, 0)
    cache.enter(0, layer=3, rows=torch.tensor([0, 2]))
    with pytest.raises(RuntimeError, match="should run layer 3"):
        cache.update(k, k, 3)
    cache.enter(0, layer=1, rows=torch.tensor([0, 2]))
    keys, _ = cache.update(torch.ones(2, 1, 1, 4), k, 1)
    assert keys.shape == (2, 1, 1, 4) and bool((keys == 1).all())
    cache.enter(0, layer=0, rows=torch.tensor([1]))
    with pytest.raises(RuntimeError, match="wrote to a cache of 1 rows"):
        cache.update(k, k, 0)


def test_rows_finishing_at_different_steps(model):
    """Long decodes with a stop string, rows of every route and samples finishing early and late: rows of the
    longest route (whose last steps no other route runs) finish while others decode on past the shared cache's
    growth, and the forks' free slots are reused; each row still equals its route alone."""
    rows = [Row(p, seed, route=route) for p in range(len(PROMPTS)) for seed in (None, *range(20, 32))
            for route in ((0, 1, 1, 1), *ROUTES[:-1])]
    protocol = Protocol("test", k=1, temperature=1.0, max_new_tokens=40, stop=("e",))
    together = generate(model, PROMPTS, rows, protocol, stop_at_eos=False)
    lengths = {r.route: sorted(len(c.token_ids) for r2, c in zip(rows, together) if r2.route == r.route) for r in rows}
    assert min(lengths[(0, 1, 1, 1)]) < 16 and max(len(c.token_ids) for c in together) > 32  # the case is met
    for route in dict.fromkeys(r.route for r in rows):
        members = [i for i, r in enumerate(rows) if r.route == route]
        apart = generate(model, PROMPTS, [Row(rows[i].prompt, rows[i].seed) for i in members], protocol,
                         stop_at_eos=False, route=route)
        assert [together[i].token_ids for i in members] == [c.token_ids for c in apart]


def test_a_shared_slot_left_unwritten_for_some_steps_grows_with_zeros():
    """Slot 1 is run by no row for a while (as when every row of the routes that run it has finished) and
    written again later: its buffer grows over the gap with zeros, keeping what was written."""
    cache = SlotKVCache((0, frozenset({1, 2})), max_len=64)
    prompt = torch.ones(2, 1, 4, 8)
    for slot, layer in ((0, 0), (1, 1)):
        cache.enter(slot, layer=layer)
        cache.update(prompt, prompt, layer)
    cache.commit()
    cache.share(torch.tensor([0, 1]))
    for step in range(20):
        new = torch.full((2, 1, 1, 8), float(step + 1))
        cache.enter(0)
        cache.append(new, new, 0)
        if step < 2:
            cache.enter(1, layer=1)
            cache.append(new, new, 1)
        elif step >= 18:
            cache.enter(1, layer=2, rows=torch.tensor([1]))
            cache.append(new[1:], new[1:], 2)
        cache.commit()
    own_k, _, written = cache.own_padded(1)
    assert written == 20 and own_k.shape[2] >= 20
    assert own_k[:, 0, :2, 0].tolist() == [[1.0, 2.0], [1.0, 2.0]]
    assert bool((own_k[:, 0, 2:18] == 0).all())
    assert own_k[1, 0, 18:20, 0].tolist() == [19.0, 20.0]
