"""A probe run's lucky-guess null (issue 56, item 3): each reach figure of the bank (greedy, each probe, each arm,
each named union) beside the share its own candidates reach when each question is scored against the gold of
another question of the same kind. Checked against a brute force over every derangement within the kinds (written
here: kinds by sign and digit count), a source that never hits another's gold, and the run's summary, report and
``reachlens show``, with the golds of the task built again."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from reachlens import Protocol, load_task
from reachlens.cli.cmd_show import format_run
from reachlens.probes import ProbeRun
from reachlens.probes.bank import bank_frame, bank_row
from reachlens.probes.summary import default_unions, probe_summary, probe_tables
from reachlens.report.probe_report import _sections
from reachlens.store import RunRecord

SAMPLING, GRAFT = "sampling:k=3", "graft:kind=zero:layer=1"
LABELS = [SAMPLING, GRAFT]
# two kinds (two digits: 4 questions, one digit: 3), so no question is alone in its kind
GOLDS = {"q0": "12", "q1": "34", "q2": "56", "q3": "78", "q4": "5", "q5": "7", "q6": "9"}
# per question: the greedy answer, the three samples, the graft's two (never another question's gold: its own or 999)
ANSWERS = {
    "q0": (["34"], ["12", "56", "1"], ["12", "999"]),
    "q1": (["12"], ["78", "3", "34"], ["999", "999"]),
    "q2": (["2"], ["12", "34", "56"], ["56", "999"]),
    "q3": (["78"], ["4", "4", "4"], ["999", "78"]),
    "q4": (["7"], ["9", "5", "12"], ["5", "999"]),
    "q5": (["1"], ["5", "2", "3"], ["999", "999"]),
    "q6": (["9"], ["7", "5", "9"], ["9", "999"]),
}


def _bank(golds: dict[str, str], answers: dict[str, tuple]) -> pd.DataFrame:
    rows = []
    for qid, per in answers.items():
        for probe, values in zip(("greedy", SAMPLING, GRAFT), per):
            for j, a in enumerate(values):
                c = {"question_id": qid, "candidate_idx": j, "text": f" #### {a}", "answer": a,
                     "correct": a == golds[qid], "scored": True, "finish_reason": "stop", "n_tokens": 4,
                     "mean_logprob": -1.0}
                rows.append(bank_row(c, probe, probe, probe == GRAFT))
    return bank_frame(rows)


BANK = _bank(GOLDS, ANSWERS)


def _kind(gold: str) -> str:
    return ("-" if int(gold) < 0 else "+") + str(len(str(abs(int(gold)))))


def _derangements(ids: list[str]) -> list[dict[str, str]]:
    return [dict(zip(ids, p)) for p in itertools.permutations(ids) if all(a != b for a, b in zip(ids, p))]


def brute_force(probes: list[str]) -> tuple[float, np.ndarray]:
    """The exact null of the candidates of ``probes``: over every derangement within each kind (all combinations),
    the share of questions one of whose candidates equals the borrowed gold; its mean and every value."""
    kinds = {}
    for q, g in GOLDS.items():
        kinds.setdefault(_kind(g), []).append(q)
    assert all(len(ids) > 1 for ids in kinds.values())
    mine = {q: {a for p, values in zip(("greedy", SAMPLING, GRAFT), ANSWERS[q]) if p in probes for a in values}
            for q in GOLDS}
    shares = []
    for combo in itertools.product(*(_derangements(ids) for ids in kinds.values())):
        borrowed = {q: d for part in combo for q, d in part.items()}
        shares.append(np.mean([GOLDS[borrowed[q]] in mine[q] for q in GOLDS]))
    return float(np.mean(shares)), np.array(shares)


def _reach(probes: list[str]) -> float:
    return np.mean([any(a == GOLDS[q] for p, values in zip(("greedy", SAMPLING, GRAFT), ANSWERS[q]) if p in probes
                        for a in values) for q in GOLDS])


def test_each_source_null_against_a_brute_force_over_every_derangement():
    golds = pd.Series(GOLDS)
    table = probe_tables(BANK, LABELS, default_unions(LABELS), golds=golds)["reach"].set_index("source")
    for source, probes in (("greedy", ["greedy"]), (SAMPLING, [SAMPLING]), ("O[greedy+sampling]", ["greedy", SAMPLING])):
        mean, shares = brute_force(probes)
        row = table.loc[source]
        assert row["O"] == pytest.approx(_reach(probes))
        assert row["O_null"] == pytest.approx(mean) and mean > 0
        assert np.quantile(shares, 0.8) <= row["O_null_p95"] <= shares.max()  # 1000 draws of the same distribution
        assert row["O_minus_null"] == pytest.approx(row["O"] - mean)
        assert row["O_minus_null_lo"] <= row["O_minus_null"] <= row["O_minus_null_hi"]


def test_a_source_that_never_hits_another_question_gold_has_null_zero():
    row = probe_tables(BANK, LABELS, [], golds=pd.Series(GOLDS))["reach"].set_index("source").loc[GRAFT]
    assert brute_force([GRAFT])[0] == 0
    assert (row["O_null"], row["O_null_p95"]) == (0.0, 0.0)
    assert row["O_minus_null"] == pytest.approx(row["O"]) and row["O"] == pytest.approx(_reach([GRAFT]))
    assert row["O"] > 0 and row["O_minus_null_lo"] > 0


def test_without_golds_no_null_and_a_missing_gold_undefined():
    assert "O_null" not in probe_tables(BANK, LABELS, [])["reach"].columns
    assert "D_null" not in probe_summary(BANK, LABELS, [])
    partial = pd.Series({q: g for q, g in GOLDS.items() if q != "q3"})
    row = probe_tables(BANK, LABELS, [], golds=partial)["reach"].iloc[0]
    assert math.isnan(row["O_null"]) and math.isnan(row["O_minus_null_hi"])


def _run(data: dict, task) -> ProbeRun:
    """A probe run of a hand-built bank on ``task``: each question's candidates the golds of its neighbours."""
    golds = {q.question_id: q.gold for q in task.questions}
    ids = list(golds)
    answers = {q: ([golds[ids[i - 1]]], [golds[q], golds[ids[i - 2]], "0"], [golds[ids[i - 3]], "0"])
               for i, q in enumerate(ids)}
    record = RunRecord.new("probe", Protocol.greedy("arith", max_new_tokens=8), {"spec": "hand-built"}, data,
                           {"probes": LABELS}, {"unions": default_unions(LABELS)})
    return ProbeRun(_bank(golds, answers), record=record)


