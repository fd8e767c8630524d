"""A TransformerLens-named method keeps TransformerLens' meaning (issue 53, finding 1).

Before: ``load_model`` made the bridge's ``to_tokens`` read every text as data (special-token text split into
characters), so ``model.to_tokens(chat)`` on a chat transcript rendered by ``apply_chat_template(tokenize=False)``
gave 57 ids with none special on Qwen2.5-Instruct (HuggingFace: 36 with 5 special), ``to_single_token("<|im_end|>")``
raised and ``to_tokens(to_string(ids)) != ids``; ``model(text)``, ``run_with_cache(text)`` and ``to_str_tokens``
inherited it. Now a plain ``str`` keeps its special tokens (one BOS), and only the prompts reachlens renders (a
``Prompt``, a ``ChatPrompt``) keep the literal rule. References: a fresh ``AutoTokenizer`` on the real tokenizer
files (``../shared/tokenizers``), ``apply_chat_template(tokenize=True)``.
"""

from __future__ import annotations

import json

import pytest
import torch

from reachlens import Protocol
from reachlens.engine.tokens import encode_prompts
from reachlens.tasks import load_task, render_prompts

CHAT = ("qwen2.5-instruct", "llama3-instruct", "gemma3-it")
MESSAGES = [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "What is 3+4?"},
            {"role": "assistant", "content": "7"}, {"role": "user", "content": "And 5+6?"}]
END_OF_TURN = {"qwen2.5-instruct": "<|im_end|>", "llama3-instruct": "<|eot_id|>", "gemma3-it": "<end_of_turn>"}


@pytest.fixture(scope="module")
def loaded(real_checkpoint):
    """``loaded(name)``: (the reachlens model, a fresh AutoTokenizer on the same files), loaded once."""
    from transformers import AutoTokenizer

    from reachlens.models import load_model

    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            folder = real_checkpoint(name)
            cache[name] = load_model(str(folder)), AutoTokenizer.from_pretrained(str(folder))
        return cache[name]

    return get


def _specials(tok) -> set[int]:
    return {i for i, t in tok.added_tokens_decoder.items() if t.special}


@pytest.mark.parametrize("name", CHAT)
def test_to_tokens_of_a_rendered_chat_is_apply_chat_template_s(loaded, name) -> None:
    model, ref = loaded(name)
    text = ref.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    want = list(ref.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False))
    got = model.to_tokens(text)[0].tolist()
    assert got == want
    assert sum(i in _specials(ref) for i in got) >= 8  # the turns' control tokens, as tokens (4 turns opened, closed)
    bos = ref.bos_token_id
    assert bos is None or got.count(bos) <= 1  # one BOS (Llama 3's and Gemma's templates write their own)
    assert model.to_str_tokens(text) == [ref.decode([i]) for i in want]
    assert model.to_tokens(model.to_string(torch.tensor(want)))[0].tolist() == want  # a round trip


@pytest.mark.parametrize("name", CHAT)
def test_to_single_token_of_a_special_token(loaded, name) -> None:
    model, ref = loaded(name)
    token = END_OF_TURN[name]
    assert model.to_single_token(token) == ref.convert_tokens_to_ids(token)


def test_model_of_text_runs_the_special_tokens(loaded) -> None:
    """``model(text)`` and ``run_with_cache(text)`` route through ``to_tokens``: the logits are those of HF's ids."""
    model, ref = loaded("qwen2.5-instruct")
    text = ref.apply_chat_template(MESSAGES[:2], add_generation_prompt=True, tokenize=False)
    ids = torch.tensor([ref(text)["input_ids"]])
    with torch.inference_mode():
        by_text = model(text)
        by_ids = model(ids)
        _, cache = model.run_with_cache(text)
    assert by_text.shape == by_ids.shape and torch.equal(by_text, by_ids)
    assert cache["blocks.0.hook_resid_pre"].shape[1] == ids.shape[1]


def test_a_rendered_prompt_keeps_the_literal_rule(loaded, tmp_path) -> None:
    """A question's special-token text stays text in the prompt reachlens renders, through ``to_tokens`` too."""
    from reachlens.engine.tokens import Prompt

    model, ref = loaded("qwen2.5-instruct")
    path = tmp_path / "test.jsonl"
    path.write_text(json.dumps({"question": "2 apples.<|im_end|>\n<|endoftext|>", "answer": "x\n#### 2"}) + "\n")
    task = load_task("gsm8k", path)
    prompt, = render_prompts(task, Protocol("gsm8k").resolved(task), task.questions)
    assert isinstance(prompt, Prompt)
    ids = model.to_tokens(prompt)[0].tolist()
    assert ids == encode_prompts(ref, [prompt])[0] and not set(ids) & _specials(ref)
    assert ref.decode(ids) == prompt
    assert set(model.to_tokens(str(prompt))[0].tolist()) & _specials(ref)  # the same text as a plain str: TL's
