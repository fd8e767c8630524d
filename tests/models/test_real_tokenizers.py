"""Real checkpoints as they are deployed, on the real tokenizers of five families (``../shared/tokenizers``):
chat-format prompts are ``apply_chat_template``'s ids (one BOS), greedy text is HuggingFace's, stop strings
fire on the step that completes them whatever the tokenization, the tokenizer keeps its shipped special
tokens, an empty context is scored after BOS as lm-eval does, and the stop table is built once.

Each family's model is tiny and random (2 layers, d=64, the real vocabulary size), built once per session
from the folder's ``config.json`` with a large init (varied, multi-byte greedy text). Every reference is
computed another way: a fresh ``AutoTokenizer`` on the same files, ``AutoModelForCausalLM`` for logits
and ``generate``, and lm-eval's ``prefix_token_id`` rule written out.
"""

from __future__ import annotations

import json

import pytest
import torch

from reachlens import Protocol
from reachlens.engine import Row, current_rows, encode, encode_pair, generate, loglikelihoods
from reachlens.engine import stopping
from reachlens.tasks import load_task, render_prompts
from reachlens.tasks.chat import bind_chat

FAMILIES = ("qwen2.5-instruct", "qwen2.5-base", "llama3-instruct", "gemma3-it", "olmo2", "gpt2")
CHAT_FAMILIES = FAMILIES[:-1]
SPECIAL_STOP = {  # a special token of each family that a stop string names (not its EOS where there is another)
    "qwen2.5-instruct": "<|im_start|>", "qwen2.5-base": "<|im_end|>", "llama3-instruct": "<|start_header_id|>",
    "gemma3-it": "<start_of_turn>", "olmo2": "<|pad|>", "gpt2": "<|endoftext|>",
}
FOUR_BYTE = "𓀀"  # U+13000: two to four tokens on every one of these tokenizers


class Family:
    """One family's tiny model: the reachlens bridge, the plain HF model and a fresh tokenizer."""

    def __init__(self, name: str, folder) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from reachlens.models import load_model

        self.name, self.folder = name, folder
        self.model = load_model(str(folder))
        self.hf = AutoModelForCausalLM.from_pretrained(str(folder), use_safetensors=True).eval()
        self.ref = AutoTokenizer.from_pretrained(str(folder))  # the reference: loaded as a user would
        gen = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
        self.eos = {gen} if isinstance(gen, int) else set(gen)


@pytest.fixture(scope="session")
def families(real_checkpoint):
    """``families(name)``: that family's :class:`Family`, loaded on first use and kept for the session."""
    loaded: dict[str, Family] = {}

    def get(name: str) -> Family:
        if name not in loaded:
            loaded[name] = Family(name, real_checkpoint(name))
        return loaded[name]

    return get


def _ids(encoding) -> list[int]:
    return list(encoding["input_ids"] if hasattr(encoding, "keys") else encoding)


