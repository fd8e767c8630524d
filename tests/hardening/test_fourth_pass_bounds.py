"""Hard edges, fourth pass (issue 53, items 7, 9 and 10): bounds that hold by arithmetic, refusals before any decode,
messages that name the real fix, verdicts that agree with the tests printed beside them.

Each test is the user's command or call that showed the finding; the references are computed another way (the
checkpoint's tensors read with safetensors, the train file's own lines, the p-values of the summary itself).
"""

from __future__ import annotations

import json
import re

import pytest
from safetensors import safe_open

from reachlens import Protocol, load_task
from reachlens.cli.main import main
from reachlens.engine.progress import listening
from reachlens.errors import ReachlensError
from reachlens.models.zoo import zoo_root


class _Decodes:
    def __init__(self):
        self.rows = 0

    def decode(self, rows, max_new_tokens):
        self.rows += rows

    def step(self, tokens, finished, unused):
        pass


def _refused(capsys, argv, out) -> str:
    """Run ``argv``; assert exit 2, one line, nothing decoded and no run directory; return the line."""
    decodes = _Decodes()
    with listening(decodes):
        code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert decodes.rows == 0 and not out.exists(), err  # refused before any decode; the directory is free
    return err


def test_weight_noise_k_of_a_hundred_million_is_refused_by_arithmetic(tmp_path, capsys, monkeypatch):
    """Before: k=100000000 was still parsing after 150 s (every draw built in validate)."""
    import importlib

    from reachlens.probes import parse_probe

    wn = importlib.import_module("reachlens.interventions.weight_noise")

    made = []
    real = wn.WeightNoise.__post_init__
    monkeypatch.setattr(wn.WeightNoise, "__post_init__", lambda self: (made.append(1), real(self)))
    probe = parse_probe("weight_noise:sigma=0.01,0.02:k=100000000")
    assert probe.budget == 2 * 10**8 and len(made) <= 2  # one draw per sigma checked, none of the k built
    err = _refused(capsys, ["probe", "zoo:base", "--task", "arith", "--n", 2, "--probe",
                            "weight_noise:sigma=0.01:k=100000000", "--out", tmp_path / "p"], tmp_path / "p")
    assert "100,000,001 candidates each" in err and "candidates per question" in err


def test_weight_noise_draws_memory_is_counted_before_any_is_drawn(tmp_path, capsys, monkeypatch):
    """Before: k=2000 ended in a MemoryError traceback after 48 s under a 6 GB limit, the run left `interrupted`.
    The bound: k full-rank draws hold 2 x 4 bytes per targeted weight each (their N and its stacked copy); with 64 MiB
    to use, half of it fits the k the message names."""
    import reachlens.probes.weight_noise as probe_module

    with safe_open(str(zoo_root() / "base" / "model.safetensors"), "pt") as f:  # the reference: the file's shapes
        weights = sum(f.get_slice(name).get_shape()[0] * f.get_slice(name).get_shape()[1] for name in f.keys()
                      if name.endswith("proj.weight") and (".self_attn." in name or ".mlp." in name))
    each = 2 * 4 * weights
    memory = 64 << 20
    monkeypatch.setattr(probe_module, "machine_memory", lambda: memory)
    err = _refused(capsys, ["probe", "zoo:base", "--task", "arith", "--n", 2, "--probe",
                            "weight_noise:sigma=0.01:k=2000", "--out", tmp_path / "p"], tmp_path / "p")
    fit = int(re.search(r"use k <= ([\d,]+)", err).group(1).replace(",", ""))
    assert fit == memory // 2 // each and "2,000 full-rank draws" in err and "rank=8" in err


@pytest.mark.parametrize("spec,words", [
    ("fewshot:n=1000000000:k=2", ["n=1,000,000,000", "50,000 questions", "lower n"]),
    ("fewshot:n=2:k=2:train={file}", ["generated from a seed", "drop it"]),
])
def test_fewshot_refusals_come_before_any_decode(spec, words, tmp_path, capsys):
    """Before: both were refused after the greedy unit had decoded, the directory left `failed` (the corrected spec
    could not reuse it)."""
    file = tmp_path / "train.jsonl"
    file.write_text('{"question": "1+1=?", "answer": "2"}\n')
    out = tmp_path / "p"
    err = _refused(capsys, ["probe", "zoo:base", "--task", "arith", "--n", 2, "--max-new-tokens", 8, "--probe",
                            spec.format(file=file), "--out", out], out)
    assert all(w in err for w in words), err
    assert main(["probe", "zoo:base", "--task", "arith", "--n", "1", "--max-new-tokens", "4", "--probe",
                 "fewshot:n=1:k=1", "--out", str(out)]) == 0  # the corrected spec runs in that directory


