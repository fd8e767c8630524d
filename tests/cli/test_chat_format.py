"""``--prompt-format chat`` end to end on a tiny Qwen2.5-Instruct-shaped model (its real tokenizer and chat
template, from ``../shared/tokenizers``): the audit runs, records the format, the template's hash and the
system turn, resumes, ``show`` names them; a chat audit and a plain one are refused as a comparison unless
allowed; a model without a chat template is refused in one line; the training study runs on chat audits."""

from __future__ import annotations

import json

from reachlens import Protocol
from reachlens.cli import main
from reachlens.tasks.chat import template_hash

AUDIT = ["--task", "arith", "--n", "2", "--k", "2", "--temperature", "1.0", "--max-new-tokens", "6"]


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_chat_audit_end_to_end_show_and_compare(real_checkpoint, tmp_path, capsys):
    from transformers import AutoTokenizer

    model = real_checkpoint("qwen2.5-instruct")
    chat, plain = tmp_path / "chat", tmp_path / "plain"
    argv = ["audit", model, *AUDIT, "--prompt-format", "chat", "--system", "Answer with a number.",
            "--stop", "\\n\\n", "--out", chat]
    assert run(capsys, *argv)[0] == 0
    protocol = json.loads((chat / "run.json").read_text())["protocol"]
    template = AutoTokenizer.from_pretrained(str(model)).chat_template
    assert protocol["prompt_format"] == "chat:qa" and protocol["system"] == "Answer with a number."
    assert protocol["chat_template"] == template_hash(template)
    assert protocol["stop"] == ["\n", "\n\n"]  # the task's own, then --stop's
    code, out, _ = run(capsys, *argv)  # a re-run resumes the same run
    assert code == 0 and "D=" in out

    code, out, _ = run(capsys, "show", chat)
    assert code == 0 and "prompt_format=chat:qa" in out
    assert f"chat template {template_hash(template)}, system turn 'Answer with a number.'" in out

    assert run(capsys, "audit", model, *AUDIT, "--out", plain)[0] == 0
    code, _, err = run(capsys, "compare", plain, chat, "--out", tmp_path / "cmp")
    assert code == 2 and "prompt_format" in err and "chat_template" in err and len(err.strip().splitlines()) == 1
    code, _, _ = run(capsys, "compare", plain, chat, "--allow", "prompt_format", "--allow", "system",
                     "--allow", "chat_template", "--allow", "stop", "--out", tmp_path / "cmp")
    assert code == 0


def test_a_model_without_a_chat_template_is_refused_in_one_line(real_checkpoint, tmp_path, capsys):
    model = real_checkpoint("gpt2")
    capsys.readouterr()  # the checkpoint's own build output
    code, _, err = run(capsys, "audit", model, *AUDIT, "--prompt-format", "chat", "--out", tmp_path / "o")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "has no chat template" in err
    assert not (tmp_path / "o").exists()


def test_the_training_study_runs_on_chat_audits(real_checkpoint, tmp_path):
    from reachlens.studies.training_audit import StudyPlan, run_training_audit

    plan = StudyPlan(models={"base": str(real_checkpoint("qwen2.5-instruct")),
                             "tuned": str(real_checkpoint("qwen2.5-instruct", seed=1))},
                     pairs=(("base", "tuned"),), n=3,
                     protocol=Protocol("arith", k=2, temperature=1.0, max_new_tokens=6, prompt_format="chat"))
    study = run_training_audit(plan, tmp_path / "study", log=lambda line: None)
    for name in ("base", "tuned"):
        assert study.audits[name].protocol.prompt_format == "chat:qa"
        assert study.audits[name].protocol.chat_template is not None
    (pair, comparison), = study.comparisons().items()  # same template on both sides: comparable
    assert pair == ("base", "tuned") and len(comparison.questions) == 3
    assert comparison.base.protocol.chat_template == comparison.trained.protocol.chat_template
