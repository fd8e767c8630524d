"""A left-padded batch in float64 on the generic path (the family's own layers and masks): every real token's
logits equal plain HuggingFace's forward of that prompt alone, unpadded, in float64. Before, a left-pad query
with no key to attend to made a NaN under the eager kernel, which reached the real tokens through the next
layer's values (0 x NaN); pad queries now see themselves, as on the fused path. Families: a plain causal mask
(llama), sliding-window layers (gemma2; mistral was checked by hand)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from reachlens.engine import tokenizer_of
from reachlens.engine.stack import LayerStack
from reachlens.engine.tokens import encode_prompts
from reachlens.models import load_model
from reachlens.models.testing import make_tiny_model

PROMPTS = ["Q: 12+34=?\nA:", "hello world, a b c d e f"]


@torch.no_grad()
@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_a_left_padded_float64_batch_on_the_generic_path_equals_each_prompt_alone(family, tmp_path):
    folder = make_tiny_model(family, tmp_path)
    model = load_model(str(folder), dtype=torch.float64)
    hf = AutoModelForCausalLM.from_pretrained(str(folder), use_safetensors=True, dtype=torch.float64).eval()
    ids = encode_prompts(tokenizer_of(model), PROMPTS)
    width = max(map(len, ids))
    tokens = torch.tensor([[0] * (width - len(i)) + i for i in ids])
    mask = torch.tensor([[False] * (width - len(i)) + [True] * len(i) for i in ids])
    got = LayerStack(model, fused=False).forward(tokens, attention_mask=mask)
    for row, prompt in enumerate(ids):
        ref = hf(torch.tensor([prompt])).logits[0]
        mine = got[row, width - len(prompt):]  # the family's logits (Gemma's softcapping applied)
        assert not mine.isnan().any()
        torch.testing.assert_close(mine, ref, rtol=1e-4, atol=1e-4)  # the bridge keeps some parts in float32
