"""Linear maps through oneDNN (:mod:`reachlens.engine.fast_linear`) agree with HuggingFace's products to
float32 rounding, keep the bridge's hooks, and are used only where they qualify."""

from __future__ import annotations

import pytest
import torch

from reachlens.engine import Row, fast_linear, generate, tokenizer_of
from reachlens.engine.stack import LayerStack
from reachlens.protocol import Protocol

PROMPTS = ["Q: 12+34=?\nA:", "Q: 5-3+2=?\nA:", "hello world"]


@pytest.fixture
def onednn_calls(monkeypatch):
    """Every linear map qualifies (:data:`~reachlens.engine.fast_linear.LARGE` and ``WIDE`` = 0); counts the
    oneDNN products."""
    calls = []
    real = fast_linear._onednn_linear

    def counted(*args):
        calls.append(args[0].shape)
        return real(*args)

    monkeypatch.setattr(fast_linear, "LARGE", 0)
    monkeypatch.setattr(fast_linear, "WIDE", 0)
    monkeypatch.setattr(fast_linear, "_onednn_linear", counted)
    return calls


def test_onednn_products_agree_with_hf_to_float32_rounding_and_keep_the_hooks(tiny_dir, tiny_hf, onednn_calls):
    from reachlens.models import load_model

    model = load_model(str(tiny_dir))  # a model of its own: the maps it qualifies are remembered on it
    found = fast_linear.large_linears(model)
    assert model.unembed.original_component in found
    assert model.blocks[0].mlp.original_component.up_proj.original_component in found
    tok = tokenizer_of(model)
    ids = tok(PROMPTS[0], return_tensors="pt").input_ids
    with torch.inference_mode():
        ours = LayerStack(model).forward(ids)
        ref = tiny_hf(ids).logits
    assert len(onednn_calls) == len(found), "each map's product goes through oneDNN once a forward"
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)

    greedy = Protocol.greedy("test", max_new_tokens=20)
    for p in PROMPTS:
        got = generate(model, [p], [Row(0)], greedy, stop_at_eos=False)[0]
        pids = tok(p, return_tensors="pt").input_ids
        want = tiny_hf.generate(pids, do_sample=False, max_new_tokens=20, min_new_tokens=20, eos_token_id=None,
                                pad_token_id=tok.pad_token_id)[0, pids.shape[1]:].tolist()
        assert list(got.token_ids) == want

    target = tok.convert_tokens_to_ids("7")

    def push(logits, hook):
        logits[..., target] += 1e4
        return logits

    with model.hooks(fwd_hooks=[("unembed.hook_out", push)]):
        pushed = generate(model, [PROMPTS[2]], [Row(0)], greedy, stop_at_eos=False)[0]
    assert set(pushed.token_ids) == {target}, "a hook on the logits must still act"


def test_small_maps_and_recorded_gradients_keep_huggingfaces_product(tiny_dir, monkeypatch):
    from reachlens.models import load_model

    assert fast_linear.large_linears(load_model(str(tiny_dir))) == []  # d_model 64: no map qualifies
    monkeypatch.setattr(fast_linear, "LARGE", 0)
    monkeypatch.setattr(fast_linear, "WIDE", 0)
    fresh = load_model(str(tiny_dir))
    calls = []
    monkeypatch.setattr(fast_linear, "_onednn_linear", lambda *a: calls.append(1))
    ids = tokenizer_of(fresh)(PROMPTS[0], return_tensors="pt").input_ids
    with torch.enable_grad():
        LayerStack(fresh).forward(ids)
    assert not calls, "with a gradient recorded each map must be HuggingFace's own product"
