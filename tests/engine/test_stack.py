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


def test_something_that_is_not_a_bridge_is_refused():
    class Fake(torch.nn.Module):
        embed = blocks = ln_final = unembed = rotary_emb = None

    with pytest.raises(ReachlensError, match="Fake is not a TransformerLens TransformerBridge"):
        LayerStack(Fake())


@pytest.mark.parametrize("config", ["BertConfig", "T5Config", "RobertaConfig"])
def test_encoder_only_and_encoder_decoder_configs_are_refused(config):
    import transformers

    from reachlens.engine import UnsupportedModelError, check_architecture
    from reachlens.errors import ReachlensError

    refusal = "is an encoder-(only|decoder) model; reachlens runs decoder-only"
    with pytest.raises(UnsupportedModelError, match=refusal) as err:
        check_architecture(getattr(transformers, config)())
    assert isinstance(err.value, ReachlensError) and "\n" not in str(err.value)
    check_architecture(transformers.BertConfig(is_decoder=True))  # BERT set up as a causal decoder runs


def test_a_sliding_slot_hands_attention_only_its_window():
    """Like HuggingFace's sliding cache layers: the last window - 1 cached positions plus the new ones,
    with mask sizes to match (mask index 0 is full attention, slot + 1 that slot)."""
    cache = SlotKVCache(route=(0, 1), max_len=16, windows=(None, 4))
    assert cache.is_sliding == [False, False, True]
    for t in range(6):
        new = torch.full((1, 1, 2 if t == 0 else 1, 8), float(t))
        cache.enter(0)
        full, _ = cache.update(new, new, 0)
        cache.enter(1)
        window, _ = cache.update(new, new, 1)
        q = new.shape[2]
        assert cache.get_mask_sizes(q, 0) == (full.shape[2], 0)
        assert cache.get_mask_sizes(q, 2) == (window.shape[2], cache.length + q - window.shape[2])
        cache.commit()
    assert full.shape[2] == 7 and window.shape[2] == 4  # positions 3-6: three cached and the new one
    assert torch.equal(window[0, 0, :, 0], torch.tensor([2.0, 3.0, 4.0, 5.0]))
    with pytest.raises(RuntimeError, match="cannot share"):
        cache.share(torch.zeros(1, dtype=torch.long))


def test_sliding_layers_get_windows_from_the_config(tmp_path):
    from reachlens.models import load_model
    from reachlens.models.testing import make_tiny_model

    gemma2 = load_model(str(make_tiny_model("gemma2", tmp_path / "g", sliding_window=8)))
    stack = LayerStack(gemma2)
    assert stack.windows == (8, None)  # Gemma 2 alternates sliding and full layers
    assert stack.new_cache(32, route=(1, 0, 0)).windows == (None, 8, 8)
