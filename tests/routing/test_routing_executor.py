"""The route executor: identity = the model, skip/repeat = hand-built HF forwards, cached = uncached,
the trie = one forward per route, hooks named by the layer that runs."""

from __future__ import annotations

import torch

from reachlens.protocol import Protocol
from reachlens.engine import LayerStack, Row, encode, generate, tokenizer_of
from reachlens.errors import ReachlensError
from reachlens.routing import RouteRequest, RouteTrie, generate_along_routes, route_logits


def decode(max_new_tokens: int, **fields) -> Protocol:
    """The engine's decode spec for these tests: a Protocol (sampled rows at temperature 1.0 unless given)."""
    fields.setdefault("temperature", 1.0)
    return Protocol("test", k=1, max_new_tokens=max_new_tokens, **fields)


def generate_to_length(*args, **kwargs):
    """:func:`generate` with EOS not stopping a row: every decode in these tests runs to its length."""
    return generate(*args, stop_at_eos=False, **kwargs)


PROMPTS = ["Q: 12+34=?\nA:", "Q: 7*3+5-2=?\nA:"]


def _ids(model, text):
    return torch.tensor(encode(model, [text]))


def hand_built_logits(hf, ids, route):
    """A plain HuggingFace forward that runs the listed decoder layers (reference for routes)."""
    from transformers.masking_utils import create_causal_mask

    inner = hf.model
    with torch.no_grad():
        x = inner.embed_tokens(ids)
        pos = torch.arange(ids.shape[1])[None]
        mask = create_causal_mask(config=inner.config, inputs_embeds=x, attention_mask=None,
                                  past_key_values=None, position_ids=pos)
        pe = inner.rotary_emb(x, position_ids=pos)
        for layer in route:
            x = inner.layers[layer](x, attention_mask=mask, position_embeddings=pe, position_ids=pos)
            x = x[0] if isinstance(x, tuple) else x
        return hf.lm_head(inner.norm(x))


def test_identity_route_reproduces_the_model(tiny_model, tiny_hf):
    ids = _ids(tiny_model, "Q: 12+34=?\nA: 12+34=46")
    identity = (0, 1, 2)
    ours = route_logits(tiny_model, ids, [identity], last_only=False)[0]
    with torch.no_grad():
        hf = tiny_hf(ids).logits
        stack = LayerStack(tiny_model).forward(ids)
    assert (ours - hf).abs().max().item() < 1e-5
    assert (ours - stack).abs().max().item() < 1e-5
    assert (hand_built_logits(tiny_hf, ids, identity) - hf).abs().max().item() < 1e-5
    params = decode(16)
    routed = generate_along_routes(tiny_model, PROMPTS, [RouteRequest(i, identity) for i in range(2)], params, stop_at_eos=False)
    plain = generate_to_length(tiny_model, PROMPTS, [Row(0), Row(1)], params)
    for a, b in zip(routed, plain):
        assert a.token_ids == b.token_ids and a.logprobs == b.logprobs


def test_skip_and_repeat_routes_equal_hand_built_forwards(tiny_model, tiny_hf):
    ids = _ids(tiny_model, "Q: 7*3+5-2=?\nA: 7*3=21")
    routes = [(0, 2), (1, 2), (0, 1), (0, 1, 1, 2), (2, 1, 0)]
    ours = route_logits(tiny_model, ids, routes, last_only=False)
    for r, logits in zip(routes, ours):
        ref = hand_built_logits(tiny_hf, ids, r)
        assert (logits[0] - ref[0]).abs().max().item() < 1e-5, r


def test_trie_equals_one_forward_per_route(tiny_model):
    ids = torch.cat([_ids(tiny_model, "Q: 12+34=?\nA:"), _ids(tiny_model, "Q: 98-76=?\nA:")])
    routes = [(0, 1, 2), (0, 1, 1, 2), (0, 2), (0, 1, 2), (1, 2), (0, 0, 1, 2)]
    stack = LayerStack(tiny_model)
    trie_logits = route_logits(tiny_model, ids, routes)
    with torch.no_grad():
        naive = torch.stack([stack.forward(ids, route=r, last_only=True) for r in routes])
    assert trie_logits.shape == (6, 2, 1, tiny_model.cfg.d_vocab)
    torch.testing.assert_close(trie_logits, naive, rtol=1e-5, atol=1e-5)


def test_trie_counts_shared_prefixes_once():
    routes = [(0, 1, 2), (0, 1, 1, 2), (0, 2), (0, 1, 2)]
    trie = RouteTrie.build(routes)
    # nodes: 0 | 0,1 | 0,1,2 | 0,1,1 | 0,1,1,2 | 0,2
    assert trie.n_layer_calls == 6 and trie.naive_layer_calls == 12 and trie.saved == 0.5
    assert trie.leaf[0] == trie.leaf[3]
    # depth 1: {0}; depth 2: {1, 2}; depth 3: {1, 2}; depth 4: {2}
    assert trie.n_group_calls == 6
    assert [sorted(level) for level in trie.levels()] == [[0], [1, 2], [1, 2], [2]]


def test_route_logits_of_every_position_match_one_forward_along_the_route(tiny_model):
    ids = torch.tensor([tokenizer_of(tiny_model)("Q: 1+2=?\nA: 1+2=3")["input_ids"]])
    logits = route_logits(tiny_model, ids, [(0, 1, 2), (0, 2)], last_only=False)
    assert logits.shape[:3] == (2, 1, ids.shape[1])
    for i, route in enumerate([(0, 1, 2), (0, 2)]):
        torch.testing.assert_close(logits[i, 0], LayerStack(tiny_model).forward(ids, route=route)[0], rtol=1e-5, atol=1e-5)


