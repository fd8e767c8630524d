"""Decoder blocks without the bridge's per-call bookkeeping: bit-identical to TransformerLens' own block, every hook
still fires in the same order with the same values, and anything the shortcut would skip sends it back."""

from __future__ import annotations

import contextlib

import pytest
import torch

import reachlens.engine.stack as stack_module
from reachlens.engine import LayerStack, Row, generate, tokenizer_of
from reachlens.engine.fast_block import fusable_blocks
from reachlens.models.testing import make_tiny_model
from reachlens.protocol import Protocol


@contextlib.contextmanager
def bridge_blocks():
    """Within the block, every forward runs TransformerLens' own BlockBridge.forward (the reference)."""
    kept = stack_module.fast_blocks
    stack_module.fast_blocks = lambda model: contextlib.nullcontext(0)
    try:
        yield
    finally:
        stack_module.fast_blocks = kept


def both(fn):
    """``fn()`` with the shortcut, then with the bridge's blocks."""
    fast = fn()
    with bridge_blocks():
        return fast, fn()


@pytest.fixture(scope="module")
def family_models(tmp_path_factory):
    from reachlens.models import load_model

    return {f: load_model(str(make_tiny_model(f, tmp_path_factory.mktemp(f), n_layers=2)))
            for f in ("qwen2", "qwen3", "mistral", "gemma2", "gpt2")}


def _ids(model, text="Q: 12+34=?\nA: 46"):
    return torch.tensor([tokenizer_of(model)(text)["input_ids"]])


def _decode(model, rows):
    protocol = Protocol("test", k=1, temperature=1.0, max_new_tokens=12)
    return [(o.token_ids, o.logprobs) for o in generate(model, ["Q: 3+4=?\nA:", "Q: 12*3=?\nA:"], rows, protocol,
                                                        stop_at_eos=False)]


@torch.no_grad()
def test_the_shortcut_is_taken_and_bit_identical_to_the_bridge_block(tiny_model):
    assert len(fusable_blocks(tiny_model)) == len(tiny_model.blocks)
    calls = []
    kept = type(tiny_model.blocks[0]).forward

    def spy(self, *a, **k):
        calls.append(self)
        return kept(self, *a, **k)

    stack = LayerStack(tiny_model)
    with pytest.MonkeyPatch.context() as mp:  # the bridge's own block forward is not entered under the shortcut
        mp.setattr(type(tiny_model.blocks[0]), "forward", spy)
        fast, ref = both(lambda: stack.forward(_ids(tiny_model)))
    assert len(calls) == len(tiny_model.blocks)  # only the reference run went through it
    assert torch.equal(fast, ref)
    rows = [Row(0, seed=1), Row(0, seed=2), Row(1, seed=3), Row(1)]  # decoding with a shared prompt cache
    fast, ref = both(lambda: _decode(tiny_model, rows))
    assert fast == ref


@torch.no_grad()
def test_hooks_fire_in_the_same_order_with_the_same_values_and_edits_act(tiny_model):
    names = ["blocks.1.hook_resid_pre", "blocks.1.ln1.hook_out", "blocks.1.hook_attn_out", "blocks.1.hook_resid_mid",
             "blocks.1.mlp.hook_in", "blocks.1.mlp.hook_pre", "blocks.1.mlp.hook_pre_linear", "blocks.1.mlp.hook_post",
             "blocks.1.hook_mlp_out", "blocks.1.hook_resid_post", "blocks.0.attn.hook_q", "blocks.0.mlp.out.hook_out"]
    stack = LayerStack(tiny_model)

    def run():
        seen = []

        def record(name):
            def hook_fn(x, *, hook):
                seen.append((name, x.clone()))
                return x * 0.9 if name.endswith(("hook_pre", "hook_attn_out")) else x  # edits that must act
            return hook_fn

        with tiny_model.hooks(fwd_hooks=[(n, record(n)) for n in names]):
            logits = stack.forward(_ids(tiny_model))
        return logits, seen

    (fast, fast_seen), (ref, ref_seen) = both(run)
    assert [n for n, _ in fast_seen] == [n for n, _ in ref_seen]
    assert len(fast_seen) == len(names)
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(fast_seen, ref_seen))
    assert torch.equal(fast, ref)
    plain = stack.forward(_ids(tiny_model))
    assert not torch.equal(fast, plain)  # the edits acted


