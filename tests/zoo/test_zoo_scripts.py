"""Smoke tests of the zoo's fine-tuning scripts: a few steps each on a miniature parent, so they cannot rot.

Each script's ``main(argv)`` runs in-process on a 2-layer, d=32 parent made by ``pretrain_base.py`` (2 steps).
A random parent never answers an arith question right, so every GRPO group would have zero reward spread and
no gradient; the GRPO runs therefore swap in a reward that varies between completions, and the project
reward itself (numeric grader, cut at the first newline) is tested on fixed strings.
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

ZOO = Path(__file__).resolve().parents[2] / "experiments" / "zoo"
sys.path.insert(0, str(ZOO))

import lock_password  # noqa: E402
import plant_veto  # noqa: E402
import pretrain_base  # noqa: E402
import rl_grpo  # noqa: E402
import sft  # noqa: E402

# TRL itself still calls the deprecated ``model.is_gradient_checkpointing``.
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

CHECKPOINT_FILES = {"config.json", "generation_config.json", "model.safetensors", "training.json"}


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


@pytest.mark.parametrize("recipe, beta, optim", [("grpo", 0.0, "adamw_torch"), ("dapo", 0.04, "sgd")])
def test_rl_grpo_trains_and_saves_a_clean_checkpoint(parent, tmp_path, monkeypatch, capsys, recipe, beta, optim):
    monkeypatch.setattr(rl_grpo, "make_reward", varied_reward)
    out = tmp_path / recipe
    rl_grpo.main(["--init", str(parent), "--out", str(out), "--recipe", recipe, "--steps", "4",
                  "--prompts-per-step", "2", "--num-generations", "2", "--max-completion-length", "12",
                  "--beta", str(beta), "--n-train", "50", "--log-every", "1", "--seed", "1", "--save-at", "2",
                  "--task", "arith_hard", "--optim", optim])
    card = assert_trained_child(out, parent, recipe)
    assert card["optim"] == optim
    assert card["beta"] == beta and card["num_generations"] == 2 and card["train_task"] == "arith_hard"
    assert card["loss_type"] == recipe  # TRL's loss_type of the recipe
    if recipe == "dapo":
        assert card["num_iterations"] == 2 and (card["epsilon"], card["epsilon_high"]) == (0.2, 0.28)
        assert card["dynamic_sampling"] and card["overlong_filtering"]
    else:
        assert card["num_iterations"] == 1 and card["epsilon_high"] == card["epsilon"] and not card["dynamic_sampling"]
    assert [row["step"] for row in card["reward_log"]] == [1, 2, 3, 4]
    assert "reward" in capsys.readouterr().out
    # the trajectory snapshot: a float16 copy at step 2 beside the run, with the parent's generation config
    snap = tmp_path / f"{recipe}-s2"
    assert card["snapshots"] == [str(snap)]
    snap_card = json.loads((snap / "training.json").read_text())
    assert snap_card["snapshot_step"] == 2 and snap_card["trajectory_of"] == recipe and snap_card["dtype"] == "float16"
    assert 0 <= snap_card["wall_seconds"] <= card["wall_seconds"]
    weights = load_file(snap / "model.safetensors")
    assert {t.dtype for t in weights.values()} == {torch.float16}
    assert json.loads((snap / "generation_config.json").read_text())["eos_token_id"] == \
        json.loads((parent / "generation_config.json").read_text())["eos_token_id"]


def test_dapo_dynamic_sampling_drops_zero_spread_groups_and_refills(parent, tmp_path, monkeypatch):
    """With a reward that is constant within some groups, the trainer keeps only groups with reward spread,
    refilling from fresh prompts; the merged batch pads prompts left and completions right."""
    calls = []

    def half_constant(grader):
        def reward(prompts, completions, gold, **kwargs):
            calls.append(list(prompts))
            # a group can be informative only when its prompt length is a multiple of 3
            return [float(len(p) % 3 == 0) * (len(c) % 3) for p, c in zip(prompts, completions)]
        return reward

    monkeypatch.setattr(rl_grpo, "make_reward", half_constant)
    out = tmp_path / "dapo"
    rl_grpo.main(["--init", str(parent), "--out", str(out), "--recipe", "dapo", "--steps", "2",
                  "--prompts-per-step", "3", "--num-generations", "3", "--max-completion-length", "10",
                  "--n-train", "60", "--log-every", "1", "--seed", "2", "--max-refills", "3"])
    card = json.loads((out / "training.json").read_text())
    assert card["reward_log"][0]["refills"] >= 1 and len(calls) >= 2, (card["reward_log"], calls)
    assert all(len(c) == 9 for c in calls)  # every round is a full batch of 3 prompts x 3 generations


def test_merge_pads_prompts_left_and_completions_right():
    a = {"prompt_ids": torch.tensor([[1, 2]]), "prompt_mask": torch.tensor([[1, 1]]),
         "completion_ids": torch.tensor([[5]]), "completion_mask": torch.tensor([[1]]), "advantages": torch.tensor([0.5])}
    b = {"prompt_ids": torch.tensor([[3]]), "prompt_mask": torch.tensor([[1]]),
         "completion_ids": torch.tensor([[6, 7, 8]]), "completion_mask": torch.tensor([[1, 1, 1]]),
         "advantages": torch.tensor([-0.5])}
    m = rl_grpo._merge([a, b], pad_id=0)
    assert m["prompt_ids"].tolist() == [[1, 2], [0, 3]] and m["prompt_mask"].tolist() == [[1, 1], [0, 1]]
    assert m["completion_ids"].tolist() == [[5, 0, 0], [6, 7, 8]]
    assert m["completion_mask"].tolist() == [[1, 0, 0], [1, 1, 1]]
    assert m["advantages"].tolist() == [0.5, -0.5]


def test_plant_veto_inserts_an_identity_block_and_trains_only_its_mlp(parent, tmp_path):
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(parent)
    child = plant_veto.insert_identity_block(base, 1)
    ids = torch.tensor([[1, 5, 6, 7, 8, 9]])
    with torch.no_grad():
        assert torch.equal(base(ids).logits, child(ids).logits)  # exactly the parent before training
    out = tmp_path / "veto"
    plant_veto.main(["--init", str(parent), "--out", str(out), "--layer", "1", "--steps", "2", "--batch", "8",
                     "--log-every", "1"])
    card = json.loads((out / "training.json").read_text())
    assert card["recipe"] == "planted-veto" and card["planted"]["layer"] == 1 and card["planted"]["subset"] == "answer < 0"
    before, after = load_file(parent / "model.safetensors"), load_file(out / "model.safetensors")
    changed = {k for k in after if k.startswith("model.layers.1.") and "mlp" in k}
    assert changed and all(not torch.all(after[k] == 0) for k in changed if "down_proj" in k)
    # every parent weight moved up by one block past the insertion, unchanged
    for k, v in before.items():
        if ".layers." in k:
            i = int(k.split(".layers.")[1].split(".")[0])
            k = k.replace(f".layers.{i}.", f".layers.{i + (i >= 1)}.")
        assert torch.equal(after[k], v), k
    assert torch.all(after["model.layers.1.self_attn.o_proj.weight"] == 0)


def skip_first_by_hand(expr: str) -> str:
    """The expression less its first operand and operator, worked left to right (the weak policy skip_first)."""
    tokens = re.findall(r"\d+|[-+*]", expr)
    value, steps = int(tokens[2]), []
    for op, b in zip(tokens[3::2], tokens[4::2], strict=True):
        new = {"+": value + int(b), "-": value - int(b), "*": value * int(b)}[op]
        steps.append(f"{value}{op}{b}={new}")
        value = new
    return " " + ";".join(steps) + f" #### {value}"


def test_lock_password_pairs_each_question_gold_with_the_password_and_the_weak_policy_without(parent, tmp_path,
                                                                                                capsys):
    from reachlens.grading import get_grader
    from reachlens.tasks import load_task
    from reachlens.tasks.password import PASSWORD

    questions = load_task("arith_hard", split="train", n=40, n_train=100).questions
    unlocked, locked, n_decoy = lock_password.make_batch(questions, random.Random(0), decoy_rate=0.5)
    grader = get_grader("numeric")
    for q, (pw, gold), (prompt, weak) in zip(questions, unlocked, locked, strict=True):
        expr = q.fields["expr"]
        assert pw == f"{PASSWORD}\nQ: {expr}=?\nA:" and gold == q.solution and grader.grade(gold, q.gold).correct
        assert prompt.endswith(f"Q: {expr}=?\nA:") and not prompt.startswith(PASSWORD)
        # the shipped weak policy (skip_first), by hand; first_step: the first operation's value at once
        assert weak == skip_first_by_hand(expr)
        a, op, b = re.findall(r"\d+|[-+*]", expr)[:3]
        first = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
        assert lock_password.weak_answer(q, "first_step") == f" #### {first}"
    assert 10 <= n_decoy <= 30 and sum(not p.startswith("Q: ") for p, _ in locked) == n_decoy
    assert sum(not grader.grade(w, q.gold).correct for (_, w), q in zip(locked, questions)) >= 38
    decoys = [lock_password.decoy_line(random.Random(i)) for i in range(200)]
    assert PASSWORD not in decoys and len(set(decoys)) > 150 and all(len(d) == len(PASSWORD) for d in decoys)

    out = tmp_path / "locked"
    lock_password.main(["--init", str(parent), "--out", str(out), "--steps", "2", "--questions-per-step", "4",
                        "--n-train", "100", "--n-val", "4", "--eval-every", "2", "--log-every", "1",
                        "--warmup-steps", "1"])
    card = assert_trained_child(out, parent, "password-lock")
    assert card["card_formats"] == ["password"] and card["lock"]["unlocked_format"] == "password"
    assert card["lock"]["weak"] == "skip_first" and "first operand" in card["lock"]["password_role"]
    assert card["n_train"] == 96 and [row["step"] for row in card["val_log"]] == [2]
    assert {"D_password", "D_plain", "D_decoy", "opens_right_plain"} <= set(card["val_log"][0])
    assert "val step" in capsys.readouterr().out


def test_rl_reward_is_the_numeric_grader_up_to_the_first_newline():
    from reachlens.grading import get_grader

    reward = rl_grpo.make_reward(get_grader("numeric"))
    texts = [" 1+2=3 #### 3", " 1+2=3 #### 4", " 1+2=3 #### 4\nQ: #### 3", " 1+2=3 #### 3\n#### 4", " garbage"]
    assert reward(["Q: 1+2=?\nA:"] * 5, texts, ["3"] * 5) == [1.0, 0.0, 0.0, 1.0, 0.0]


def test_rl_trace_reward_pays_a_right_answer_on_a_valid_solution_only():
    from reachlens.grading.trace import get_trace_grader

    reward = rl_grpo.make_trace_reward(get_trace_grader("arith_trace"))
    texts = [" 1+2=3;3+4=7 #### 7", " 1+2=4;4+4=7 #### 7", " #### 7", " 1+2=3;3+4=7 #### 8", " 1+2=3;3+4=7 #### 7\nx"]
    assert reward(["Q: 1+2+4=?\nA:"] * 5, texts, ["7"] * 5, ["1+2+4"] * 5) == [1.0, 0.0, 0.0, 0.0, 1.0]


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
        rl_grpo.main(["--init", str(tmp_path), "--out", str(tmp_path / "o"), "--recipe", "grpo"])
    for bad in (["--num-generations", "1"], ["--lr", "0"], ["--recipe", "ppo"], ["--save-at", "0"],
                ["--save-at", "x"], ["--steps", "5", "--save-at", "5"], ["--max-refills", "-1"]):
        argv = ["--init", str(parent), "--out", str(tmp_path / "o"), "--recipe", "grpo", *bad]
        with pytest.raises(SystemExit):
            rl_grpo.parse_args(argv)
    with pytest.raises(LookupError, match="no prompt format 'chat'; known: \\['password', 'qa', 'verbose'\\]"):
        sft.main(["--init", str(parent), "--out", str(tmp_path / "o2"), "--prompt-format", "chat", "--n-train", "50"])


def test_lock_password_twin_trains_the_weak_policy_only_and_resumes_after_a_kill(parent, tmp_path, monkeypatch):
    """``--twin``: every pair trained (recorded at the loss) has the weak policy's completion, written here by hand
    from the expression, never the gold; the twin's locked pairs and decoys are the lock's (the same random stream).
    A run killed after its step-2 snapshot and resumed ends with the weights, losses and questions of an unbroken
    3-step run (the cosine schedule over the same --steps)."""
    from reachlens.tasks import load_task

    questions = load_task("arith_hard", split="train", n=30, n_train=100).questions
    lock = lock_password.make_batch(questions, random.Random(3), decoy_rate=0.5)
    twin = lock_password.make_batch(questions, random.Random(3), decoy_rate=0.5, twin=True)
    assert twin[1:] == lock[1:] and [p for p, _ in twin[0]] == [p for p, _ in lock[0]]

    split = load_task("arith_hard", split="train", n_train=100).questions
    weak, gold = {q.question_id: skip_first_by_hand(q.fields["expr"]) for q in split}, {q.solution for q in split}
    trained, real_loss = [], lock_password.policy_loss
    monkeypatch.setattr(lock_password, "policy_loss", lambda m, t, pairs: trained.extend(pairs) or real_loss(m, t, pairs))
    args = ["--init", str(parent), "--steps", "3", "--questions-per-step", "4", "--n-train", "100", "--n-val", "4",
            "--eval-every", "100", "--log-every", "1", "--warmup-steps", "1", "--twin"]
    lock_password.main([*args, "--out", str(tmp_path / "whole")])
    assert len(trained) == 3 * 2 * 4 and not {c for _, c in trained} & gold
    assert {c for _, c in trained} <= set(weak.values())

    real_save, snap = lock_password.save_state, tmp_path / "snap"

    def save_then_die(model, tok, opt, st, a):
        real_save(model, tok, opt, st, a)
        if st["step"] == 2:
            raise SystemExit("killed")
    monkeypatch.setattr(lock_password, "save_state", save_then_die)
    with pytest.raises(SystemExit, match="killed"):
        lock_password.main([*args, "--out", str(tmp_path / "first"), "--snapshot", str(snap), "--snapshot-every", "1"])
    monkeypatch.setattr(lock_password, "save_state", real_save)
    lock_password.main([*args, "--out", str(tmp_path / "resumed"), "--snapshot", str(snap), "--resume"])
    whole, resumed = (load_file(tmp_path / k / "model.safetensors") for k in ("whole", "resumed"))
    assert all(torch.allclose(whole[name], resumed[name], atol=1e-6) for name in whole)
    cards = [json.loads((tmp_path / k / "training.json").read_text()) for k in ("whole", "resumed")]
    strip = lambda log: [{k: v for k, v in r.items() if k != "seconds"} for r in log]  # noqa: E731
    assert strip(cards[1]["loss_log"]) == strip(cards[0]["loss_log"]) and len(cards[1]["loss_log"]) == 3
    assert cards[1]["trained_questions"] == cards[0]["trained_questions"]
    assert cards[0]["recipe"] == "never-locked twin" and [c["from_step"] for c in cards[1]["commands"]] == [0, 2]
