"""Components called without their wrappers: the same outputs, and every hook still acts."""

from __future__ import annotations

import torch

from reachlens.engine import Row, generate
from reachlens.engine.fast_call import bare_call, embed
from reachlens.protocol import Protocol

PROMPTS = ["Q: 12+34=?\nA:", "hello"]


def greedy(model, **kwargs):
    return [o.token_ids for o in generate(model, PROMPTS, [Row(0), Row(1)], Protocol("test", k=1, max_new_tokens=6),
                                          stop_at_eos=False, **kwargs)]


def test_embed_equals_the_bridges_call_and_a_hook_on_it_acts(tiny_model):
    ids = torch.tensor([[1, 5, 9], [2, 2, 7]])
    assert torch.equal(embed(tiny_model.embed, ids), tiny_model.embed(ids))
    seen = []
    with tiny_model.hooks(fwd_hooks=[("hook_embed", lambda x, hook: seen.append(1) or x * 0)]):
        assert torch.equal(embed(tiny_model.embed, ids), torch.zeros_like(tiny_model.embed(ids))) and seen
        edited = greedy(tiny_model)
    assert edited != greedy(tiny_model)


def test_a_pytorch_hook_on_a_block_or_a_global_one_still_fires(tiny_model):
    block = tiny_model.blocks[1]
    calls = []
    handle = block.register_forward_hook(lambda m, args, out: calls.append("block"))
    try:
        greedy(tiny_model)
    finally:
        handle.remove()
    assert len(calls) == 6  # the prefill and five decoding steps (the sixth token needs no forward)
    seen = []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda m, args, out: seen.append(type(m).__name__) if m is tiny_model.rotary_emb else None)
    try:
        assert torch.equal(bare_call(tiny_model.rotary_emb, torch.zeros(1, 2, 64), torch.arange(2)[None])[0],
                           tiny_model.rotary_emb(torch.zeros(1, 2, 64), torch.arange(2)[None])[0])
    finally:
        handle.remove()
    assert len(seen) == 2  # both calls went through the module call (a global hook is attached)
