"""A probe run's paired differences beside the effect each could have detected: the placebo comparison (reach
and recovery) and the recovery table, on a bank of 240 questions made here with a seeded generator. Every
count is taken from the answers written here, not from the module's helpers; the MDE of each difference is the
exact McNemar one at the share of questions where the two sources differ (tests/test_power.py checks it by
simulation)."""

from __future__ import annotations

import numpy as np
import pytest

from reachlens.power import mcnemar_mde, mde_verdict
from reachlens.probes import placebo_table, probe_summary, recovery_table
from reachlens.probes.bank import bank_frame
from reachlens.report.probe_report import _display

SAMPLING, GRAFT, PLACEBO = "sampling:k=3", "graft:kind=zero,bos:layer=1", "graft:kind=zero,bos:layer=1:placebo=true"
N = 240
_rng = np.random.default_rng(7)
# per question and source, each candidate correct or not (greedy one, samples three, each graft set two)
CORRECT = {f"q{i}": {"greedy": [bool(_rng.random() < 0.3)],
                     SAMPLING: [bool(x) for x in _rng.random(3) < 0.25],
                     GRAFT: [bool(x) for x in _rng.random(2) < 0.3],
                     PLACEBO: [bool(x) for x in _rng.random(2) < 0.25]} for i in range(N)}


def make_bank():
    rows = []
    for qid, probes in CORRECT.items():
        for probe, flags in probes.items():
            for j, ok in enumerate(flags):
                rows.append({"question_id": qid, "probe": probe,
                             "arm": probe if probe in ("greedy", SAMPLING) else
                             ("placebo:" if probe == PLACEBO else "") + ("graft:zero@L1", "graft:bos@L1")[j],
                             "candidate_idx": j, "text": "A: 7" if ok else "A: 1", "answer": "7" if ok else "1",
                             "correct": ok, "scored": True, "mean_logprob": -1.0, "finish_reason": "stop",
                             "n_tokens": 3, "intervention": probe not in ("greedy", SAMPLING), "detail": ""})
    return bank_frame(rows)


BANK = make_bank()


def reached(source: str, qid: str) -> bool:
    return any(CORRECT[qid][source])


def test_the_placebo_comparison_carries_its_minimum_detectable_effects():
    row = placebo_table(BANK, [(GRAFT, PLACEBO)], stratum_of=SAMPLING, n_boot=300).iloc[0]
    differ = sum(reached(GRAFT, q) != reached(PLACEBO, q) for q in CORRECT)
    assert row["dO_mde"] == mcnemar_mde(N, differ / N)
    stratum = [q for q in CORRECT if not reached(SAMPLING, q)]
    rec_g = np.mean([reached(GRAFT, q) for q in stratum])
    rec_p = np.mean([reached(PLACEBO, q) for q in stratum])
    assert (row["recovery_graft"], row["recovery_placebo"]) == pytest.approx((rec_g, rec_p))
    assert row["drecovery"] == pytest.approx(rec_g - rec_p)
    assert row["drecovery_lo"] <= row["drecovery"] <= row["drecovery_hi"]
    differ_s = sum(reached(GRAFT, q) != reached(PLACEBO, q) for q in stratum)
    assert row["drecovery_mde"] == mcnemar_mde(len(stratum), differ_s / len(stratum))
    assert row["drecovery_mde"] > row["dO_mde"]  # fewer questions on the stratum: a larger effect needed


def test_recovery_gives_each_source_its_difference_from_the_first():
    t = recovery_table(BANK, SAMPLING, ["greedy", GRAFT], n_boot=300).set_index("source")
    stratum = [q for q in CORRECT if not reached(SAMPLING, q)]
    assert np.isnan(t.loc["greedy", "drate"]) and np.isnan(t.loc["greedy", "drate_mde"])  # the reference
    diff = [reached(GRAFT, q) - reached("greedy", q) for q in stratum]
    assert t.loc[GRAFT, "drate"] == pytest.approx(np.mean(diff))
    assert t.loc[GRAFT, "drate_mde"] == mcnemar_mde(len(stratum), np.mean(np.array(diff) != 0))


def test_the_summary_and_the_report_table_give_them():
    s = probe_summary(BANK, [SAMPLING, GRAFT, PLACEBO], [])
    (row,) = s["placebo"]
    assert {"dO_mde", "drecovery", "drecovery_mde"} <= set(row)
    shown = _display("placebo", placebo_table(BANK, [(GRAFT, PLACEBO)], stratum_of=SAMPLING)).iloc[0]
    verdict = mde_verdict((row["dO_lo"], row["dO_hi"]), row["dO_mde"])
    assert shown["dO: detectable at this n (80% power)"] == verdict
    assert verdict.startswith(("not detected; detectable at this n: >= ", "detected ("))
    rec = _display("recovery", recovery_table(BANK, SAMPLING, ["greedy", GRAFT]))
    assert rec["drate"].iloc[0] == "(reference)" and "detectable at this n" in rec.iloc[1, -1]
