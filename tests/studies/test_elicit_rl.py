"""``reachlens elicit --method rl``: GRPO copies of the model and its control on the same train questions, rewarded by
the task's trace grader; a run killed with SIGKILL after its first copy resumes to the end and reuses that copy.

References: the reward on hand-written completions (a right answer on a valid chain, the same answer on a wrong
chain, a wrong answer); the questions against ``zoo:locked``'s recorded training questions; the reused copy by its
file's modification time; the card's reward curve against the steps asked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reachlens import load_task, read_run
from reachlens.cli import main
from reachlens.errors import ReachlensError
from reachlens.studies.elicitation_split import trained_question_ids
from reachlens.studies.rl_finetune import RLConfig, reward_function

ROOT = Path(__file__).resolve().parents[2]
ARGV = ["elicit", "zoo:locked", "--control", "zoo:base", "--method", "rl", "--task", "arith_hard", "--n", "2",
        "--k", "1", "--max-new-tokens", "32", "--demos", "2", "--steps", "2", "--rl-generations", "2",
        "--rl-prompts", "1"]


def test_the_reward_is_the_trace_grader_on_the_first_line():
    reward, line = reward_function(load_task("arith_hard", n=1))
    texts = [" 1+2=3;3+4=7 #### 7", " 1+2=4;4+3=7 #### 7", " 1+2=3;3+4=7 #### 8", " 1+2=3;3+4=7 #### 7\nQ: 1"]
    assert reward(["p"] * 4, texts, ["7"] * 4, ["1+2+4"] * 4) == [1.0, 0.0, 0.0, 1.0]
    assert line.startswith("arith_trace")


def test_bad_rl_settings_are_refused(tmp_path):
    with pytest.raises(ReachlensError, match="num_generations"):
        RLConfig(num_generations=1)
    assert main([*ARGV, "--held-out", "3", "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()


def test_a_killed_rl_run_resumes_and_reuses_its_finished_copy(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "reachlens", *ARGV, "--out", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = out / "checkpoints" / "model-n2" / "model.safetensors"
    while not first.is_file() and proc.poll() is None:
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert first.is_file() and not (out / "checkpoints" / "control-n2").exists(), "killed before the end"
    assert read_run(out).record.status == "interrupted"
    stamp = first.stat().st_mtime_ns
    assert main([*ARGV, "--out", str(out)]) == 0
    assert first.stat().st_mtime_ns == stamp, "the resumed run reuses the finished copy"
    run = read_run(out)
    assert run.record.status == "complete" and run.record.options["method"] == "rl"
    assert not list((out / "checkpoints").glob(".finetune-*"))
    seen = trained_question_ids("zoo:locked", load_task("arith_hard", split="train"))
    for side in ("model", "control"):
        card = json.loads((out / "checkpoints" / f"{side}-n2" / "training.json").read_text())
        assert card["recipe"] == "elicitation_grpo" and card["training"]["trainer"] == "trl.GRPOTrainer"
        assert [r["step"] for r in card["reward_curve"]] == [1, 2]
        assert len(card["questions"]) == 2 and not set(card["questions"]) & seen
    assert set(run.difference()["n_demos"]) == {2}