def test_the_run_builds_its_golds_again_and_its_summary_report_and_show_carry_the_null():
    task = load_task("arith", n=8)
    run = _run(dict(task.data_identity), task)
    s = run.summary()
    by_hand = pd.Series({q.question_id: q.gold for q in task.questions})
    want = probe_tables(run.candidates, LABELS, run.unions, golds=by_hand)["reach"].set_index("source")
    assert s["D_null"] == pytest.approx(want.loc["greedy", "O_null"]) and s["D_null"] > 0
    for label in LABELS:
        p = s["probes"][label]
        assert p["O_null"] == pytest.approx(want.loc[label, "O_null"])
        assert p["O_minus_null_ci"] == pytest.approx(list(want.loc[label, ["O_minus_null_lo", "O_minus_null_hi"]]))
    assert {"O_null", "O_null_p95", "O_minus_null"} <= set(s["unions"]["O[greedy+sampling]"])
    _, md = _sections({"reach": run.analysis["reach"]})
    text = "\n".join(md)
    assert "| O_null " in text and "| O_null_p95 " in text and "| O_minus_null " in text
    assert "O_null: the lucky-guess null" in text
    shown = format_run(run.record, s).splitlines()
    for key in ("probes", "unions"):
        header = [c.strip() for c in shown[shown.index(f"  {key}:") + 1].split("|")]
        assert header.index("O_null") > header.index("O") and "O_minus_null_ci" in header
    assert any(line.startswith("  D_null: ") for line in shown)
    # a run read from a data file cannot build its golds again: no null, nothing made up
    from_file = _run({"file": "mine.jsonl", "sha256": "0" * 64}, task)
    assert "D_null" not in from_file.summary() and "O_null" not in from_file.analysis["reach"].columns