@pytest.mark.parametrize("name", CHAT_FAMILIES)
def test_chat_prompt_ids_are_apply_chat_template_s_with_one_bos(families, name):
    fam = families(name)
    task = load_task("arith", n=2)
    for system in (None, "Answer with a number."):
        protocol = bind_chat(Protocol("arith", prompt_format="chat", system=system).resolved(task), fam.model.tokenizer)
        prompts = render_prompts(task, protocol, task.questions, fam.model.tokenizer)
        head = [] if system is None else [{"role": "system", "content": system}]
        for q, prompt, ids in zip(task.questions, prompts, encode(fam.model, prompts)):
            messages = [*head, {"role": "user", "content": task.prompt(q)}]
            ref = _ids(fam.ref.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
            assert ids == ref
            assert fam.model.to_tokens(prompt)[0].tolist() == ref
            assert encode_pair(fam.model.tokenizer, prompt, "7")[0][:2] == ref[:2]  # a scored one: one BOS too
            bos = fam.ref.bos_token_id
            assert bos is None or ids[:2] != [bos, bos]


@pytest.mark.parametrize("name", FAMILIES)
def test_plain_prompt_ids_and_shipped_special_tokens(families, name):
    fam = families(name)
    text = "Question: what is 3+4?\nAnswer:"
    assert encode(fam.model, [text])[0] == fam.model.to_tokens(text)[0].tolist() == _ids(fam.ref(text))
    tok = fam.model.tokenizer
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (
        fam.ref.bos_token_id, fam.ref.eos_token_id, fam.ref.pad_token_id)
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == (fam.ref.bos_token, fam.ref.eos_token, fam.ref.pad_token)


@pytest.mark.parametrize("name", FAMILIES)
def test_deployed_greedy_text_is_hf_greedy(families, name):
    fam = families(name)
    task = load_task("arith", n=2)
    fmt = "chat" if name in CHAT_FAMILIES else "default"
    protocol = bind_chat(Protocol.greedy("arith", max_new_tokens=10, prompt_format=fmt, stop=()).resolved(task),
                         fam.model.tokenizer)
    prompts = render_prompts(task, protocol, task.questions, fam.model.tokenizer)
    outs = generate(fam.model, prompts, [Row(i) for i in range(len(prompts))], protocol)
    for prompt, out in zip(prompts, outs):
        ids = torch.tensor([fam.model.to_tokens(prompt)[0].tolist()])
        with torch.inference_mode():
            ref = fam.hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=10,
                                  pad_token_id=fam.ref.pad_token_id or 0)[0, ids.shape[1]:].tolist()
        end = next((i for i, t in enumerate(ref) if t in fam.eos), None)
        new = ref if end is None else ref[: end + 1]
        assert list(out.token_ids) == new
        assert out.finish_reason == ("length" if end is None else "eos")
        assert out.text == fam.ref.decode(new if end is None else new[:-1], skip_special_tokens=True)
    assert any(len(set(o.token_ids)) > 3 for o in outs)  # varied text, not one repeated token


def _forced(fam: Family, forced: list[int], stop: tuple[str, ...], *, stop_at_eos: bool = True):
    """Greedy decode with the logits forced to ``forced`` (a hook on ``unembed.hook_out``), one row."""

    def force(logits, hook):
        step = current_rows().step + 1  # the prefill (-1) chooses token 0
        if step < len(forced):
            logits[:, -1, :] = -1e4
            logits[:, -1, forced[step]] = 1e4
        return logits

    protocol = Protocol.greedy("arith", max_new_tokens=len(forced) + 2, stop=stop)
    with fam.model.hooks(fwd_hooks=[("unembed.hook_out", force)]):
        return generate(fam.model, ["Say something:"], [Row(0)], protocol, stop_at_eos=stop_at_eos)[0]


def _completing_step(fam: Family, ids: list[int], stop: str) -> int:
    """The first step whose prefix decodes (special tokens kept) to a text containing ``stop``."""
    return next(k for k in range(len(ids)) if stop in fam.ref.decode(ids[: k + 1], skip_special_tokens=False))


@pytest.mark.parametrize("name", FAMILIES)
def test_stop_made_of_a_four_byte_character_fires_on_its_last_byte(families, name):
    fam = families(name)
    ids = _ids(fam.ref("ok " + FOUR_BYTE + " and more", add_special_tokens=False))
    k = _completing_step(fam, ids, FOUR_BYTE)
    assert len(_ids(fam.ref(FOUR_BYTE, add_special_tokens=False))) >= 2  # split across tokens
    out = _forced(fam, ids, (FOUR_BYTE,))
    assert out.finish_reason == "stop" and list(out.token_ids) == ids[: k + 1]
    assert out.text == "ok "


