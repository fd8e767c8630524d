"""Norms that skip unhooked hook statistics: bit-identical, and hooks on them still fire."""

from __future__ import annotations

import pytest
import torch

from reachlens.protocol import Protocol
from reachlens.engine import LayerStack, Row, generate, tokenizer_of
from reachlens.engine.fast_norm import fusable_norms, fused_norms
from reachlens.models.testing import make_tiny_model


def decode(max_new_tokens: int, **fields) -> Protocol:
    """The engine's decode spec for these tests: a Protocol (sampled rows at temperature 1.0 unless given)."""
    fields.setdefault("temperature", 1.0)
    return Protocol("test", k=1, max_new_tokens=max_new_tokens, **fields)


def generate_to_length(*args, **kwargs):
    """:func:`generate` with EOS not stopping a row: every decode in these tests runs to its length."""
    return generate(*args, stop_at_eos=False, **kwargs)



@pytest.fixture(scope="module")
def gemma2(tmp_path_factory):
    from reachlens.models import load_model

    return load_model(str(make_tiny_model("gemma2", tmp_path_factory.mktemp("gemma2"))))


@torch.no_grad()
def test_fused_norms_are_bit_identical_to_the_bridge(gemma2):
    ids = torch.tensor([tokenizer_of(gemma2)("Q: 12+34=?\nA: 46")["input_ids"]])
    assert len(fusable_norms(gemma2)) == 2 * 4 + 1  # four norms per Gemma 2 block, and the final one
    assert torch.equal(LayerStack(gemma2, fused=False).forward(ids), gemma2(ids))  # the generic path: exact


@pytest.mark.filterwarnings("ignore:A forward hook edited hook_scale")  # TransformerLens says the edit is live
def test_a_hook_on_the_norm_statistics_takes_the_bridge_path(gemma2):
    seen = []

    def halve(scale, hook):
        seen.append(scale.shape)
        return scale * 2.0  # an edit: the normalised input is halved

    params = decode(4)
    plain = generate_to_length(gemma2, ["Q: 1+2=?\nA:"], [Row(0)], params)[0]
    with gemma2.hooks(fwd_hooks=[("blocks.0.ln1.hook_scale", halve)]):
        edited = generate_to_length(gemma2, ["Q: 1+2=?\nA:"], [Row(0)], params)[0]
    assert len(seen) == 4  # prefill and three decoding steps
    assert edited.logprobs != plain.logprobs


def test_fused_norms_are_removed_after_a_forward(gemma2):
    with fused_norms(gemma2) as n:
        assert n == 9 and all("forward" in m.__dict__ for m in fusable_norms(gemma2))
    assert not any("forward" in m.__dict__ for m in fusable_norms(gemma2))
