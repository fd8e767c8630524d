"""The shipped zoo: every lineage member is listed, loads and answers; its card holds what the issue asks
for and is reproduced, sample for sample, by the audit command it gives."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch

from reachlens import Protocol, audit
from reachlens.cli import main as cli
from reachlens.models import load_model
from reachlens.models.zoo import native_format, zoo_entries, zoo_root
from reachlens.tasks import load_task

ZOO_SCRIPTS = Path(__file__).resolve().parents[2] / "experiments" / "zoo"
LINEAGE = {"base": "pretrain", "grpo": "grpo", "dapo": "dapo", "sft": "sft", "sft-grpo": "grpo"}


@pytest.fixture(autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_zoo_list_prints_the_lineage(capsys):
    assert cli(["zoo", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(LINEAGE) <= set(rows), lines
    for name, recipe in LINEAGE.items():
        assert rows[name][1] == recipe
    # the lineage: RL and SFT from the base, SFT-then-RL from the SFT model
    parents = {e.name: e.training.get("parent") for e in zoo_entries()}
    assert parents["grpo"].endswith("base") and parents["dapo"].endswith("base")
    assert parents["sft"].endswith("base") and parents["sft-grpo"].endswith("sft")


@pytest.mark.parametrize("name", sorted(LINEAGE))
def test_each_zoo_model_loads_and_answers_in_its_native_format(name):
    fmt = native_format(f"zoo:{name}")
    assert fmt in {"qa", "verbose"}
    task = load_task("arith", split="test", n=20)
    result = audit(load_model(f"zoo:{name}"), task, Protocol("arith", k=1, temperature=0.8, max_new_tokens=96,
                                                              prompt_format=fmt))
    answered = result.questions["deployed_answer"].notna().mean()
    assert answered >= 0.9, f"zoo:{name} extracted an answer for only {answered:.0%} of 20 questions"
    assert result.D > 0, f"zoo:{name} answered none of 20 questions right in its native format {fmt!r}"


def test_cards_carry_the_required_fields_and_the_zoo_fits():
    entries = {e.name: e for e in zoo_entries()}
    for name in LINEAGE:
        e = entries[name]
        text = (e.path / "MODEL_CARD.md").read_text()
        command = e.training["command"]
        assert command.startswith("python experiments/zoo/") and command in text
        assert f"- seed: {e.training['seed']}" in text
        assert re.search(r"wall time on the 2-core CPU: \d+(\.\d+)? s", text)
        assert f"{e.training['parameters']:,}" in text
        card = e.card["audit"]
        assert card["command"] in text and f"--k {card['k']}" in card["command"] and card["n"] == 300
        assert f"| {card['D']:.3f} | {card['O_K']:.3f} |" in text
        assert (e.path / "model.safetensors").is_file() and not list(e.path.glob("*.bin"))
    total = sum(f.stat().st_size for f in zoo_root().rglob("*") if f.is_file())
    assert total < 60 * 2**20, f"the zoo takes {total / 2**20:.1f} MB (limit 60 MB)"


def test_the_base_has_the_reachable_but_unrealized_headroom_the_study_needs():
    card = {e.name: e.card["audit"] for e in zoo_entries()}["base"]
    assert 0.20 <= card["D"] <= 0.60 and card["O_K"] >= card["D"] + 0.20, card


def test_every_card_is_reproduced_by_its_audit_command(capsys):
    """The card's own command on its first 12 questions gives the card's rows exactly (same seed stream)."""
    sys.path.insert(0, str(ZOO_SCRIPTS))
    import check_cards

    assert check_cards.main(["--names", *LINEAGE, "--n", "12"]) == 0
    out = capsys.readouterr().out
    assert out.count("(first 12 of 300)") == len(LINEAGE) and out.count("identical") == len(LINEAGE), out
