"""Training-based elicitation on the zoo: `reachlens elicit zoo:locked --control zoo:base` writes its run, its
fine-tuned checkpoints with their cards and its report; the demonstrations come from the train split only; a run
killed with ``kill -9`` in the middle of a fine-tune resumes to the tables of an uninterrupted run, whose audits
decode in two worker processes (``--workers 2``). Tiny: 3 test questions, K=2, one and two demonstrations,
two optimizer steps per fine-tune.

The references: the uplift and its difference are recomputed here from the audits' own question tables; the
card's parent fingerprint from the zoo folder; the fine-tuned weights read with safetensors and compared with the
parent's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from safetensors.torch import load_file

from reachlens import Protocol, load_task, read_run
from reachlens.cli import main
from reachlens.errors import ReachlensError
from reachlens.models.loading import model_identity, resolve_spec
from reachlens.report import report_run
from reachlens.stats import paired_bootstrap_ci
from reachlens.studies import Elicitation, FineTune, elicit
from reachlens.studies.elicitation import select_demonstrations
from reachlens.studies.elicitation_split import trained_question_ids, unseen_pool

ROOT = Path(__file__).resolve().parents[2]
TASK = load_task("arith_hard", n=3)
PROTOCOL = Protocol("arith_hard", k=2, temperature=0.8, max_new_tokens=48)
ARGV = ["elicit", "zoo:locked", "--task", "arith_hard", "--n", "3", "--k", "2", "--max-new-tokens", "48",
        "--demos", "1,2", "--control", "zoo:base", "--steps", "2"]


def _kill_mid_finetune(out: Path, argv: list[str] = ARGV, first: str = "model-n1") -> None:
    """``reachlens elicit ARGV --out out`` in a child process, ``kill -9``-ed while its second fine-tune (the
    control's on one demonstration) is under way: the model's copy is written, the next one's staging folder open."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "reachlens", *argv, "--out", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = out / "checkpoints"
    deadline = time.monotonic() + 600
    while not ((ckpt / first).is_dir() and list(ckpt.glob(".finetune-*"))) and proc.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run killed with SIGKILL in the middle of its second fine-tune, then finished by the CLI (one process)."""
    out = tmp_path_factory.mktemp("eli") / "run"
    _kill_mid_finetune(out)
    first, ckpt = out / "checkpoints" / "model-n1" / "model.safetensors", out / "checkpoints"
    assert first.is_file() and list(ckpt.glob(".finetune-*")), "killed in the middle of a fine-tune"
    assert not (ckpt / "control-n1").exists() and read_run(out).record.status == "interrupted"
    stamp = first.stat().st_mtime_ns
    assert main([*map(str, ARGV), "--out", str(out)]) == 0
    assert first.stat().st_mtime_ns == stamp, "the resumed run reuses the finished fine-tune"
    assert not list(ckpt.glob(".finetune-*")), "the killed fine-tune's staging folder is gone"
    return out


@pytest.fixture(scope="module")
def whole_two(tmp_path_factory):
    """The same run uninterrupted, its audits decoded by two worker processes (``--workers 2``)."""
    out = tmp_path_factory.mktemp("eli") / "whole"
    assert main([*map(str, ARGV), "--workers", "2", "--out", str(out)]) == 0
    return out


def test_a_run_killed_mid_finetune_and_resumed_equals_an_uninterrupted_run_in_two_workers(run_dir, whole_two):
    """kill -9 in a fine-tune, resumed in one process, against the run never stopped, its audits in two worker
    processes: every table and every audit's questions and samples equal, every copy's weights bit for bit."""
    cut, whole = read_run(run_dir), read_run(whole_two)
    assert cut.tables().keys() == whole.tables().keys() and cut.audits.keys() == whole.audits.keys()
    for name, table in whole.tables().items():
        pd.testing.assert_frame_equal(cut.tables()[name], table, obj=name)
    for name, a in whole.audits.items():
        pd.testing.assert_frame_equal(cut.audits[name].questions, a.questions, obj=f"{name} questions")
        pd.testing.assert_frame_equal(cut.audits[name].samples, a.samples, obj=f"{name} samples")
    for folder in (whole_two / "checkpoints").iterdir():
        tuned, again = (load_file(d / "checkpoints" / folder.name / "model.safetensors") for d in (run_dir, whole_two))
        assert tuned.keys() == again.keys() and all(np.array_equal(tuned[k], again[k]) for k in tuned), folder.name


def test_the_run_reads_back_typed_with_every_audit_and_table(run_dir):
    run = read_run(run_dir)
    assert isinstance(run, Elicitation) and run.record.status == "complete"
    assert sorted(run.audits) == ["control", "control-n1", "control-n2", "model", "model-n1", "model-n2"]
    assert all(a.n == 3 and a.k == 2 and a.protocol == run.audits["model"].protocol for a in run.audits.values())
    assert run.summary()["label"] == "training-based reach"
    assert run.record.model["model"]["spec"] == "zoo:locked" and run.record.options["control"] == "zoo:base"
    assert set(run.tables()) == {"uplift", "difference", "demonstrations"}


def test_the_uplift_and_its_difference_are_the_audits_per_question_changes(run_dir):
    run = read_run(run_dir)
    col = {"D": "realized", "O_K": "reachable"}

    def per_q(name, metric):
        q = run.audits[name].questions.sort_values("question_id")
        return q[col[metric]].astype(float).to_numpy()

    uplift, diff = run.uplift(), run.difference()
    for n in (1, 2):
        for metric in ("D", "O_K"):
            up = {side: per_q(f"{side}-n{n}", metric) - per_q(side, metric) for side in ("model", "control")}
            for side in up:
                row = uplift[(uplift["n_demos"] == n) & (uplift["side"] == side)].iloc[0]
                assert row[f"delta_{metric}"] == pytest.approx(up[side].mean())
            d = up["model"] - up["control"]
            row = diff[(diff["n_demos"] == n) & (diff["metric"] == metric)].iloc[0]
            assert row["difference"] == pytest.approx(d.mean())
            assert row["uplift_model"] == pytest.approx(up["model"].mean())
            assert (row["difference_lo"], row["difference_hi"]) == pytest.approx(paired_bootstrap_ci(d))


def test_each_checkpoint_is_a_fine_tuned_copy_with_a_card_naming_parent_demonstrations_and_seed(run_dir):
    run = read_run(run_dir)
    demos = run.demonstrations["question_id"].tolist()
    for side, parent in (("model", "zoo:locked"), ("control", "zoo:base")):
        for n in (1, 2):
            folder = run_dir / "checkpoints" / f"{side}-n{n}"
            card = json.loads((folder / "training.json").read_text())
            assert card["parent"] == parent and card["parent_fingerprint"] == model_identity(parent).fingerprint
            assert [d["question_id"] for d in card["demonstrations"]] == demos[:n]  # the same for model and control
            assert card["seed"] == 0 and card["training"]["steps"] == 2 and card["training"]["trainer"] == "trl.SFTTrainer"
            assert card["demonstrations"][0]["completion"].endswith("</s>") or card["demonstrations"][0]["completion"]
            assert (folder / "MODEL_CARD.md").is_file() and not list(folder.glob("*.bin"))
            tuned = load_file(folder / "model.safetensors")
            base = load_file(resolve_spec(parent)[0] + "/model.safetensors")
            assert tuned.keys() == base.keys() and any(not np.array_equal(tuned[k], base[k]) for k in base)
            assert run.audits[f"{side}-n{n}"].model["fingerprint"] == model_identity(str(folder)).fingerprint


def test_the_demonstrations_come_from_the_train_split_only(run_dir):
    run = read_run(run_dir)
    train = load_task("arith_hard", split="train")
    test_prompts = {TASK.prompt(q) for q in load_task("arith_hard").questions}
    ids = run.demonstrations["question_id"].tolist()
    assert ids == [q.question_id for q in select_demonstrations(TASK, unseen_pool(train, ["zoo:locked"]), 2, seed=0)]
    assert not set(ids) & trained_question_ids("zoo:locked", train)  # the elicitation split: unseen by the lock
    by_id = {q.question_id: q for q in train.questions}
    assert all(i in by_id and train.prompt(by_id[i]) not in test_prompts for i in ids)
    assert run.demonstrations["target"].tolist() == [by_id[i].solution for i in ids]
    with pytest.raises(ReachlensError, match="split='train'"):
        select_demonstrations(TASK, load_task("arith_hard", n=50), 2)


def test_the_report_renders_as_training_based_reach(run_dir, chromium, tmp_path):
    import subprocess

    html, md = report_run(run_dir, tmp_path)
    text = html.read_text()
    assert "Training-based reach" in text and "never pooled with inference-time probes" in text
    assert "## uplift" in md.read_text() and "## difference" in md.read_text()
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'c'}",
                          "--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert dom.count('class="main-svg"') >= 1 and "model uplift minus control uplift" in dom


def test_bad_arguments_are_refused_before_anything_trains(tmp_path):
    with pytest.raises(ReachlensError, match="demos="):
        elicit("zoo:locked", TASK, PROTOCOL, out=tmp_path / "a", demos=(0, 2))
    with pytest.raises(ReachlensError, match="not a local checkpoint"):
        elicit("org/not-here", TASK, PROTOCOL, out=tmp_path / "b", demos=(1,))
    with pytest.raises(ReachlensError, match="lr="):
        FineTune(lr=0.0)
    with pytest.raises(ReachlensError, match="k=1000000000: one question"):  # from Python too, before any fine-tune
        elicit("zoo:locked", TASK, PROTOCOL.with_k(10**9), out=tmp_path / "c", demos=(1,))
    assert not any((tmp_path / d).exists() for d in "abc")


def test_early_stopping_keeps_the_best_held_out_step_of_each_model(tmp_path):
    """A fine-tune with ``held_out``: the curve is measured at step 0 (the parent) and every ``eval_every`` steps on
    train questions that are neither demonstrations nor test questions; the copy written is the best step (ties:
    the earliest). References: the copy audited again here on those questions gives the curve's value at the chosen
    step; a copy that kept step 0 holds the parent's weights bit for bit (safetensors)."""
    from reachlens import audit
    from reachlens.studies.finetune import finetune_on_demonstrations
    from reachlens.tasks.fewshot import train_pool

    pool = train_pool(TASK)
    picked = select_demonstrations(TASK, pool, 1 + 3, seed=0)
    held = pool.only([q.question_id for q in picked[1:]])
    greedy = Protocol.greedy("arith_hard", max_new_tokens=48).resolved(TASK)
    config = FineTune(steps=2, lr=3e-3, held_out=3, eval_every=1)
    out = finetune_on_demonstrations("zoo:base", TASK, greedy, picked[:1], tmp_path / "copy", config, held)
    card = json.loads((out / "training.json").read_text())
    curve, chosen = card["early_stopping"]["curve"], card["early_stopping"]["chosen_step"]
    assert [step for step, _ in curve] == [0, 1, 2]
    best = max(v for _, v in curve)
    assert chosen == next(step for step, v in curve if v == best)
    assert set(card["held_out"]) == {q.question_id for q in held.questions}
    assert not set(card["held_out"]) & ({picked[0].question_id} | {q.question_id for q in TASK.questions})
    assert audit(str(out), held, greedy).D == pytest.approx(best)
    parent = load_file(str(Path(resolve_spec("zoo:base")[0]) / "model.safetensors"))
    copy = load_file(str(out / "model.safetensors"))
    same = all(np.array_equal(parent[k].numpy(), copy[k].numpy()) for k in parent)
    assert same == (chosen == 0)
    with pytest.raises(ReachlensError, match="held_out=3 train questions needs that many"):
        finetune_on_demonstrations("zoo:base", TASK, greedy, picked[:1], tmp_path / "other", config, held.head(2))


def test_the_verified_uplift_is_the_audits_per_question_change_in_solutions(run_dir, monkeypatch):
    """D^trace and O_K^trace uplifts and their difference against solutions checked by the test suite's independent
    arith checker (tests/grading/test_trace.py) on the audits' stored text; the sources' nulls in the summary."""
    import importlib.util

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "grading"))  # its own helper module beside it
    spec = importlib.util.spec_from_file_location("tt", Path(__file__).parents[1] / "grading" / "test_trace.py")
    tt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tt)
    run = read_run(run_dir)
    expr = {q.question_id: q.fields["expr"] for q in TASK.questions}

    def solved(name, metric):
        a = run.audits[name]
        if metric == "D^trace":
            q = a.questions.sort_values("question_id")
            return np.array([bool(r) and tt.independent_arith_valid(t, expr[i]) for i, r, t in
                             zip(q["question_id"], q["realized"], q["deployed_text"])], float)
        s = a.samples.assign(ok=[bool(c) and tt.independent_arith_valid(t, expr[i]) for i, c, t in
                                 zip(a.samples["question_id"], a.samples["correct"], a.samples["text"])])
        return s.groupby("question_id")["ok"].any().sort_index().to_numpy(float)

    uplift, diff = run.uplift(), run.difference()
    for n in (1, 2):
        for metric, column in (("D^trace", "D_trace"), ("O_K^trace", "O_K_trace")):
            up = {side: solved(f"{side}-n{n}", metric) - solved(side, metric) for side in ("model", "control")}
            for side in up:
                row = uplift[(uplift["n_demos"] == n) & (uplift["side"] == side)].iloc[0]
                assert row[f"delta_{column}"] == pytest.approx(up[side].mean())
            row = diff[(diff["n_demos"] == n) & (diff["metric"] == metric)].iloc[0]
            assert row["difference"] == pytest.approx((up["model"] - up["control"]).mean())
    src = run.summary()["source"]["model"]
    assert src["O_K_trace"] == pytest.approx(solved("model", "O_K^trace").mean()) and "O_K_null" in src
