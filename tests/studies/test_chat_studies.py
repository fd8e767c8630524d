"""Every study under ``prompt_format="chat"`` on tiny random models carrying real instruct tokenizers
(``../shared/tokenizers``): routing, recognition, the causal tools and the activation probes decode the prompt
``apply_chat_template(..., add_generation_prompt=True)`` renders (one BOS), the one the audit decodes.

References are computed another way: a fresh ``AutoTokenizer``'s ``apply_chat_template`` for the ids, plain
HuggingFace logits with lm-eval 0.4's chat recipe written out for recognition (``fewshot_context`` with
``apply_chat_template``: the context as the user turn with the generation prompt, ``target_delimiter=""``,
trailing whitespace moved into the continuation, BOS not added twice), and lm-eval itself where it is installed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

from reachlens import Protocol
from reachlens.cli import main
from reachlens.engine import encode
from reachlens.tasks import load_task, render_prompts
from reachlens.tasks.chat import bind_chat, template_hash

CHAT = ("qwen2.5-instruct", "llama3-instruct", "gemma3-it")
SYSTEM = "Answer with a number."


@pytest.fixture(scope="module")
def loaded(real_checkpoint):
    """``loaded(name)``: (folder, reachlens bridge, plain HF model, fresh AutoTokenizer), once per module."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reachlens.models import load_model

    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            folder = real_checkpoint(name)
            cache[name] = (folder, load_model(str(folder)),
                           AutoModelForCausalLM.from_pretrained(str(folder), use_safetensors=True).eval(),
                           AutoTokenizer.from_pretrained(str(folder)))
        return cache[name]

    return get


def _messages(text: str, system: str | None) -> list[dict]:
    return ([{"role": "system", "content": system}] if system is not None else []) + [{"role": "user", "content": text}]


