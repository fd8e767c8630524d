"""The vLLM backend stops where the engine stops and decodes the engine's chat prompts.

Without vLLM: a vLLM output is cut where the engine would stop it (a stop that is a special token's text on that
token's id, a stop string split over byte tokens on its last byte, EOS), whatever vLLM's own text-based check
did; the reference is the first prefix whose decoded text (special tokens kept) holds the stop, found by
``AutoTokenizer.decode`` step by step. With vLLM (run isolated, as tests/scale/test_vllm_backend.py): a chat
audit's greedy deployment on vLLM is the engine's (same prompt ids, same text, same stop step). Without the vLLM
venv that test skips with its reason, and under ``CI=true`` the skip is a failure.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

from reachlens.engine.backends.vllm_model import VLLMModel
from reachlens.engine.stopping import StopChecker

SPECIAL = {"qwen2.5-instruct": "<|im_start|>", "llama3-instruct": "<|start_header_id|>", "gemma3-it": "<start_of_turn>"}
FOUR_BYTE = "𓀀"  # U+13000: split over byte tokens by each of these tokenizers


def _fake_vllm(tokenizer) -> VLLMModel:
    """A VLLMModel without a worker: what turns vLLM's outputs into completions, on ``tokenizer``."""
    model = object.__new__(VLLMModel)
    model.tokenizer, model._eos = tokenizer, {tokenizer.eos_token_id} - {None}
    return model


def _reference_stop(tok, tokens: list[int], stop: str) -> int:
    """The first index whose prefix, decoded with its special tokens, holds ``stop``."""
    return next(i for i in range(len(tokens)) if stop in tok.decode(tokens[:i + 1], skip_special_tokens=False))


@pytest.mark.parametrize("name", sorted(SPECIAL))
@pytest.mark.parametrize("which", ["special", "four_byte"])
def test_a_vllm_output_is_cut_where_the_engine_stops(shared_tokenizers, name, which):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(shared_tokenizers / name))
    stop = SPECIAL[name] if which == "special" else FOUR_BYTE
    ids = lambda text: tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]  # noqa: E731
    if which == "special":
        tokens = [*ids("Sum: 12"), tok.convert_tokens_to_ids(stop), *ids("user more")]
    else:
        tokens = ids(f"Sum: 12 {FOUR_BYTE} and more")
        assert len(ids(FOUR_BYTE)) > 1  # split over byte tokens: the stop completes on the last of them
    end = _reference_stop(tok, tokens, stop)
    model = _fake_vllm(tok)
    # vLLM ran on to its length limit: its text check never saw the stop (special tokens skipped) or saw it late
    out = {"token_ids": tokens, "logprobs": [-0.5] * len(tokens), "finish_reason": "length", "stop_reason": None}
    got = model._completion(StopChecker(tok, (stop,), model._eos), out)
    assert list(got.token_ids) == tokens[:end + 1] and got.finish_reason == "stop"
    assert got.text == "Sum: 12" + ("" if which == "special" else " ") and len(got.logprobs) == end + 1


def test_a_vllm_output_ending_in_eos_is_the_engine_s(shared_tokenizers):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(shared_tokenizers / "qwen2.5-instruct"))
    tokens = [*tok("42", add_special_tokens=False)["input_ids"], tok.eos_token_id]
    model = _fake_vllm(tok)
    out = {"token_ids": tokens, "logprobs": [-0.1] * len(tokens), "finish_reason": "stop", "stop_reason": None}
    got = model._completion(StopChecker(tok, ("\n",), model._eos), out)
    assert got.text == "42" and got.finish_reason == "eos" and list(got.token_ids) == tokens


DRIVER = r"""
import json, sys
import reachlens
from reachlens import Protocol
from reachlens.engine.tokens import encode_prompts
from reachlens.models import load_vllm
from reachlens.runner import deploy_and_grade
from reachlens.tasks import render_prompts
from reachlens.tasks.chat import bind_chat
folder, stops = sys.argv[1], json.loads(sys.argv[2])
model = load_vllm(folder)
task = reachlens.load_task("arith", n=4)
protocol = bind_chat(Protocol.greedy("arith", max_new_tokens=24, prompt_format="chat", system="Be brief.",
                                     stop=tuple(stops), backend="vllm").resolved(task), model.tokenizer)
ids = encode_prompts(model.tokenizer, render_prompts(task, protocol, task.questions, model.tokenizer))
out = deploy_and_grade(model, task, protocol)
print(json.dumps({"ids": ids, "text": out["deployed_text"].tolist(), "finish": out["deployed_finish"].tolist()}))
model.close()
"""


def test_vllm_chat_greedy_equals_the_engine_s(isolated, vllm_python, shared_tokenizers, tmp_path):
    import reachlens
    from reachlens import Protocol
    from reachlens.engine.tokens import encode_prompts
    from reachlens.runner import deploy_and_grade
    from reachlens.tasks import render_prompts
    from reachlens.tasks.chat import bind_chat

    from reachlens.models.testing import make_tiny_from_folder

    # the real Qwen2.5 tokenizer and template; two heads of 32 (vLLM's CPU attention refuses the tiny config's 16)
    folder = make_tiny_from_folder(shared_tokenizers / "qwen2.5-instruct", tmp_path / "qwen", init_std=0.3,
                                   num_attention_heads=2, num_key_value_heads=1)
    stops = ["<|im_start|>", FOUR_BYTE, "\n\n"]
    run = isolated([sys.executable, "-c", DRIVER, str(folder), json.dumps(stops)],
                   Path(tempfile.mkdtemp(prefix="rl-vllm-chat-")), timeout=1200)
    assert run.returncode == 0, run.stderr[-4000:]
    theirs = json.loads(run.stdout.strip().splitlines()[-1])
    model = reachlens.load_model(str(folder))
    task = reachlens.load_task("arith", n=4)
    protocol = bind_chat(Protocol.greedy("arith", max_new_tokens=24, prompt_format="chat", system="Be brief.",
                                         stop=tuple(stops)).resolved(task), model.tokenizer)
    assert encode_prompts(model.tokenizer, render_prompts(task, protocol, task.questions, model.tokenizer)) == theirs["ids"]
    mine = deploy_and_grade(model, task, protocol)
    assert mine["deployed_text"].tolist() == theirs["text"]
    assert mine["deployed_finish"].tolist() == theirs["finish"]
