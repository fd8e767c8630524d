"""Smoke tests of the zoo's fine-tuning scripts: a few steps each on a miniature parent, so they cannot rot.

Each script's ``main(argv)`` runs in-process on a 2-layer, d=32 parent made by ``pretrain_base.py`` (2 steps).
A random parent never answers an arith question right, so every GRPO group would have zero reward spread and
no gradient; the GRPO runs therefore swap in a reward that varies between completions, and the project
reward itself (numeric grader, cut at the first newline) is tested on fixed strings.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

ZOO = Path(__file__).resolve().parents[2] / "experiments" / "zoo"
sys.path.insert(0, str(ZOO))

import pretrain_base  # noqa: E402
import rl_grpo  # noqa: E402
import sft  # noqa: E402

# TRL itself still calls the deprecated ``model.is_gradient_checkpointing``.
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

CHECKPOINT_FILES = {"config.json", "generation_config.json", "model.safetensors", "training.json"}


@pytest.fixture(autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()  # the scripts set one thread; leave the session as it was
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("zoo") / "base"
    pretrain_base.main(["--out", str(folder), "--steps", "2", "--layers", "2", "--d-model", "32", "--batch", "4",
                        "--log-every", "1"])
    return folder


def assert_trained_child(out: Path, parent: Path, recipe: str) -> dict:
    from reachlens.models import load_model

    files = {p.name for p in out.iterdir()}
    assert CHECKPOINT_FILES <= files, files
    assert {f for f in files - CHECKPOINT_FILES if not f.startswith(("tokenizer", "special_tokens"))} == set()
    model = load_model(str(out))
    assert model.tokenizer.padding_side == "left"
    before, after = load_file(parent / "model.safetensors"), load_file(out / "model.safetensors")
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before), "training left every weight unchanged"
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == \
        json.loads((parent / "generation_config.json").read_text())["eos_token_id"]
    card = json.loads((out / "training.json").read_text())
    assert card["recipe"] == recipe
    assert card["parent"] == str(parent)
    assert card["parent_card"]["recipe"] == "pretrain"
    assert json.loads((parent / "training.json").read_text())["prompt_format"] == "qa"  # what pretraining used
    assert card["prompt_format"] in {"qa", "verbose"}
    for key in ("command", "seed", "steps", "lr", "wall_seconds", "parameters"):
        assert key in card, key
    return card


def varied_reward(grader):
    def spread(prompts, completions, gold, **kwargs) -> list[float]:
        return [sum(map(ord, text)) % 97 / 97 for text in completions]  # differs between random completions
    return spread


@pytest.mark.parametrize("loss_type, beta", [("grpo", 0.0), ("dapo", 0.04)])
def test_rl_grpo_trains_and_saves_a_clean_checkpoint(parent, tmp_path, monkeypatch, capsys, loss_type, beta):
    monkeypatch.setattr(rl_grpo, "make_reward", varied_reward)
    out = tmp_path / loss_type
    rl_grpo.main(["--init", str(parent), "--out", str(out), "--loss-type", loss_type, "--steps", "2",
                  "--prompts-per-step", "2", "--num-generations", "2", "--max-completion-length", "12",
                  "--beta", str(beta), "--n-train", "50", "--log-every", "1", "--seed", "1"])
    card = assert_trained_child(out, parent, loss_type)
    assert card["loss_type"] == loss_type and card["beta"] == beta and card["num_generations"] == 2
    assert [row["step"] for row in card["reward_log"]] == [1, 2]
    assert "reward" in capsys.readouterr().out


def test_rl_reward_is_the_numeric_grader_up_to_the_first_newline():
    from reachlens.grading import get_grader

    reward = rl_grpo.make_reward(get_grader("numeric"))
    texts = [" 1+2=3 #### 3", " 1+2=3 #### 4", " 1+2=3 #### 4\nQ: #### 3", " 1+2=3 #### 3\n#### 4", " garbage"]
    assert reward(["Q: 1+2=?\nA:"] * 5, texts, ["3"] * 5) == [1.0, 0.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize("fmt", ["qa", "verbose"])
def test_sft_trains_on_completions_and_saves_a_clean_checkpoint(parent, tmp_path, capsys, fmt):
    out = tmp_path / "sft"
    sft.main(["--init", str(parent), "--out", str(out), "--steps", "2", "--batch", "4", "--warmup-steps", "0",
              "--n-train", "50", "--log-every", "1", "--seed", "1", "--prompt-format", fmt])
    card = assert_trained_child(out, parent, "sft")
    assert card["batch"] == 4 and len(card["loss_log"]) == 2
    assert card["prompt_format"] == fmt and fmt in card["data"]
    assert "loss" in capsys.readouterr().out


def test_scripts_refuse_bad_values(parent, tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("")
    with pytest.raises(SystemExit, match="already exists"):
        sft.main(["--init", str(parent), "--out", str(tmp_path / "taken")])
    with pytest.raises(SystemExit, match="not a checkpoint folder"):
        rl_grpo.main(["--init", str(tmp_path), "--out", str(tmp_path / "o"), "--loss-type", "grpo"])
    for bad in (["--num-generations", "1"], ["--lr", "0"], ["--loss-type", "ppo"]):
        argv = ["--init", str(parent), "--out", str(tmp_path / "o"), "--loss-type", "grpo", *bad]
        with pytest.raises(SystemExit):
            rl_grpo.parse_args(argv)
    with pytest.raises(LookupError, match="no prompt format 'chat'; known: \\['qa', 'verbose'\\]"):
        sft.main(["--init", str(parent), "--out", str(tmp_path / "o2"), "--prompt-format", "chat", "--n-train", "50"])