def _reference_ids(tok, text: str, system: str | None) -> list[int]:
    out = tok.apply_chat_template(_messages(text, system), add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


@pytest.mark.parametrize("name", CHAT)
def test_routing_decodes_the_audit_s_chat_prompt(loaded, name):
    """A route evaluator's prompts are the audit's (render_prompts), their ids apply_chat_template's with one BOS,
    its protocol bound to the template; the identity route's greedy text is the audit's deployment."""
    from reachlens.routing import RouteEvaluator, run_routing
    from reachlens.runner import deploy_and_grade

    folder, model, _, tok = loaded(name)
    task = load_task("arith", n=2)
    system = None if name == "gemma3-it" else SYSTEM  # Gemma's template folds a system turn into the user's
    protocol = Protocol.greedy("arith", max_new_tokens=5, prompt_format="chat", system=system)
    ev = RouteEvaluator(model, task, protocol)
    audit = render_prompts(task, bind_chat(protocol.resolved(task), model.tokenizer), task.questions, model.tokenizer)
    assert encode(model, ev.prompts) == encode(model, audit)
    fmt = task.format("qa")
    for q, ids in zip(task.questions, encode(model, ev.prompts)):
        ref = _reference_ids(tok, fmt.render(q), system)
        assert ids == ref and ids.count(tok.bos_token_id) == (tok.bos_token_id in ref)
    assert ev.protocol.chat_template == template_hash(tok.chat_template)
    deployed = deploy_and_grade(model, task, protocol.resolved(task))
    assert [e.text for e in ev.deployment([0, 1])] == deployed["deployed_text"].tolist()
    result = run_routing(model, task, "skip", "random", 2, protocol=protocol)
    assert result.protocol.chat_template == template_hash(tok.chat_template)
    assert result.protocol.prompt_format == "chat:qa"


def _lm_eval_chat_loglik(hf, tok, text: str, option: str, system: str | None) -> float:
    """lm-eval 0.4's multiple-choice request under --apply_chat_template, written out with plain HuggingFace:
    context = apply_chat_template(user turn, add_generation_prompt=True) as text, continuation = the option
    (target_delimiter ""), the context's trailing whitespace moved into the continuation, both encoded whole
    (no special token added to a text that starts with the BOS), float32 log-softmax summed."""
    context = tok.apply_chat_template(_messages(text, system), add_generation_prompt=True, tokenize=False)
    continuation = option
    n = len(context) - len(context.rstrip())
    if n:
        context, continuation = context[:-n], context[-n:] + continuation
    bos = tok.decode([tok.bos_token_id]) if tok.bos_token_id is not None else None
    kw = {"add_special_tokens": False} if bos and context.startswith(bos) else {}
    whole, ctx = tok.encode(context + continuation, **kw), tok.encode(context, **kw)
    cont = whole[len(ctx):]
    with torch.no_grad():
        logits = hf(torch.tensor([whole[:-1]])).logits[0].float()
    logp = torch.log_softmax(logits[len(whole) - 1 - len(cont):], dim=-1)
    return float(logp.gather(-1, torch.tensor(cont)[:, None]).sum())


@pytest.mark.parametrize("name", CHAT)
def test_chat_recognition_equals_lm_eval_s_chat_recipe(loaded, name):
    from reachlens.studies.recognition import RecognitionConfig, recognition_contexts, score_options

    _, model, hf, tok = loaded(name)
    task = load_task("arith_mc", n=3)
    system = None if name == "gemma3-it" else SYSTEM
    protocol = bind_chat(Protocol.deployment(task, prompt_format="chat", system=system).resolved(task), model.tokenizer)
    options = score_options(model, task, RecognitionConfig(), protocol)
    fmt = task.format("qa")
    contexts, delimiter = recognition_contexts(task, RecognitionConfig().resolved(task), protocol, model.tokenizer)
    assert delimiter == ""
    for q, context in zip(task.questions, contexts):
        assert encode(model, [context])[0] == _reference_ids(tok, fmt.render(q), system)
        mine = options[options["question_id"] == q.question_id].sort_values("option")["loglik"].tolist()
        ref = [_lm_eval_chat_loglik(hf, tok, fmt.render(q), option, system) for option in q.choices]
        assert mine == pytest.approx(ref, abs=1e-4, rel=1e-6)  # float32 sums near -900: 1e-4 is their last bits
        assert max(range(len(ref)), key=lambda i: (ref[i], -i)) == max(range(len(mine)), key=lambda i: (mine[i], -i))


LM_EVAL_SCRIPT = r"""
import json, sys
from lm_eval import simple_evaluate
from lm_eval.api.task import ConfigurableTask
from lm_eval.models.huggingface import HFLM
folder, docs, system = sys.argv[1], sys.argv[2], sys.argv[3] or None
task = ConfigurableTask(config={
    "task": "reachlens_chat_mc", "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": docs}},
    "test_split": "test", "output_type": "multiple_choice", "doc_to_text": "{{text}}",
    "doc_to_choice": "{{choices}}", "doc_to_target": "{{gold}}", "metric_list": [{"metric": "acc"}]})
lm = HFLM(pretrained=folder, batch_size=4, device="cpu", dtype="float32")
out = simple_evaluate(model=lm, tasks=[task], apply_chat_template=True, system_instruction=system, log_samples=True)
rows = sorted(out["samples"]["reachlens_chat_mc"], key=lambda s: s["doc_id"])
print(json.dumps([[r[0][0] for r in s["resps"]] for s in rows]))
"""


def test_chat_recognition_equals_lm_eval_itself(loaded, tmp_path):
    """lm-evaluation-harness 0.4 (``simple_evaluate(apply_chat_template=True, system_instruction=...)``) on the same
    local model and questions: the same per-option log-likelihoods (1e-4) and picks."""
    from reachlens.studies.recognition import RecognitionConfig, gold_index, score_options

    probe = subprocess.run([sys.executable, "-c", "import lm_eval"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("needs lm-evaluation-harness (pip install 'reachlens[test]', lm-eval==0.4.13): not installed")
    folder, model, _, _ = loaded("qwen2.5-instruct")
    task = load_task("arith_mc", n=2)
    fmt = task.format("qa")
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": fmt.render(q), "choices": list(q.choices), "gold": gold_index(q)}) + "\n"
                            for q in task.questions))
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "HF_DATASETS_CACHE": str(tmp_path / "datasets")}
    done = subprocess.run([sys.executable, "-c", LM_EVAL_SCRIPT, str(folder), str(docs), SYSTEM], capture_output=True,
                          text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    protocol = bind_chat(Protocol.deployment(task, prompt_format="chat", system=SYSTEM).resolved(task), model.tokenizer)
    options = score_options(model, task, RecognitionConfig(), protocol)
    for q, ref in zip(task.questions, theirs):
        mine = options[options["question_id"] == q.question_id].sort_values("option")["loglik"].tolist()
        assert mine == pytest.approx(ref, abs=1e-4, rel=1e-6)  # float32 sums near -900: 1e-4 is their last bits
        assert mine.index(max(mine)) == ref.index(max(ref))


def test_chat_recognition_silence_and_steer_on_the_rendered_prompt(loaded, tmp_path, capsys):
    """``recognize --prompt-format chat --system`` records the chat protocol (template hash) and its sets;
    ``silence`` and ``steer`` run on them; the answer position of the causal tools is the rendered prompt's last
    token (apply_chat_template's ids)."""
    from reachlens.models import identity_of
    from reachlens.studies.causal import _prompts, silence_sweep, steer_sweep
    from reachlens.studies.recognition import EvalSets, FailureRule, RecognitionConfig

    folder, model, _, tok = loaded("qwen2.5-instruct")
    out = tmp_path / "rec"
    code = main(["recognize", str(folder), "--task", "arith_mc", "--n", "4", "--max-new-tokens", "4",
                 "--prompt-format", "chat", "--system", SYSTEM, "--min-failures", "1", "--out", str(out)])
    capsys.readouterr()
    assert code in (0, 2) and (out / "run.json").is_file()  # 2: no failure on a random model, tables written
    protocol = json.loads((out / "run.json").read_text())["protocol"]
    assert protocol["prompt_format"] == "chat:qa" and protocol["system"] == SYSTEM
    assert protocol["chat_template"] == template_hash(tok.chat_template)
    task = load_task("arith_mc", n=4)
    ids = [q.question_id for q in task.questions]
    sets = EvalSets(tuple(ids[:2]), tuple(ids[2:]), FailureRule(min_failures=1), Protocol.from_dict(protocol),
                    RecognitionConfig().resolved(task, model), identity_of(model))  # both sets non-empty
    fmt = task.format("qa")
    for q, got in zip(task.questions, encode(model, _prompts(model, task, sets, ids))):
        assert got == _reference_ids(tok, fmt.render(q), SYSTEM)
    silenced = silence_sweep(model, task, sets, layers=[0], components=("mlp",))
    assert silenced.table["condition"].tolist() == ["none", "zero L0 mlp"]
    assert silenced.record.protocol.chat_template == protocol["chat_template"]
    steered = steer_sweep(model, task, sets, 0, alphas=[1.0])
    assert len(steered.table) >= 1 and steered.record.protocol.chat_template == protocol["chat_template"]


def test_chat_probe_run_grafts_on_the_rendered_ids(loaded):
    """A probe run under chat: the routes probe runs; a graft's last prompt token (position -1) is the rendered
    prompt's last id (the same candidate as the explicit position len(apply_chat_template ids) - 1), and a
    placebo's position lies strictly inside the rendered ids, the template's own tokens counted."""
    from reachlens.probes import probe

    folder, model, _, tok = loaded("qwen2.5-instruct")
    task = load_task("arith", n=1)
    protocol = Protocol.deployment(task, prompt_format="chat", system=SYSTEM, max_new_tokens=5)
    n = len(_reference_ids(tok, task.format("qa").render(task.questions[0]), SYSTEM))
    run = probe(model, task, ["routes:budget=2", "graft:kind=zero:layer=0", f"graft:kind=zero:layer=0:position={n - 1}",
                              "graft:kind=zero:layer=0:placebo=true", "embedding_noise:k=1",
                              "steer:layer=0:alphas=1"], protocol=protocol)
    bank = run.candidates
    assert run.record.protocol.chat_template == template_hash(tok.chat_template)
    by = {label: rows for label, rows in bank.groupby("probe")}
    assert len(by["routes:budget=2"]) == 2
    last = by["graft:kind=zero:layer=0"]["text"].tolist()
    assert last == by[f"graft:kind=zero:layer=0:position={n - 1}"]["text"].tolist()
    pos = int(by["graft:kind=zero:layer=0:placebo=true"]["detail"].iloc[0].removeprefix("pos="))
    assert 1 <= pos <= n - 2


def test_fewshot_as_multiturn_is_refused_in_one_line(real_checkpoint, tmp_path, capsys):
    folder = real_checkpoint("qwen2.5-instruct")
    capsys.readouterr()
    code = main(["recognize", str(folder), "--task", "arith_mc", "--n", "2", "--prompt-format", "chat",
                 "--fewshot-as-multiturn", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "zero-shot" in err
    assert not (tmp_path / "o").exists()


def test_format_control_with_a_system_turn_and_chat_vs_plain(loaded, tmp_path):
    """``rerun(chat audit, system=...)`` and ``rerun(..., prompt_format="default")``: paired audits with the
    template hash recorded, compared only with the changed fields allowed (each named when refused)."""
    import reachlens
    from reachlens import ProtocolMismatch
    from reachlens.studies.compare import compare

    folder, model, _, tok = loaded("qwen2.5-instruct")
    task = load_task("arith", n=2)
    chat = reachlens.audit(model, task, Protocol("arith", k=2, temperature=1.0, max_new_tokens=4, prompt_format="chat"),
                           out=tmp_path / "chat")
    with_system = reachlens.rerun(tmp_path / "chat", model=model, task=task, system=SYSTEM, into=tmp_path)
    assert with_system.location.name.startswith("chat--system=")
    assert with_system.protocol.system == SYSTEM
    assert with_system.protocol.chat_template == chat.protocol.chat_template == template_hash(tok.chat_template)
    with pytest.raises(ProtocolMismatch, match="system"):
        compare(chat, with_system)
    assert len(compare(chat, with_system, allow=("system",)).questions) == 2
    plain = reachlens.rerun(with_system.location, model=model, task=task, prompt_format="default", into=tmp_path)
    assert plain.protocol.chat_template is None and plain.protocol.system is None
    with pytest.raises(ProtocolMismatch, match="chat_template"):
        compare(plain, chat)
    assert len(compare(plain, chat, allow=("prompt_format", "chat_template")).questions) == 2
