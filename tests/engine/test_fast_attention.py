"""The fused and cascade attention paths equal the bridge's eager attention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from reachlens.protocol import Protocol
from reachlens.engine import Row, generate, row_seed
from reachlens.engine.fast_attention import cascade_attention, fusable_attentions, fused_attention
from reachlens.engine.kv_cache import SharedPrefix


def decode(max_new_tokens: int, **fields) -> Protocol:
    """The engine's decode spec for these tests: a Protocol (sampled rows at temperature 1.0 unless given)."""
    fields.setdefault("temperature", 1.0)
    return Protocol("test", k=1, max_new_tokens=max_new_tokens, **fields)


def generate_to_length(*args, **kwargs):
    """:func:`generate` with EOS not stopping a row: every decode in these tests runs to its length."""
    return generate(*args, stop_at_eos=False, **kwargs)


PROMPTS = ["Q: 12+34=?\nA:", "Q: 5-3+2-9=?\nA:", "hello"]


def test_cascade_attention_equals_sdpa_over_concatenated_keys():
    torch.manual_seed(0)
    b, h, hk, d, lp, t = 7, 4, 2, 8, 5, 3
    group = torch.tensor([0, 0, 1, 1, 1, 2, 0])
    shared = SharedPrefix.build(group, lp, 3)
    q = torch.randn(b, h, 1, d)
    pk, pv = torch.randn(3, hk, lp, d), torch.randn(3, hk, lp, d)
    ok, ov = torch.randn(b, hk, t, d), torch.randn(b, hk, t, d)
    mask = torch.ones(b, 1, 1, lp + t, dtype=torch.bool)
    mask[2, ..., :2] = False  # left padding of prompt 1 seen by row 2
    out = cascade_attention(q, pk, pv, ok, ov, shared, mask, d**-0.5)
    k = torch.cat([pk[group], ok], 2).repeat_interleave(h // hk, 1)
    v = torch.cat([pv[group], ov], 2).repeat_interleave(h // hk, 1)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


def test_cascade_attention_over_buffers_with_room_equals_sdpa_over_the_written_keys():
    """Row-own buffers longer than what was written (room to grow): the unwritten positions, whatever finite
    values they hold, change nothing; the product over values padded with zero probabilities is bitwise the
    product over the written values."""
    torch.manual_seed(1)
    b, h, hk, d, lp, t, room = 6, 4, 2, 8, 5, 3, 16
    group = torch.tensor([0, 0, 1, 1, 1, 0])
    shared = SharedPrefix.build(group, lp, 2)
    q = torch.randn(b, h, 1, d)
    pk, pv = torch.randn(2, hk, lp, d), torch.randn(2, hk, lp, d)
    ok, ov = torch.randn(b, hk, room, d) * 1e3, torch.randn(b, hk, room, d) * 1e3  # large junk past t
    out = cascade_attention(q, pk, pv, ok, ov, shared, None, d**-0.5, own=t)
    k = torch.cat([pk[group], ok[:, :, :t]], 2).repeat_interleave(h // hk, 1)
    v = torch.cat([pv[group], ov[:, :, :t]], 2).repeat_interleave(h // hk, 1)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), rtol=1e-5, atol=1e-6)
    probs = torch.softmax(torch.randn(b * hk, 1, t), -1)
    padded = torch.cat([probs, probs.new_zeros(b * hk, 1, room - t)], -1)
    values = ov.reshape(b * hk, room, d)
    assert torch.equal(torch.bmm(padded, values), torch.bmm(probs, values[:, :t].contiguous()))


def test_shared_cache_rows_hold_what_was_written_through_forks_and_compaction(monkeypatch):
    """The shared-mode row buffers (grown 16 positions at a time) keep each row's written keys and values
    through forks into free and new rows and a compaction, and hold only finite values past them: memory
    handed out uninitialised (poisoned with NaN here) is never read as a key or a value."""
    from reachlens.engine.kv_cache import SlotKVCache

    new_empty = torch.Tensor.new_empty
    monkeypatch.setattr(torch.Tensor, "new_empty", lambda self, *a, **kw: new_empty(self, *a, **kw).fill_(float("nan")))
    torch.manual_seed(3)
    cache = SlotKVCache(route=(0,), max_len=60)
    cache.enter(0)
    cache.append(torch.randn(2, 2, 4, 3), torch.randn(2, 2, 4, 3), 0)
    cache.commit()
    cache.share(torch.tensor([0, 0, 1]))
    written_k, written_v = [[] for _ in range(3)], [[] for _ in range(3)]  # per row, per step: [h, d]
    for step in range(40):
        n = cache.batch
        k, v = torch.randn(n, 2, 1, 3), torch.randn(n, 2, 1, 3)
        cache.enter(0)
        cache.append(k, v, 0)
        cache.commit()
        for r in range(n):
            written_k[r].append(k[r, :, 0])
            written_v[r].append(v[r, :, 0])
        if step == 5:  # row 1 forks into a new row 3
            cache.copy_rows(torch.tensor([1]), torch.tensor([3]))
            written_k.append(list(written_k[1]))
            written_v.append(list(written_v[1]))
        if step == 20:  # row 0 finished: compact to rows 3, 1, 2 (in place: the last row moves into the free one)
            cache.select_rows(torch.tensor([3, 1, 2]))
            written_k = [written_k[i] for i in (3, 1, 2)]
            written_v = [written_v[i] for i in (3, 1, 2)]
        if step == 30:  # any reordering that does not grow the batch copies the moved rows in place
            cache.select_rows(torch.tensor([2, 0]))
            written_k = [written_k[i] for i in (2, 0)]
            written_v = [written_v[i] for i in (2, 0)]
        own_k, own_v, own = cache.own_padded(0)
        assert own == step + 1 and own_k.shape[2] % 16 == 0 and own_k.is_contiguous() and own_v.is_contiguous()
        for r in range(cache.batch):
            assert torch.equal(own_k[r, :, :own], torch.stack(written_k[r], 1))
            assert torch.equal(own_v[r, :, :own], torch.stack(written_v[r], 1))
        assert torch.isfinite(own_k).all() and torch.isfinite(own_v).all()
        assert torch.equal(cache.own(0)[0], own_k[:, :, :own])


def test_a_growing_cache_holds_what_a_preallocated_one_does_and_shares_without_a_copy():
    """``grow=True``: plain-mode buffers sized to what is written (rounded up to 16 positions) hold the same keys and
    values as ``max_len``-sized ones, through growth; shared one row per prompt, each buffer becomes its row's own
    (the same memory), with zeros past the prompt, and decoding on reads what the preallocated cache reads."""
    from reachlens.engine.kv_cache import SlotKVCache

    torch.manual_seed(5)
    grown, fixed = SlotKVCache(route=(0, 1), max_len=50, grow=True), SlotKVCache(route=(0, 1), max_len=50)
    steps = [torch.randn(3, 2, 5, 4)] + [torch.randn(3, 2, 1, 4) for _ in range(20)]
    for i, new in enumerate(steps):
        for cache in (grown, fixed):
            for slot in (0, 1):
                cache.enter(slot)
                cache.append(new + slot, -new, slot)
            cache.commit()
        if i == 0:
            assert grown._keys[0].shape[2] == 16 and fixed._keys[0].shape[2] == 50
            before = grown._keys[1].data_ptr()
            for cache in (grown, fixed):
                cache.share(torch.arange(3), forks=False)
            assert grown._keys[1].data_ptr() == before and torch.equal(grown._keys[1][:, :, 5:], torch.zeros(3, 2, 11, 4))
        for slot in (0, 1):
            for a, b in zip(grown.own_padded(slot), fixed.own_padded(slot)):
                assert torch.equal(torch.as_tensor(a), torch.as_tensor(b))
    plain = SlotKVCache(route=(0,), max_len=40, grow=True)
    written = [torch.randn(2, 1, 7, 3)] + [torch.randn(2, 1, 1, 3) for _ in range(12)]
    for new in written:  # plain mode throughout: grown at 16, kept whole
        plain.enter(0)
        plain.append(new, 2 * new, 0)
        plain.commit()
    assert plain._keys[0].shape[2] == 32 and torch.equal(plain.own(0)[0], torch.cat(written, 2))
    assert torch.equal(plain.own(0)[1], 2 * torch.cat(written, 2))


@pytest.mark.parametrize("route", [None, (0, 2), (0, 1, 1, 2)])
def test_fused_and_generic_paths_agree_on_greedy_and_samples(tiny_model, route):
    """The two execution paths (describe(model).path) against each other, routes included."""
    from reachlens.engine import LayerStack, describe

    assert describe(tiny_model).path == "fused" and LayerStack(tiny_model, fused=False).path == "generic"
    assert len(fusable_attentions(tiny_model)) == 3
    rows = [Row(p) for p in range(3)] + [Row(p, row_seed(0, str(p), j)) for p in range(3) for j in range(4)]
    params = decode(16, temperature=1.0)
    fast = generate_to_length(tiny_model, PROMPTS, rows, params, max_batch_rows=64, route=route)
    generic = generate_to_length(tiny_model, PROMPTS, rows, params, max_batch_rows=64, route=route, fused=False)
    assert [o.token_ids for o in fast] == [o.token_ids for o in generic]
    for a, b in zip(fast, generic):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4


def test_an_attention_internal_hook_takes_the_bridge_path(tiny_model):
    seen = []

    def look(pattern, hook):
        seen.append(pattern.shape)

    params = decode(5)
    with tiny_model.hooks(fwd_hooks=[("blocks.2.attn.hook_pattern", look)]):
        hooked = generate_to_length(tiny_model, [PROMPTS[0]], [Row(0)], params)[0]
    assert len(seen) == 5 and seen[1][-2:] == (1, seen[0][-1] + 1)  # prefill, then one query per step
    assert hooked.token_ids == generate_to_length(tiny_model, [PROMPTS[0]], [Row(0)], params)[0].token_ids


def test_an_unhooked_hook_point_is_skipped_and_a_hooked_one_called():
    """``fire`` returns the tensor itself when nothing is attached, and runs the call when a hook of the point's own,
    a TransformerLens hook, or a global PyTorch module hook would see it."""
    from transformer_lens.hook_points import HookPoint

    from reachlens.engine.fast_attention import fire

    point, x = HookPoint(), torch.randn(2, 3)
    calls = []
    point.forward = lambda t: calls.append(1) or t  # counts module calls
    assert fire(point, x) is x and calls == []
    point.add_hook(lambda t, hook: t * 2)
    assert torch.equal(fire(point, x), x * 2) and calls == [1]
    point.remove_hooks()
    seen = []
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: seen.append(type(m).__name__))
    try:
        assert fire(point, x) is x and calls == [1, 1] and seen == ["HookPoint"]
    finally:
        handle.remove()


@pytest.mark.parametrize("shape", [(3, 4, 1, 32), (2, 2, 7, 64), (1, 8, 5, 16)])
def test_rotary_equals_huggingfaces_bit_for_bit(shape):
    """``x * cos + roll(x) * sin'`` against Llama's ``apply_rotary_pos_emb`` (a sign moved between factors is exact)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    from reachlens.engine.fast_attention import rotary, rotary_tables

    torch.manual_seed(sum(shape))
    b, h, t, d = shape
    q, k = torch.randn(b, h, t, d) * 30, torch.randn(b, 1, t, d)
    angles = torch.randn(b, t, d // 2) * 100
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    ref_q, ref_k = apply_rotary_pos_emb(q, k, cos, sin)
    tables = rotary_tables(cos, sin)
    assert torch.equal(rotary(q, tables), ref_q) and torch.equal(rotary(k, tables), ref_k)
    assert rotary_tables(cos, sin, reuse=True) is rotary_tables(cos, sin, reuse=True)  # kept for the next layer
    kept = rotary_tables(cos, sin, reuse=True)
    assert rotary_tables(cos, sin) is not kept and rotary_tables(cos, sin, reuse=True) is not kept  # forgotten


def test_a_hook_on_the_rotary_tables_acts_in_every_layer(tiny_model):
    """An edit of ``hook_sin`` in one layer reaches that layer only, fused path or not (the tables prepared once per
    forward are not reused past a hooked layer)."""
    edited = []

    def bump(sin, hook):
        edited.append(hook.name)
        return sin * 0.5

    params = decode(6)
    with tiny_model.hooks(fwd_hooks=[("blocks.1.attn.hook_sin", bump)]):
        fused = generate_to_length(tiny_model, PROMPTS, [Row(p) for p in range(3)], params)
        generic = generate_to_length(tiny_model, PROMPTS, [Row(p) for p in range(3)], params, fused=False)
    plain = generate_to_length(tiny_model, PROMPTS, [Row(p) for p in range(3)], params)
    assert edited and set(edited) == {"blocks.1.attn.hook_sin"}
    assert [o.token_ids for o in fused] == [o.token_ids for o in generic]
    assert [o.token_ids for o in fused] != [o.token_ids for o in plain]


def test_fused_path_is_removed_after_a_forward(tiny_model):
    with fused_attention(tiny_model) as n:
        assert n == 3 and all("forward" in a.__dict__ for a in fusable_attentions(tiny_model))
    assert not any("forward" in a.__dict__ for a in fusable_attentions(tiny_model))


def test_grouped_matmul_per_group_path_equals_padded_path():
    from reachlens.engine.kv_cache import grouped_matmul

    torch.manual_seed(1)
    group = torch.tensor([2, 0, 2, 2, 2, 2, 2, 1, 2])  # one large group: padding ratio 3 > 1.5
    shared = SharedPrefix.build(group, 4, 3)
    assert shared.padding_ratio > 1.5
    x, mats = torch.randn(9, 2, 1, 5), torch.randn(3, 2, 5, 4)
    ref = torch.stack([x[i] @ mats[g] for i, g in enumerate(group.tolist())])
    torch.testing.assert_close(grouped_matmul(x, mats, shared), ref)
    even = SharedPrefix.build(torch.tensor([0, 1, 1, 0]), 4, 2)  # ratio 1: the padded path
    assert even.padding_ratio == 1.0
    torch.testing.assert_close(grouped_matmul(x[:4], mats[:2], even),
                               torch.stack([x[i] @ mats[g] for i, g in enumerate([0, 1, 1, 0])]))


def test_one_row_per_prompt_reads_its_prompt_in_place_after_compaction():
    """Greedy rows left one per prompt (the other rows of each prompt finished): a compaction moves the prompts'
    keys with their rows once, so the per-step product needs no gather, and gives exactly what the gather gave."""
    from reachlens.engine.kv_cache import SlotKVCache, grouped_matmul

    torch.manual_seed(2)
    cache = SlotKVCache(route=(0,), max_len=8)
    cache.enter(0)
    cache.append(torch.randn(4, 2, 3, 5), torch.randn(4, 2, 3, 5), 0)
    cache.commit()
    old_k = cache._keys[0][:, :, :3].clone()
    cache.share(torch.tensor([0, 1, 2, 3, 0]))  # prompt 0 has two rows: its keys are shared
    assert not cache.shared.identity and cache.shared.length == 3
    cache.select_rows(torch.tensor([3, 1, 2]))  # rows 0 and 4 finished, the rest reordered
    assert cache.shared.identity and cache.shared.n_groups == 3
    assert torch.equal(cache.prefix(0)[0], old_k[[3, 1, 2]])
    x = torch.randn(3, 2, 1, 5)
    gathered = SharedPrefix.build(torch.tensor([3, 1, 2]), 3, 4)  # the layout before: a gather per step
    assert not gathered.identity
    assert torch.equal(grouped_matmul(x, cache.prefix(0)[0].mT, cache.shared),
                       grouped_matmul(x, old_k.mT, gathered))
    assert not SharedPrefix.build(torch.tensor([1, 0]), 3, 2).identity  # a permutation is not the identity


def test_rows_that_each_continue_their_own_prompt_keep_it_in_their_own_buffer():
    """share(arange): nothing to share, so each row's prompt keys open its own buffer (the prompts' part is empty);
    attention over that one buffer equals attention over the prompt and generated parts read separately (and a plain
    softmax over the concatenated keys), with the padded prompt positions masked."""
    from reachlens.engine.fast_attention import cascade_attention
    from reachlens.engine.kv_cache import _GROW, SlotKVCache

    torch.manual_seed(3)
    b, h, p, d = 3, 2, 5, 4
    k0, v0 = torch.randn(b, h, p, d), torch.randn(b, h, p, d)
    merged, split = SlotKVCache(route=(0,), max_len=40), SlotKVCache(route=(0,), max_len=40)
    for c, extra in ((merged, 0), (split, 1)):  # split: one more prompt, no row on it: the prompt part is read apart
        c.enter(0)
        c.append(torch.cat([k0, torch.randn(extra, h, p, d)]), torch.cat([v0, torch.randn(extra, h, p, d)]), 0)
        c.commit()
    merged.share(torch.arange(b), forks=False)
    split.share(torch.arange(b), forks=False)
    assert not split.shared.identity and split.shared.length == p
    forking = SlotKVCache(route=(0,), max_len=40)  # rows that may fork keep the prompt part apart (a fork copies a row)
    forking.enter(0)
    forking.append(k0, v0, 0)
    forking.commit()
    forking.share(torch.arange(b))
    assert forking.shared.length == p and forking.prefix(0)[0].shape[2] == p
    assert merged.shared.identity and merged.shared.length == 0 and merged.prefix(0)[0].shape[2] == 0
    room = merged._keys[0].shape[2]
    assert room % _GROW == 0 and torch.equal(merged._keys[0][:, :, :p], k0)
    assert not merged._keys[0][:, :, p:].any()
    valid = torch.ones(b, p + 20, dtype=torch.bool)
    valid[0, :2] = False  # row 0's prompt is left-padded by two positions
    keys, values = [k0], [v0]
    for step in range(20):  # across two growths of the row buffers
        k, v, q = torch.randn(b, h, 1, d), torch.randn(b, h, 1, d), torch.randn(b, h, 1, d)
        keys.append(k)
        values.append(v)
        mask = valid[:, None, None, : p + step + 1]
        outs = []
        for c in (merged, split):
            c.enter(0)
            c.append(k, v, 0)
            *own_kv, own = c.own_padded(0)
            outs.append(cascade_attention(q, *c.prefix(0), *own_kv, c.row_shared, mask, d**-0.5, own=own))
            c.commit()
        scores = (q @ torch.cat(keys, 2).mT * d**-0.5).masked_fill(~mask, torch.finfo(torch.float32).min)
        ref = torch.softmax(scores, -1) @ torch.cat(values, 2)
        torch.testing.assert_close(outs[0], ref)
        torch.testing.assert_close(outs[0], outs[1])