def test_a_jsonl_tasks_train_file_is_read_with_the_tasks_own_options(tmp_path):
    """Before: the few-shot pool of a jsonl task read with ``question_field="problem"`` was loaded with the loader's
    defaults ("missing required field 'question'"), and a train file of another stem was refused as another task."""
    from reachlens.probes import parse_probe

    lines = {"test_s": [("7+1=?", "8")], "train_s": [(f"{i}+{i}=?", str(2 * i)) for i in range(10, 14)]}
    for stem, rows in lines.items():
        (tmp_path / f"{stem}.jsonl").write_text("".join(json.dumps({"problem": q, "sol": a}) + "\n" for q, a in rows))
    task = load_task("jsonl", tmp_path / "test_s.jsonl", question_field="problem", answer_field="sol")
    probe = parse_probe(f"fewshot:n=2:k=1:train={tmp_path / 'train_s.jsonl'}")
    protocol = Protocol.greedy(task.name, max_new_tokens=4)
    probe.check_task(task, protocol)
    prompt = probe.prompts(task, protocol, task.questions, 0)[0]
    shown = [q for q, _ in lines["train_s"] if f"Question: {q}\nAnswer: " in prompt]
    assert len(shown) == 2 and prompt.endswith("Question: 7+1=?\nAnswer:"), prompt


def test_elicit_held_out_beyond_the_train_split_names_held_out():
    """Before: ``elicit --held-out 1000000000`` said "... fewer than 1000000002; lower demos"."""
    from reachlens.studies.elicitation import select_demonstrations

    task, pool = load_task("arith_hard", n=3), load_task("arith_hard", split="train")
    with pytest.raises(ReachlensError) as err:
        select_demonstrations(task, pool, 2, held_out=10**9)
    text = str(err.value)
    admissible = sum(1 for q in pool.questions if pool.prompt(q) not in {task.prompt(t) for t in task.questions})
    assert "--held-out" in text and f"use held_out <= {admissible - 2:,}" in text and "demos" not in text


def test_a_prompt_that_fills_the_context_alone_is_told_to_shorten_it(tmp_path):
    """Before: "the longest prompt (300 tokens) ... exceeds the model's context of 256 tokens; use max_new_tokens <=
    0". The zoo's tokenizer writes a token per character: a 300-character question fills its 256 positions alone."""
    from reachlens.models import load_model
    from reachlens.runner.context import check_context

    (tmp_path / "long.jsonl").write_text(json.dumps({"question": "1+" * 150 + "1=?", "answer": "151"}) + "\n")
    task = load_task("jsonl", tmp_path / "long.jsonl")
    with pytest.raises(ReachlensError) as err:
        check_context(load_model("zoo:base"), task, Protocol.greedy(task.name, max_new_tokens=8))
    text = str(err.value)
    assert "max_new_tokens <= 0" not in text and "shorten that question" in text and "context of 256" in text


def test_a_delta_is_detected_only_where_the_printed_test_agrees():
    """Before: ``compare`` at n = 6 printed "detected" beside a Holm-adjusted p of 0.094 (the verdict read the
    bootstrap interval alone)."""
    from reachlens.power import mde_verdict

    assert mde_verdict((0.05, 0.4), 0.5, p=0.094).startswith("not detected at p = 0.094")
    assert mde_verdict((0.05, 0.4), 0.5, p=0.01).startswith("detected")
    assert mde_verdict((-0.05, 0.4), 0.5, p=0.01).startswith("not detected;")  # the interval holds 0
    assert mde_verdict((0.05, 0.4), 0.5).startswith("detected")  # no test printed beside it: the interval's reading


def test_weight_noise_sigma_past_the_models_end_is_refused_up_front(tmp_path, capsys):
    """Before: ``weight_noise:sigma=1e308`` was accepted and every candidate decoded empty (measured: empty from
    sigma 1e12 on the zoo's base, text at 1e6)."""
    err = _refused(capsys, ["probe", "zoo:base", "--task", "arith", "--n", 2, "--probe",
                            "weight_noise:sigma=0.01,1e308:k=1", "--out", tmp_path / "p"], tmp_path / "p")
    assert "sigma=1e+308" in err and "use sigma <= 1000" in err