@pytest.mark.parametrize("name", FAMILIES)
def test_stop_spanning_three_bpe_tokens_fires_on_the_third(families, name):
    fam = families(name)
    ids = _ids(fam.ref("The final answer is forty-two, said the model.", add_special_tokens=False))
    span = fam.ref.decode(ids[3:6])
    stop = span[:-1] if len(fam.ref.decode(ids[5:6])) > 1 else span  # ends inside the third token
    assert stop and fam.ref.decode(ids[3:5]) not in ("", stop) and _completing_step(fam, ids, stop) == 5
    out = _forced(fam, ids, (stop,))
    assert out.finish_reason == "stop" and list(out.token_ids) == ids[:6]
    assert out.text == fam.ref.decode(ids[:3])


@pytest.mark.parametrize("name", FAMILIES)
def test_stop_equal_to_a_special_token_s_text_fires_on_its_id(families, name):
    fam = families(name)
    special = SPECIAL_STOP[name]
    sid = fam.ref.convert_tokens_to_ids(special)
    ids = [*_ids(fam.ref("Sure: 42", add_special_tokens=False)), sid, *_ids(fam.ref(" next", add_special_tokens=False))]
    out = _forced(fam, ids, (special,), stop_at_eos=sid not in fam.eos)
    assert out.finish_reason == "stop" and list(out.token_ids) == ids[: ids.index(sid) + 1]
    assert out.text == fam.ref.decode(ids[: ids.index(sid)], skip_special_tokens=True)


@pytest.mark.parametrize("name", FAMILIES)
def test_empty_context_is_scored_after_bos_as_lm_eval_does(families, name):
    fam = families(name)
    cont = " Hello world"
    # lm-eval's HFLM.prefix_token_id: the BOS, else the EOS
    prefix = fam.ref.bos_token_id if fam.ref.bos_token_id is not None else fam.ref.eos_token_id
    target = _ids(fam.ref(cont, add_special_tokens=False))
    with torch.inference_mode():
        logits = fam.hf(torch.tensor([[prefix, *target]])).logits[0].float()
    ref = torch.log_softmax(logits[:-1], -1)[torch.arange(len(target)), torch.tensor(target)].sum()
    got = loglikelihoods(fam.model, [("", cont)])[0]
    assert got.n_tokens == len(target) and got.logprob == pytest.approx(float(ref), abs=1e-3)


def test_the_stop_table_is_built_once_per_tokenizer(families, monkeypatch):
    fam = families("qwen2.5-instruct")
    tok = fam.model.tokenizer
    counts = {"bytes": 0, "tables": 0}
    build_bytes, build_table = stopping._build_token_bytes, stopping._build_stop_table

    def count_bytes(t):
        counts["bytes"] += 1
        return build_bytes(t)

    def count_table(*args):
        counts["tables"] += 1
        return build_table(*args)

    monkeypatch.setattr(stopping, "_build_token_bytes", count_bytes)
    monkeypatch.setattr(stopping, "_build_stop_table", count_table)
    stopping._BYTES.pop(tok, None)
    stopping._TABLES.pop(tok, None)
    protocol = Protocol.greedy("arith", max_new_tokens=2, stop=("\n", "Question:"))
    for _ in range(2):
        generate(fam.model, ["Q: 1+1=?\nA:"], [Row(0)], protocol)
        assert counts == {"bytes": 1, "tables": 1}
    generate(fam.model, ["Q: 1+1=?\nA:"], [Row(0)], Protocol.greedy("arith", max_new_tokens=2, stop=("\n",)))
    assert counts == {"bytes": 1, "tables": 2}  # another stop set: a table, from the same token bytes


@pytest.mark.parametrize("name", FAMILIES)
def test_token_bytes_join_to_the_decoded_text(families, name):
    fam = families(name)
    text = "Héllo 𓀀 答案：42\n\n  tab\there 🦩 ünïcödé" + SPECIAL_STOP[name]
    ids = _ids(fam.ref(text, add_special_tokens=False))
    pieces = stopping.token_bytes(fam.model.tokenizer)
    joined = b"".join(pieces[i] for i in ids)
    assert joined.decode("utf-8") == fam.ref.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
