"""Decoding without prefix sharing: one batch entry per live sample, the prompt prefilled once.

``share_prefixes=False`` with no user hook prefills each distinct prompt once, fans its cache out to its rows at
the first step and drops finished rows from the batch; with a user hook attached (``keep_rows``) every row keeps its
own entry from a prefill of its own to the end of the chunk.
Both are checked against references computed another way: HuggingFace ``generate`` for greedy rows, and for sampled
rows the other layout (every row its own entry throughout), which computes each row on its own.
"""

from __future__ import annotations

import pytest
import torch

from reachlens.engine import Row, generate, row_agnostic, row_seed, tokenizer_of
from reachlens.engine.generate import _generate_chunk, tokenize_prompts
from reachlens.engine.stack import LayerStack
from reachlens.engine.stopping import StopChecker
from reachlens.protocol import Protocol

PROMPTS = ["Q: 12+34=?\nA:", "Q: 5-3+2=?\nA:", "hello world", "Q: 7*8-9+10-11=?\nA:"]
HOOK = "blocks.0.hook_mlp_out"


def hf_greedy(hf, tok, prompt: str, n: int) -> list[int]:
    ids = tok(prompt, return_tensors="pt").input_ids
    out = hf.generate(ids, do_sample=False, max_new_tokens=n, min_new_tokens=n, eos_token_id=None,
                      pad_token_id=tok.pad_token_id)
    return out[0, ids.shape[1]:].tolist()


def _chunk(model, rows, protocol, stopper, *, keep_rows: bool, fused: bool = True):
    """One chunk decoded without sharing, and the batch size of each forward (a row-agnostic hook counts them)."""
    sizes: list[int] = []

    @row_agnostic
    def count(x, hook):
        sizes.append(int(x.shape[0]))

    stack = LayerStack(model, fused=fused)
    ids = tokenize_prompts(tokenizer_of(model), PROMPTS)
    with model.hooks(fwd_hooks=[(HOOK, count)]):
        outs = _generate_chunk(stack, ids, rows, protocol, stopper, False, keep_rows=keep_rows)
    return outs, sizes


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "generic"])
def test_live_rows_only_equal_every_row_kept_and_the_prompt_is_prefilled_once(tiny_model, fused):
    tok = tokenizer_of(tiny_model)
    eos = tok.convert_tokens_to_ids("5")  # a common digit as "EOS": rows finish at different steps
    protocol = Protocol("test", k=1, temperature=1.3, top_p=0.95, max_new_tokens=16, stop=("=",))
    rows = [Row(p) for p in range(len(PROMPTS))]
    rows += [Row(p, row_seed(2, f"q{p}", j)) for p in range(len(PROMPTS)) for j in range(12)]
    stopper = StopChecker(tok, ("=",), {eos})
    live, live_sizes = _chunk(tiny_model, rows, protocol, stopper, keep_rows=False, fused=fused)
    kept, kept_sizes = _chunk(tiny_model, rows, protocol, stopper, keep_rows=True, fused=fused)
    assert [o.token_ids for o in live] == [o.token_ids for o in kept]
    assert [o.finish_reason for o in live] == [o.finish_reason for o in kept]
    assert [o.text for o in live] == [o.text for o in kept]
    for a, b in zip(live, kept):
        assert a.logprobs == pytest.approx(b.logprobs, abs=5e-5)
    assert {o.finish_reason for o in live} == {"eos", "stop", "length"}
    # kept: every forward has a row per sample; live: the prompts once, then one entry per live row
    assert set(kept_sizes) == {len(rows)}
    assert live_sizes[0] == len(PROMPTS)
    alive = [sum(len(o.token_ids) > step for o in live) for step in range(1, len(live_sizes))]
    assert live_sizes[1:] == alive and alive[0] > 2 * len(PROMPTS) and alive[-1] < 0.8 * len(rows)


def test_without_sharing_greedy_rows_equal_hf_generate(tiny_model, tiny_hf):
    """Two greedy rows per prompt, padded prompts: without sharing they fork at the first step and each is its own
    entry; every row's tokens equal HF's greedy ones."""
    tok = tokenizer_of(tiny_model)
    protocol = Protocol("test", k=1, max_new_tokens=14)
    rows = [Row(p) for p in range(len(PROMPTS)) for _ in range(2)]
    outs = generate(tiny_model, PROMPTS, rows, protocol, stop_at_eos=False, share_prefixes=False)
    for r, o in zip(rows, outs):
        assert list(o.token_ids) == hf_greedy(tiny_hf, tok, PROMPTS[r.prompt], 14)


def test_a_user_hook_keeps_one_entry_per_row_and_greedy_equals_hf(tiny_model, tiny_hf):
    """A hook that is not row-agnostic keeps every row's entry to the end (it sees as many rows as it was given in
    every forward, finished or not); the greedy text it sees decoded equals HF's."""
    tok = tokenizer_of(tiny_model)
    sizes: list[int] = []

    def record(x, hook):
        sizes.append(int(x.shape[0]))

    rows = [Row(p) for p in range(len(PROMPTS))]
    with tiny_model.hooks(fwd_hooks=[(HOOK, record)]):
        outs = generate(tiny_model, PROMPTS, rows, Protocol("test", k=1, max_new_tokens=12), stop_at_eos=False,
                        max_batch_rows=len(rows))
    assert sizes == [len(rows)] * 12
    for p, o in zip(PROMPTS, outs):
        assert list(o.token_ids) == hf_greedy(tiny_hf, tok, p, 12)


def test_the_seeded_stream_is_the_shared_one(tiny_model):
    """A row's sample depends on (seed, step) and its own logits only: without sharing, the rows' tokens are those
    of the shared decoder (which computes each distinct prefix once)."""
    protocol = Protocol("test", k=1, temperature=1.0, max_new_tokens=12)
    rows = [Row(p % 2, row_seed(5, "q", j)) for p in range(2) for j in range(10)]
    shared = generate(tiny_model, PROMPTS[:2], rows, protocol, stop_at_eos=False, share_prefixes=True)
    alone = generate(tiny_model, PROMPTS[:2], rows, protocol, stop_at_eos=False, share_prefixes=False)
    assert [o.token_ids for o in alone] == [o.token_ids for o in shared]
    assert len({o.token_ids for o in alone}) > 10
    torch.testing.assert_close(torch.tensor([o.mean_logprob for o in alone]),
                               torch.tensor([o.mean_logprob for o in shared]), atol=5e-5, rtol=0)
