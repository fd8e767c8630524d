"""Placebo demonstrations (issue 57, item 6): each placebo's targets against an independent construction on real
``arith_hard`` train questions, the weak placebo against plain HuggingFace greedy decoding of the weak model, and
`reachlens elicit --placebo` killed with ``kill -9`` in a fine-tune, refused when resumed with another placebo,
and resumed with its own to copies trained on exactly the placebo's demonstrations.

References: shuffled, a permutation read back from the targets' texts; wrong_values, the gold chain's first step
and its digit runs compared position by position, the answer graded by the task's grader; answer_only, the
grader and the absence of any ``=``; weak, ``transformers``' own ``generate`` on the prompts.
"""

from __future__ import annotations

import json
import re

import pytest
from test_elicitation import _kill_mid_finetune

from reachlens import Protocol, load_task, read_run
from reachlens.cli import main
from reachlens.errors import ReachlensError
from reachlens.grading import get_grader
from reachlens.models.loading import resolve_spec
from reachlens.report import report_run
from reachlens.studies import elicit
from reachlens.studies.placebo import Placebo, control_role, cyclic_derangement, make_placebo
from reachlens.tasks.fewshot import demonstration_target, train_pool

TASK = load_task("arith_hard", n=3)
POOL = train_pool(TASK).head(24)
QS = POOL.questions
GRADE = get_grader("numeric").grade
ARGV = ["elicit", "zoo:locked", "--task", "arith_hard", "--n", "3", "--k", "2", "--max-new-tokens", "48",
        "--demos", "2", "--control", "zoo:base", "--steps", "2"]


def test_shuffled_is_a_permutation_of_the_golds_with_no_fixed_point():
    golds = [demonstration_target(q) for q in QS]
    assert len(set(golds)) == len(golds)
    for seed in range(5):
        shown = Placebo("shuffled", seed).demonstrations(QS)
        perm = [golds.index(demonstration_target(d)) for d in shown]
        assert sorted(perm) == list(range(len(QS))) and all(p != i for i, p in enumerate(perm))
        assert [d.question_id for d in shown] == [q.question_id for q in QS]
    assert cyclic_derangement(2, 0) == [1, 0]
    with pytest.raises(ReachlensError, match="at least 2 demonstrations"):
        Placebo("shuffled").demonstrations(QS[:1])


def test_wrong_values_keeps_the_first_step_and_the_format_and_changes_every_later_number():
    for q, d in zip(QS, Placebo("wrong_values", 3).demonstrations(QS)):
        gold, wrong = demonstration_target(q), demonstration_target(d)
        head = gold.split(";")[0]
        assert wrong.startswith(head + ";") and re.sub(r"\d+", "#", wrong) == re.sub(r"\d+", "#", gold)
        later_gold, later_wrong = (re.findall(r"\d+", t[len(head):]) for t in (gold, wrong))
        assert len(later_gold) == len(later_wrong) and all(a != b for a, b in zip(later_gold, later_wrong))
        assert not GRADE(wrong, q.gold).correct and GRADE(gold, q.gold).correct
        chain_end = wrong.split(" #### ")[0].rsplit("=", 1)[1]
        assert wrong.endswith(f" #### {chain_end}")  # the answer is the chain's own (wrong) last value


def test_answer_only_is_the_gold_answer_with_no_worked_step():
    for q, d in zip(QS, Placebo("answer_only").demonstrations(QS)):
        target = demonstration_target(d)
        assert "=" not in target and target == f" #### {q.gold}" and GRADE(target, q.gold).correct


def test_weak_is_the_weak_models_greedy_text_decoded_by_transformers():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    protocol = Protocol("arith_hard", k=2, temperature=0.8, max_new_tokens=48).resolved(TASK)
    placebo = make_placebo("weak", seed=0, weak_model="zoo:base", protocol=protocol, pool=POOL, picked=QS[:4])
    folder = resolve_spec("zoo:base")[0]
    tok, model = AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder).eval()
    for q, d in zip(QS[:4], placebo.demonstrations(QS[:4])):
        ids = tok(POOL.prompt(q), return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=48, do_sample=False, pad_token_id=tok.pad_token_id)
        text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True).split("\n")[0]
        assert demonstration_target(d) == (text if text[:1].isspace() else " " + text)
    assert placebo.record()["weak_model"]["spec"] == "zoo:base" and control_role("zoo:base") == "unmatched reference"


def test_bad_placebo_arguments_are_refused_before_anything_trains(tmp_path):
    proto = Protocol("arith_hard", k=2, max_new_tokens=48)
    with pytest.raises(ReachlensError, match="at least 2 demonstrations"):
        elicit("zoo:locked", TASK, proto, out=tmp_path / "a", demos=(1, 2), placebo="shuffled")
    with pytest.raises(ReachlensError, match="needs a weak model"):
        elicit("zoo:locked", TASK, proto, out=tmp_path / "b", demos=(2,), placebo="weak")
    with pytest.raises(ReachlensError, match="only for placebo 'weak'"):
        elicit("zoo:locked", TASK, proto, out=tmp_path / "c", demos=(2,), weak_model="zoo:base")
    assert not any((tmp_path / d).exists() for d in "abc")
    assert main([*ARGV, "--placebo", "weak", "--out", str(tmp_path / "d")]) == 2
    assert main([*ARGV, "--weak-model", "zoo:base", "--out", str(tmp_path / "e")]) == 2


def test_a_placebo_run_killed_mid_finetune_resumes_with_its_own_placebo_only(tmp_path, capsys):
    """kill -9 in the control's fine-tune; a resume with another placebo is refused naming it; the resume with its
    own reuses the finished copy and trains both on the wrong-values demonstrations built here again."""
    out = tmp_path / "run"
    argv = [*ARGV, "--placebo", "wrong_values"]
    _kill_mid_finetune(out, argv, first="model-n2")
    first = out / "checkpoints" / "model-n2" / "model.safetensors"
    assert first.is_file() and not (out / "checkpoints" / "control-n2").exists()
    stamp = first.stat().st_mtime_ns
    assert main([*ARGV, "--placebo", "shuffled", "--out", str(out)]) == 2
    assert "placebo" in capsys.readouterr().err
    assert main([*argv, "--out", str(out)]) == 0
    assert first.stat().st_mtime_ns == stamp, "the resumed run reuses the copy trained before the kill"
    printed = capsys.readouterr().out
    assert "placebo wrong_values" in printed and "control (unmatched reference)" in printed
    run = read_run(out)
    assert run.record.options["placebo"]["kind"] == "wrong_values"
    html = report_run(run, tmp_path / "report")[0].read_text()
    assert "<h2>Training-based reach (placebo wrong_values: not correct demonstrations)</h2>" in html
    drawn = [q.question_id for q in run.demonstrations.itertuples()]
    by_id = {q.question_id: q for q in train_pool(TASK).only(drawn).questions}
    expected = [demonstration_target(d) for d in Placebo("wrong_values").demonstrations([by_id[i] for i in drawn])]
    assert list(run.demonstrations["target"]) == expected
    from transformers import AutoTokenizer

    eos = AutoTokenizer.from_pretrained(resolve_spec("zoo:locked")[0]).eos_token
    for side in ("model", "control"):
        card = json.loads((out / "checkpoints" / f"{side}-n2" / "training.json").read_text())
        assert [c["completion"] for c in card["demonstrations"]] == [t + eos for t in expected]
