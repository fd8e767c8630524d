"""Zero-ablation, steering and unit masks against a hand-built HuggingFace forward; live on every token."""

from __future__ import annotations

import pytest
import torch

from reachlens.engine import LayerStack, Row, generate, tokenizer_of
from reachlens.protocol import Protocol
from reachlens.errors import ReachlensError
from reachlens.interventions import (
    ablated,
    hook_name,
    steering,
    top_units,
    unit_ablation,
    unit_contributions,
    zero_ablation,
)

TEXT = "Q: 12+34-5=?\nA: 12+34=46;46-5=41 #### 41"


def hf_forward(hf, ids, *, zero_mlp=(), zero_attn=(), mlp_add=None, unit_mask=None):
    """Llama forward written out layer by layer with plain HF modules (no TransformerLens).

    ``zero_mlp`` / ``zero_attn``: layers whose MLP / attention output is replaced by zeros;
    ``mlp_add``: ``(layer, vector)`` added to that MLP's output; ``unit_mask``: ``(layer, units)``
    whose hidden activations (the down projection's input) are zeroed.
    """
    m = hf.model
    h = m.embed_tokens(ids)
    n = ids.shape[1]
    pos = torch.arange(n)[None]
    pe = m.rotary_emb(h, pos)
    mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
    for i, layer in enumerate(m.layers):
        a = layer.self_attn(layer.input_layernorm(h), position_embeddings=pe, attention_mask=mask)[0]
        h = h + (torch.zeros_like(a) if i in zero_attn else a)
        x = layer.post_attention_layernorm(h)
        mlp = layer.mlp
        post = mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x)
        if unit_mask is not None and unit_mask[0] == i:
            post[..., unit_mask[1]] = 0
        out = mlp.down_proj(post)
        if i in zero_mlp:
            out = torch.zeros_like(out)
        if mlp_add is not None and mlp_add[0] == i:
            out = out + mlp_add[1]
        h = h + out
    return hf.lm_head(m.norm(h))


@pytest.fixture(scope="module")
def ids(tiny_model):
    return torch.tensor([tokenizer_of(tiny_model)(TEXT)["input_ids"]])


@torch.no_grad()
def test_hand_built_reference_equals_hf(tiny_hf, ids):
    torch.testing.assert_close(hf_forward(tiny_hf, ids), tiny_hf(ids).logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layer", [0, 1, 2])
@torch.no_grad()
def test_zero_mlp_equals_hf_forward_with_mlp_zeroed(tiny_model, tiny_hf, ids, layer):
    stack = LayerStack(tiny_model)
    with tiny_model.hooks(fwd_hooks=zero_ablation(tiny_model, layer, "mlp")):
        ours = stack.forward(ids)
    ref = hf_forward(tiny_hf, ids, zero_mlp={layer})
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-4)
    assert (ref - tiny_hf(ids).logits).abs().max() > 1e-2, "the ablation must change the logits"


@torch.no_grad()
def test_zero_attn_and_whole_layer(tiny_model, tiny_hf, ids):
    stack = LayerStack(tiny_model)
    with tiny_model.hooks(fwd_hooks=zero_ablation(tiny_model, 1, "attn")):
        attn = stack.forward(ids)
    torch.testing.assert_close(attn, hf_forward(tiny_hf, ids, zero_attn={1}), rtol=1e-5, atol=1e-4)
    with ablated(tiny_model, 1, "layer"):
        whole = stack.forward(ids)
    torch.testing.assert_close(whole, hf_forward(tiny_hf, ids, zero_attn={1}, zero_mlp={1}), rtol=1e-5, atol=1e-4)
    assert tuple(n for n, _ in zero_ablation(tiny_model, 1, "layer")) == ("blocks.1.hook_attn_out", "blocks.1.hook_mlp_out")


