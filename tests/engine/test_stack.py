"""The executor: identity route equals the model's own forward; routes and caches are validated."""

from __future__ import annotations

import pytest
import torch

from reachlens.engine import tokenizer_of
from reachlens.engine import LayerStack, SlotKVCache, validate_route
from reachlens.errors import ReachlensError


def test_identity_route_equals_bridge_and_hf_forward(tiny_model, tiny_hf):
    ids = torch.tensor([tokenizer_of(tiny_model)("Q: 12+34=?\nA: 12+34=46")["input_ids"]])
    stack = LayerStack(tiny_model)
    with torch.no_grad():
        ours = stack.forward(ids)
        bridge = tiny_model(ids)
        hf = tiny_hf(ids).logits
    assert (ours - bridge).abs().max().item() < 1e-5
    assert (ours - hf).abs().max().item() < 1e-5


def test_cached_decode_equals_full_forward(tiny_model):
    ids = torch.tensor([tokenizer_of(tiny_model)("Q: 12+34=?\nA: 12+34=46")["input_ids"]])
    stack = LayerStack(tiny_model)
    with torch.no_grad():
        full = stack.forward(ids)
        cache = stack.new_cache(ids.shape[1])
        first = stack.forward(ids[:, :10], cache=cache)
        steps = [stack.forward(ids[:, t : t + 1], cache=cache) for t in range(10, ids.shape[1])]
    cached = torch.cat([first] + steps, dim=1)
    # float32 rounding differs between a 1-row and a many-row attention; logits are O(5) here
    torch.testing.assert_close(cached, full, rtol=1e-5, atol=1e-4)


def test_route_validation_names_the_bad_index():
    with pytest.raises(ReachlensError, match="layer 9 is out of range for a 3-layer model \\(valid: 0-2\\)"):
        validate_route([0, 9], 3)
    with pytest.raises(ReachlensError, match="at least one layer"):
        validate_route([], 3)
    with pytest.raises(ReachlensError, match="not an integer"):
        validate_route([0, 1.5], 3)


def test_cache_refuses_a_layer_the_route_does_not_name():
    cache = SlotKVCache(route=(0, 1, 1), max_len=4)
    cache.enter(1)
    k = torch.zeros(1, 2, 1, 8)
    with pytest.raises(RuntimeError, match="route step 1 should run layer 1, but layer 2"):
        cache.update(k, k, 2)


def test_repeated_layer_gets_its_own_cache_slots():
    cache = SlotKVCache(route=(0, 1, 1), max_len=4)
    a, b = torch.ones(1, 2, 1, 8), 2 * torch.ones(1, 2, 1, 8)
    cache.enter(1)
    cache.update(a, a, 1)
    cache.enter(2)
    k2, _ = cache.update(b, b, 1)
    cache.commit()
    cache.enter(1)
    k1, _ = cache.update(a, a, 1)
    assert torch.equal(k1[:, :, 0], a[:, :, 0]) and torch.equal(k2[:, :, 0], b[:, :, 0])


def test_unsupported_architecture_is_refused():
    class Fake(torch.nn.Module):
        embed = blocks = ln_final = unembed = rotary_emb = None

    with pytest.raises(NotImplementedError, match="model_type None is not supported"):
        LayerStack(Fake())