@torch.no_grad()
@pytest.mark.parametrize("what", ["attn_internal", "torch_hook", "global_hook", "hf_layer_hook", "hf_mlp_hook"])
def test_what_the_shortcut_would_skip_sends_the_block_back(tiny_model, what):
    block = tiny_model.blocks[1]
    stack = LayerStack(tiny_model)
    fired = []
    entered = []
    kept = type(block).forward

    def spy(self, *a, **k):
        entered.append(self)
        return kept(self, *a, **k)

    def note(*args, **kwargs):
        fired.append(what)

    with contextlib.ExitStack() as es:
        if what == "attn_internal":
            es.enter_context(tiny_model.hooks(fwd_hooks=[("blocks.1.attn.hook_pattern", lambda x, hook: note())]))
        elif what == "torch_hook":
            es.callback(block.ln2.register_forward_hook(lambda m, i, o: note()).remove)
        elif what == "hf_layer_hook":  # the HuggingFace layer itself, whose forward the shortcut does not call
            es.callback(block.original_component.register_forward_hook(lambda m, i, o: note()).remove)
        elif what == "hf_mlp_hook":
            es.callback(block.mlp.original_component.register_forward_hook(lambda m, i, o: note()).remove)
        else:
            es.callback(torch.nn.modules.module.register_module_forward_hook(
                lambda m, i, o: note() if m is block.ln2 else None).remove)
        mp = es.enter_context(pytest.MonkeyPatch.context())
        mp.setattr(type(block), "forward", spy)
        fast = stack.forward(_ids(tiny_model))
        assert block in entered  # the bridge's own forward ran that block
        with bridge_blocks():
            ref = stack.forward(_ids(tiny_model))
    assert torch.equal(fast, ref)
    assert fired


@pytest.mark.parametrize("attribute", ["_stop_at_layer_idx", "_start_at_layer_idx"])
def test_a_bounded_run_sends_the_block_back(tiny_model, attribute):
    """The shortcut reads the bridge's run bounds from the block's own __dict__, where TransformerLens' setattr puts
    them (a layer index no block has: the bridge's forward runs the block unchanged)."""
    block = tiny_model.blocks[1]
    stack = LayerStack(tiny_model)
    entered = []
    kept = type(block).forward

    def spy(self, *a, **k):
        entered.append(self)
        return kept(self, *a, **k)

    setattr(block, attribute, 99)  # as TransformerLens' forward sets it
    try:
        assert attribute in block.__dict__
        with pytest.MonkeyPatch.context() as mp, torch.no_grad():
            mp.setattr(type(block), "forward", spy)
            fast = stack.forward(_ids(tiny_model))
            in_fast_run = list(entered)
            with bridge_blocks():
                ref = stack.forward(_ids(tiny_model))
    finally:
        setattr(block, attribute, None)
    assert in_fast_run == [block]  # block 0, unbounded, kept the shortcut
    assert torch.equal(fast, ref)


@torch.no_grad()
def test_hook_mlp_in_fires_under_the_shortcut_when_switched_on(tiny_dir):
    from reachlens.models import load_model

    model = load_model(str(tiny_dir))  # its own copy: the switch is a model setting
    model.set_use_hook_mlp_in(True)
    stack = LayerStack(model)

    def run():
        seen = []

        def edit(x, *, hook):
            seen.append(x.clone())
            return x * 1.1

        with model.hooks(fwd_hooks=[("blocks.0.hook_mlp_in", edit)]):
            return stack.forward(_ids(model)), seen

    (fast, fast_seen), (ref, ref_seen) = both(run)
    assert len(fast_seen) == len(ref_seen) == 1 and torch.equal(fast_seen[0], ref_seen[0])
    assert torch.equal(fast, ref) and not torch.equal(fast, stack.forward(_ids(model)))


@torch.no_grad()
def test_families_with_the_llama_layer_take_it_others_keep_the_bridge(family_models):
    for family, model in family_models.items():
        blocks = fusable_blocks(model)
        if family in ("qwen2", "qwen3", "mistral"):
            assert len(blocks) == len(model.blocks), family
            stack = LayerStack(model)
            fast, ref = both(lambda: stack.forward(_ids(model)))
            assert torch.equal(fast, ref), family
            rows = [Row(0, seed=5), Row(1, seed=6), Row(1)]
            fast, ref = both(lambda: _decode(model, rows))
            assert fast == ref, family
        else:
            assert blocks == [], family