def hf_greedy_zeroed(hf, tok, prompt, n, layer):
    """HF generate with layer ``layer``'s MLP returning zeros (a module forward hook)."""
    handle = hf.model.layers[layer].mlp.register_forward_hook(lambda mod, inp, out: torch.zeros_like(out))
    try:
        ids = tok(prompt, return_tensors="pt").input_ids
        out = hf.generate(ids, do_sample=False, max_new_tokens=n, min_new_tokens=n, eos_token_id=None,
                          pad_token_id=tok.pad_token_id)
    finally:
        handle.remove()
    return out[0, ids.shape[1]:].tolist()


def test_ablation_is_live_on_every_generated_token(tiny_model, tiny_hf):
    tok = tokenizer_of(tiny_model)
    prompts = ["Q: 12+34=?\nA:", "Q: 7*8-9=?\nA:"]
    params = Protocol.greedy("arith", max_new_tokens=16)
    calls = []

    def count(x, *, hook):
        calls.append(x.shape[1])

    with tiny_model.hooks(fwd_hooks=zero_ablation(tiny_model, 1, "mlp") + [("blocks.1.hook_mlp_out", count)]):
        outs = [generate(tiny_model, [p], [Row(0)], params, stop_at_eos=False)[0] for p in prompts]
    # one prefill (the prompt's length) then one single-token forward per further generated token
    assert calls[0] == len(tok(prompts[0])["input_ids"]) and calls[1:16] == [1] * 15
    for p, o in zip(prompts, outs):
        assert list(o.token_ids) == hf_greedy_zeroed(tiny_hf, tok, p, 16, 1)
    # an ablation of the prompt only would decode like the clean model from the second token on
    clean = [generate(tiny_model, [p], [Row(0)], params, stop_at_eos=False)[0] for p in prompts]
    assert any(c.token_ids != o.token_ids for c, o in zip(clean, outs))


@torch.no_grad()
def test_steering_alpha_zero_changes_nothing(tiny_model, ids):
    stack = LayerStack(tiny_model)
    v = torch.randn(tiny_model.cfg.d_model)
    clean = stack.forward(ids)
    greedy = Protocol.greedy("arith", max_new_tokens=12)
    with tiny_model.hooks(fwd_hooks=steering(tiny_model, 1, v, 0.0)):
        steered = stack.forward(ids)
        gen = generate(tiny_model, ["Q: 12+34=?\nA:"], [Row(0)], greedy, stop_at_eos=False)[0]
    assert torch.equal(clean, steered)
    assert gen.token_ids == generate(tiny_model, ["Q: 12+34=?\nA:"], [Row(0)], greedy, stop_at_eos=False)[0].token_ids


@torch.no_grad()
def test_steering_adds_alpha_v_to_the_mlp_output(tiny_model, tiny_hf, ids):
    v = torch.randn(tiny_model.cfg.d_model)
    v = v / v.norm()
    with tiny_model.hooks(fwd_hooks=steering(tiny_model, 2, v, -3.0)):
        ours = LayerStack(tiny_model).forward(ids)
    torch.testing.assert_close(ours, hf_forward(tiny_hf, ids, mlp_add=(2, -3.0 * v)), rtol=1e-5, atol=1e-4)


@torch.no_grad()
def test_unit_mask_equals_hf_with_hidden_units_zeroed(tiny_model, tiny_hf, ids):
    stack = LayerStack(tiny_model)
    units = [3, 17, 64, 127]
    with tiny_model.hooks(fwd_hooks=unit_ablation(tiny_model, 0, units)):
        ours = stack.forward(ids)
    torch.testing.assert_close(ours, hf_forward(tiny_hf, ids, unit_mask=(0, units)), rtol=1e-5, atol=1e-4)
    with tiny_model.hooks(fwd_hooks=unit_ablation(tiny_model, 0, range(tiny_model.cfg.d_mlp))):
        every = stack.forward(ids)
    with tiny_model.hooks(fwd_hooks=zero_ablation(tiny_model, 0, "mlp")):
        block = stack.forward(ids)
    torch.testing.assert_close(every, block, rtol=1e-5, atol=1e-5)


