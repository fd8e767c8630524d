"""The shipped zoo: every lineage member, trajectory snapshot and the planted veto is listed, loads and
answers; its card holds what the issue asks for and is reproduced, sample for sample, by the audit command
it gives; the RL models beat the base on their own objective; the planted veto sits where its card says."""

from __future__ import annotations

import json
import re
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from reachlens import Protocol, audit
from reachlens.cli import main as cli
from reachlens.models import load_model
from reachlens.models.zoo import native_format, zoo_entries, zoo_root
from reachlens.stats import paired_bootstrap_ci
from reachlens.tasks import load_task

ZOO_SCRIPTS = Path(__file__).resolve().parents[2] / "experiments" / "zoo"
LINEAGE = {"base": "pretrain", "grpo": "grpo", "dapo": "dapo", "sft": "sft", "sft-grpo": "grpo"}
TRAJECTORY = {"grpo-s25": 25, "grpo-s50": 50, "grpo-s100": 100, "grpo-s150": 150}
VETO = "veto"
ALL = sorted([*LINEAGE, *TRAJECTORY, VETO])


@pytest.fixture(scope="module")
def entries():
    return {e.name: e for e in zoo_entries()}


def test_zoo_list_prints_the_lineage_the_trajectory_and_the_veto(capsys, entries):
    assert cli(["zoo", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(ALL) <= set(rows), lines
    for name, recipe in LINEAGE.items():
        assert rows[name][1] == recipe
    parents = {name: Path(e.training.get("parent", "")).name for name, e in entries.items()}
    # the lineage: RL, SFT and the veto from the base, SFT-then-RL from the SFT model
    assert parents["grpo"] == parents["dapo"] == parents["sft"] == parents[VETO] == "base"
    assert parents["sft-grpo"] == "sft"
    # RL-only trains on the arith train split (the pretraining mix, where the base's reward has room; the hard
    # tier's sparse reward did not train: notes/zoo.md); DAPO carries the recipe's pieces
    for name in ("grpo", "dapo"):
        assert entries[name].training["train_task"] == "arith"
    dapo = entries["dapo"].training
    assert dapo["loss_type"] == "dapo" and dapo["num_iterations"] >= 2 and dapo["epsilon_high"] > dapo["epsilon"]
    assert dapo["dynamic_sampling"] and dapo["overlong_filtering"]
    # one stated budget for both recipes: the same number of generated batches (DAPO takes two optimizer
    # steps on each, so twice GRPO's optimizer steps), the same batch shape
    grpo = entries["grpo"].training
    assert dapo["steps"] // dapo["num_iterations"] == grpo["steps"] // grpo["num_iterations"]
    assert [dapo[k] for k in ("prompts_per_step", "num_generations", "lr")] == \
        [grpo[k] for k in ("prompts_per_step", "num_generations", "lr")]
    assert any(row.get("refills", 0) > 0 for row in dapo["reward_log"]), "dynamic sampling never refilled a batch"


def test_the_trajectory_is_one_run_kept_compact(entries):
    grpo = entries["grpo"].training
    assert sorted(Path(p).name for p in grpo["snapshots"]) == sorted(TRAJECTORY)
    for name, step in TRAJECTORY.items():
        t = entries[name].training
        assert t["trajectory_of"] == "grpo" and t["snapshot_step"] == step and t["command"] == grpo["command"]
        header = entries[name].path / "model.safetensors"
        with open(header, "rb") as fh:
            meta = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
        assert {v["dtype"] for k, v in meta.items() if k != "__metadata__"} == {"F16"}, name
        assert entries[name].size_bytes < 4 * 2**20


@pytest.mark.parametrize("name", ALL)
def test_each_zoo_model_loads_and_answers_in_its_native_format(name):
    fmt = native_format(f"zoo:{name}")
    assert fmt in {"qa", "verbose"}
    task = load_task("arith", split="test", n=20)
    result = audit(load_model(f"zoo:{name}"), task, Protocol("arith", k=1, temperature=0.8, max_new_tokens=96,
                                                              prompt_format=fmt))
    answered = result.questions["deployed_answer"].notna().mean()
    assert answered >= 0.9, f"zoo:{name} extracted an answer for only {answered:.0%} of 20 questions"
    assert result.D > 0, f"zoo:{name} answered none of 20 questions right in its native format {fmt!r}"


def test_cards_carry_the_required_fields_and_the_zoo_fits(entries):
    for name in ALL:
        e = entries[name]
        text = (e.path / "MODEL_CARD.md").read_text()
        command = e.training["command"]
        assert command.startswith("python experiments/zoo/") and command in text
        assert f"- seed: {e.training['seed']}" in text
        assert re.search(r"wall time on the 2-core CPU: \d+(\.\d+)? s", text)
        assert f"{e.training['parameters']:,}" in text
        tasks = {"arith_hard"} if name in TRAJECTORY else {"arith", "arith_hard"}
        native = e.training.get("prompt_format", "qa")
        if native != "qa":  # the prompt-format control: also measured in its own format on the hard tier
            tasks.add(f"arith_hard@{native}")
        assert set(e.card["audits"]) == tasks, name
        for key, card in e.card["audits"].items():
            task, _, fmt = key.partition("@")
            assert card["command"] in text and f"--task {task} " in card["command"] and card["n"] == 300
            assert (f"--prompt-format {fmt} " in card["command"]) == bool(fmt)
            assert card["k"] == 64 and "--temperature 0.8" in card["command"]
            assert f"| {card['D']:.3f} | {card['O_K']:.3f} |" in text
        assert (e.path / "model.safetensors").is_file() and not list(e.path.glob("*.bin"))
    total = sum(f.stat().st_size for f in zoo_root().rglob("*") if f.is_file())
    assert total < 60 * 2**20, f"the zoo takes {total / 2**20:.1f} MB (limit 60 MB)"


def test_the_base_has_room_both_ways_on_the_hard_tier(entries):
    mix = entries["base"].card["audits"]["arith"]
    assert 0.20 <= mix["D"] <= 0.60 and mix["O_K"] >= mix["D"] + 0.20, mix
    hard = entries["base"].card["audits"]["arith_hard"]
    assert 0.15 <= hard["D"] <= 0.50 and 0.50 <= hard["O_K"] <= 0.85, hard


def _pass1(card: dict) -> np.ndarray:
    return np.asarray(card["questions"]["n_correct"], dtype=float) / card["k"]


@pytest.mark.parametrize("name", ["grpo", "dapo"])
def test_rl_raises_its_own_objective_beyond_the_paired_interval(entries, name):
    """Test pass@1 on the task RL trained on (its test split) rises, and the paired 95% bootstrap interval
    excludes zero."""
    task = entries[name].training["train_task"]
    base, rl = entries["base"].card["audits"][task], entries[name].card["audits"][task]
    assert base["questions"]["question_id"] == rl["questions"]["question_id"]
    diff = _pass1(rl) - _pass1(base)
    lo, hi = paired_bootstrap_ci(diff, n_boot=4000, seed=0)
    assert lo > 0, f"{name}: pass@1 {rl['pass_at_k']['1']:.3f} vs base {base['pass_at_k']['1']:.3f}, CI [{lo:.3f}, {hi:.3f}]"


def test_the_planted_veto_is_where_its_card_says(entries):
    """Silencing the planted MLP gives the parent back exactly; the plant makes negative answers wrong."""
    from reachlens.engine import Row, generate
    from reachlens.interventions.ablation import zero_ablation

    t = entries[VETO].training
    layer = t["planted"]["layer"]
    assert t["planted"]["subset"] == "answer < 0" and t["planted"]["component"] == "mlp"
    veto, base = load_model(f"zoo:{VETO}"), load_model("zoo:base")
    assert len(veto.blocks) == len(base.blocks) + 1
    task = load_task("arith", split="test")
    questions = task.questions[:80]
    prompts = [task.prompt(q) for q in questions]
    params = Protocol.greedy("arith", max_new_tokens=96, stop=("\n",))
    rows = [Row(i) for i in range(len(prompts))]
    with torch.no_grad():
        b = [o.text for o in generate(base, prompts, rows, params)]
        v = [o.text for o in generate(veto, prompts, rows, params)]
        with veto.hooks(fwd_hooks=zero_ablation(veto, layer, "mlp")):
            silenced = [o.text for o in generate(veto, prompts, rows, params)]
    assert silenced == b  # the planted block is the only difference, and silencing it removes it
    from reachlens.grading import get_grader

    grader = get_grader("numeric")
    answer = lambda text: text.rsplit("#### ", 1)[-1].strip()  # noqa: E731
    negative = [int(q.gold) < 0 for q in questions]
    right = lambda texts: [grader.grade(t, q.gold).correct for t, q in zip(texts, questions)]  # noqa: E731
    # on the subset the veto suppresses the answer's minus sign ("####   16" for -16): none is realized,
    # where the parent realizes some
    assert sum(negative) >= 10
    assert not any(r for r, n in zip(right(v), negative) if n), v
    assert sum(r for r, n in zip(right(b), negative) if n) >= 3
    # elsewhere the answers are mostly the parent's (the plant's side effects: near-ties of the slips re-rolled)
    same = [answer(bt) == answer(vt) for bt, vt, n in zip(b, v, negative) if not n]
    assert sum(same) >= 0.8 * len(same), list(zip(b, v))


def test_make_zoo_issues_the_command_each_shipped_checkpoint_records(entries):
    """`make zoo` (build_zoo.py) rebuilds each checkpoint with the very command its training.json records (a
    checkpoint made under an older script records the current equivalent as ``rebuild_command``)."""
    sys.path.insert(0, str(ZOO_SCRIPTS))
    import build_zoo

    zoo = Path("reachlens/assets/zoo")
    built = {}
    for stage in build_zoo.commands(zoo):
        for name, argv in stage:
            script = Path(argv[1]).relative_to(ZOO_SCRIPTS.parents[1])
            built[name] = " ".join(["python", str(script), *argv[2:]])
    assert set(built) == set(LINEAGE) | {VETO, "locked", "locked-twin"}  # their own tests: test_locked_zoo.py, test_locked_twin.py
    for name, command in built.items():
        t = entries[name].training
        assert command == t.get("rebuild_command", t["command"]), name
    assert sorted(build_zoo.snapshots("grpo")) == sorted(TRAJECTORY)


def test_every_card_is_reproduced_by_its_audit_command(capsys, entries):
    """Each card's own command on its first 12 questions gives the card's rows exactly (same seed stream)."""
    sys.path.insert(0, str(ZOO_SCRIPTS))
    import check_cards

    assert check_cards.main(["--names", *ALL, "--n", "12"]) == 0
    out = capsys.readouterr().out
    n_cards = sum(len(entries[name].card["audits"]) for name in ALL)
    assert n_cards == 2 * (len(LINEAGE) + 1) + len(TRAJECTORY) + 2  # + the SFT line's format control
    assert out.count("(first 12 of 300)") == n_cards and out.count("identical") == n_cards, out


def test_tables_give_the_trajectory_and_the_lineage_from_the_cards(tmp_path, entries):
    """experiments/zoo/tables.py: one row per trajectory point (base = step 0, grpo = its last step), the
    lineage with the prompt-format control rows; the numbers are the cards' (recomputed here)."""
    sys.path.insert(0, str(ZOO_SCRIPTS))
    import tables

    assert tables.main(["--task", "arith_hard", "--out", str(tmp_path)]) == 0
    traj = (tmp_path / "trajectory.md").read_text().splitlines()
    rows = [line.split(" | ") for line in traj if line.startswith("| ") and line[2].isdigit()]
    steps = [int(r[0].strip("| ")) for r in rows]
    assert steps == [0, *sorted(TRAJECTORY.values()), entries["grpo"].training["steps"]]
    for r in rows:
        card = entries[r[1]].card["audits"]["arith_hard"]
        assert r[2].startswith(f"{card['D']:.3f} [") and r[3].startswith(f"{card['O_K']:.3f} [")
    lineage = (tmp_path / "lineage.md").read_text()
    assert "| sft [verbose] | sft | base |" in lineage and "| sft-grpo [verbose] | grpo | sft [verbose] |" in lineage
    assert (tmp_path / "trajectory.html").stat().st_size > 100_000  # plotly, self-contained