def test_repeat_route_generates_the_same_with_and_without_the_cache(tiny_model):
    route = (0, 1, 1, 2)
    n = 14
    cached = generate_to_length(tiny_model, [PROMPTS[1]], [Row(0)], decode(n), route=route)[0]
    stack = LayerStack(tiny_model)
    ids = _ids(tiny_model, PROMPTS[1])
    out = []
    with torch.no_grad():
        for _ in range(n):  # no cache: re-run the whole sequence along the route each step
            nxt = stack.forward(ids, route=route)[0, -1].argmax()
            out.append(int(nxt))
            ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
    assert list(cached.token_ids) == out
    # and a layer-indexed cache would differ: the repeat route is not the identity route's output
    plain = generate_to_length(tiny_model, [PROMPTS[1]], [Row(0)], decode(n))[0]
    assert plain.token_ids != cached.token_ids


def test_hooks_fire_per_run_of_a_layer(tiny_model):
    calls = []

    def record(x, hook):
        calls.append((hook.name.split(".")[1], x.shape[0]))  # the layer index in the hook's name

    ids = _ids(tiny_model, PROMPTS[0])
    with tiny_model.hooks(fwd_hooks=[("blocks.1.hook_mlp_out", record)]):
        LayerStack(tiny_model).forward(ids, route=(0, 1, 1, 2))
        assert calls == [("1", 1)] * 2
        calls.clear()
        # trie: layer 1 runs once for the shared prefix (0, 1) and once more for (0, 1, 1)
        route_logits(tiny_model, ids, [(0, 1, 2), (0, 1, 1, 2), (0, 2)])
        assert calls == [("1", 1), ("1", 1)]
        calls.clear()
        # two different prefixes running layer 1 at the same depth: one stacked call of 2 rows
        route_logits(tiny_model, ids, [(0, 1), (2, 1)])
        assert calls == [("1", 2)]
    LayerStack(tiny_model).forward(ids, route=(1,))
    assert calls == [("1", 2)]  # the hook is gone after the block


def test_a_hook_changes_routed_logits(tiny_model):
    ids = _ids(tiny_model, PROMPTS[0])
    base = route_logits(tiny_model, ids, [(0, 1, 1, 2)])
    with tiny_model.hooks(fwd_hooks=[("blocks.1.hook_mlp_out", lambda x, hook: torch.zeros_like(x))]):
        ablated = route_logits(tiny_model, ids, [(0, 1, 1, 2)])
    assert not torch.allclose(base, ablated)


def test_generation_decodes_identical_requests_once(tiny_model):
    params = decode(10)
    reqs = [RouteRequest(0, (0, 2)), RouteRequest(1, (0, 1, 1, 2)), RouteRequest(1, (0, 2)), RouteRequest(0, (0, 2)),
            RouteRequest(1, (0, 2), seed=7)]
    outs = generate_along_routes(tiny_model, PROMPTS, reqs, params, stop_at_eos=False)
    assert outs[0] is outs[3]  # identical requests decoded once
    alone = generate_to_length(tiny_model, [PROMPTS[1]], [Row(0)], params, route=(0, 1, 1, 2))[0]
    assert outs[1].token_ids == alone.token_ids
    sampled = generate_to_length(tiny_model, [PROMPTS[1]], [Row(0, 7)], params, route=(0, 2))[0]
    assert outs[4].token_ids == sampled.token_ids


def test_requests_on_many_routes_decode_in_one_call_as_hand_built_forwards(tiny_model, tiny_hf, monkeypatch):
    """Greedy answers along six routes for both prompts, in one engine call, equal an argmax loop of plain
    HuggingFace forwards (no cache) along each route."""
    import reachlens.routing.executor as executor

    routes = [(0, 1, 2), (0, 2), (0, 1, 1, 2), (2, 1, 0), (1,), (0, 0, 1, 1, 2, 2)]
    calls = []
    monkeypatch.setattr(executor, "generate", lambda *a, **k: calls.append(1) or generate(*a, **k))
    n = 8
    reqs = [RouteRequest(p, r) for r in routes for p in range(2)]
    outs = generate_along_routes(tiny_model, PROMPTS, reqs, decode(n), stop_at_eos=False)
    assert len(calls) == 1
    for req, out in zip(reqs, outs):
        ids = _ids(tiny_model, PROMPTS[req.prompt])
        want = []
        for _ in range(n):
            nxt = hand_built_logits(tiny_hf, ids, req.route)[0, -1].argmax()
            want.append(int(nxt))
            ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
        assert list(out.token_ids) == want, req


def test_self_verification_scores_the_completion_under_the_full_model(tiny_model):
    import pytest

    from reachlens.selectors import verification_scores

    prompt, completion = "Q: 1+2=?\nA:", " 1+2=3 #### 3"
    got = verification_scores(tiny_model, [(prompt, completion, "3"), (prompt, "", None)], "rescore")
    p_ids, c_ids = encode(tiny_model, [prompt])[0], tokenizer_of(tiny_model)(completion, add_special_tokens=False)
    ids = torch.tensor([list(p_ids) + list(c_ids["input_ids"])])  # one plain forward, log-probability by hand
    logp = torch.log_softmax(LayerStack(tiny_model).forward(ids)[0, len(p_ids) - 1 : -1].float(), -1)
    ref = logp.gather(-1, torch.tensor(c_ids["input_ids"])[:, None]).mean().item()
    assert got[0] == pytest.approx(ref, abs=1e-5)
    assert got[1] != got[1]  # an empty completion has no score (NaN)
    with pytest.raises(ReachlensError, match="verification prompt 'yes_no' has text the tokenizer cannot encode"):
        verification_scores(tiny_model, [(prompt, completion, "3")], "yes_no")