def test_unit_contributions_sum_to_the_projected_difference():
    w = torch.randn(8, 16)
    delta = torch.randn(16)
    v = torch.randn(8)
    c = unit_contributions(delta, w, v)
    torch.testing.assert_close(c.sum(), (w @ delta) @ v, rtol=1e-5, atol=1e-5)
    assert top_units(torch.tensor([1.0, 3.0, 3.0, -2.0]), 2) == [1, 2]


def test_bad_names_fail_before_running(tiny_model):
    with pytest.raises(ReachlensError, match="layer 3 is out of range for a 3-layer model \\(valid: 0-2\\)"):
        zero_ablation(tiny_model, 3, "mlp")
    with pytest.raises(LookupError, match="unknown site 'mpl'.* components: mlp, attn, layer"):
        zero_ablation(tiny_model, 0, "mpl")
    with pytest.raises(LookupError, match="no hook point 'blocks.0.hook_mlp_outt'; did you mean 'blocks.0.hook_mlp_out'"):
        hook_name(tiny_model, 0, "hook_mlp_outt")
    with pytest.raises(ReachlensError, match="steering vector has shape \\(3,\\)"):
        steering(tiny_model, 0, torch.ones(3), 1.0)
    with pytest.raises(ReachlensError, match="out of range for block 0's MLP"):
        unit_ablation(tiny_model, 0, [128])


def test_sites_components_and_get_act_name_aliases(tiny_model):
    from transformer_lens.utilities.components_utils import get_act_name

    from reachlens.interventions import SITES, sites_of

    assert sites_of("layer") == ("attn_out", "mlp_out") and sites_of("mlp") == ("mlp_out",)
    assert sites_of("attn_out+mlp_out") == sites_of(["attn", "mlp"]) == ("attn_out", "mlp_out")
    # every site is TransformerLens' own name: get_act_name gives the same hook
    for site in SITES:
        assert hook_name(tiny_model, 2, site) == get_act_name(site, 2)
    for alias in ("pre", "post", "query", "key", "value", "attn_logits"):
        assert hook_name(tiny_model, 2, alias) == get_act_name(alias, 2)
    assert hook_name(tiny_model, 0, "mlp.hook_out") == "blocks.0.mlp.hook_out"
    with pytest.raises(ReachlensError, match="names no site"):
        sites_of([])


@pytest.mark.parametrize("layer", [0, 2])
@torch.no_grad()
def test_random_displacement_moves_the_mlp_output_by_its_own_norm(tiny_model, tiny_hf, ids, layer):
    """The silencing null equals an HF forward hook adding |out| * v to the MLP's output (v read off the hook
    by applying it to a basis vector), v is a unit vector, and another seed draws another direction."""
    from reachlens.interventions import random_displacement

    (name, fn), = random_displacement(tiny_model, layer, "mlp", seed=3)
    d = tiny_hf.config.hidden_size
    e = torch.zeros(1, 1, d)
    e[..., 0] = 2.0
    v = ((fn(e, hook=None) - e) / 2.0).reshape(d)
    assert name == f"blocks.{layer}.hook_mlp_out" and abs(float(v.norm()) - 1.0) < 1e-5
    handle = tiny_hf.model.layers[layer].mlp.register_forward_hook(
        lambda mod, inp, out: out + out.norm(dim=-1, keepdim=True) * v)
    try:
        ref = tiny_hf(ids).logits
    finally:
        handle.remove()
    with tiny_model.hooks(fwd_hooks=random_displacement(tiny_model, layer, "mlp", seed=3)):
        ours = LayerStack(tiny_model).forward(ids)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-4)
    (_, other), = random_displacement(tiny_model, layer, "mlp", seed=4)
    assert not torch.allclose(other(e, hook=None), fn(e, hook=None))
