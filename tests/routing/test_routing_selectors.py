"""Routing's scoring of candidate pools on the selectors (:mod:`reachlens.selectors`): question tables, gap
recovery, reach curves, on hand-made pools with hand-computed answers."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from reachlens import Protocol, load_task
from reachlens.engine import Completion
from reachlens.routing import (
    cell_summary,
    format_recovery,
    gap_recovery,
    median_recovery,
    question_table,
    reach_curve,
)
from reachlens.routing.scoring import audit_selector_table
from reachlens.studies import AuditResult, grade_questions
from reachlens.tasks import Question

SELECTORS = ("majority", "logprob", "deepconf", "self_verify", "search")


def pool(rows):
    cols = ["answer", "correct", "mean_logprob", "lowest_window_logprob", "verify_logprob", "objective"]
    df = pd.DataFrame(rows, columns=cols)
    df["scored"] = True
    df["candidate_idx"] = range(len(df))
    return df


# answer, correct, mean lp, lowest-window lp, verify lp, objective
POOL = pool([
    ["7", False, -0.10, -0.90, -2.0, 0.30],  # most confident on average, one bad window
    ["5", True, -0.30, -0.40, -0.5, 0.20],   # best lowest window, best verification
    ["7", False, -0.50, -0.60, -3.0, 0.90],  # the search's favourite
    [None, False, -0.01, -0.01, -0.1, 1.00],  # no answer: never selected
    ["5", True, -0.40, -0.50, -1.0, 0.10],
    ["9", False, -0.20, -0.30, -0.7, 0.50],
])


def test_gap_recovery_by_hand():
    assert gap_recovery(0.6, 0.5, 0.9) == pytest.approx(0.25)
    assert gap_recovery(0.4, 0.5, 0.9) == pytest.approx(-0.25)
    assert math.isnan(gap_recovery(0.5, 0.5, 0.5))
    assert format_recovery(gap_recovery(0.5, 0.5, 0.5)) == "undefined"
    assert format_recovery(0.25) == "+0.25"


def test_question_table_and_cell_summary_by_hand():
    cands = pd.concat([POOL.assign(question_id="a"), POOL.assign(question_id="b", correct=False)], ignore_index=True)
    cands["route"] = [f"r{i}" for i in range(len(cands))]
    deployed = pd.DataFrame({"question_id": ["a", "b"], "realized": [False, False], "deployed_answer": ["7", "7"],
                             "deployed_scored": [True, True]})
    q = question_table(cands, deployed, SELECTORS)
    assert q["reachable"].tolist() == [1.0, 0.0]
    # majority: "7" and "5" tie at two votes in "a" (ties averaged: 0.5), every answer is wrong in "b"
    assert q["self_verify"].tolist() == [1.0, 0.0] and q["majority"].tolist() == [0.5, 0.0]
    assert q["majority_answer"].tolist() == ["7", "7"] and q["deepconf_answer"].tolist() == ["9", "9"]
    assert q["logprob"].tolist() == [0.0, 0.0] and q["search_answer"].tolist() == ["7", "7"]
    s = cell_summary(q, SELECTORS).iloc[0]
    assert (s["D"], s["O_K"], s["self_verify"], s["majority"]) == (0.0, 0.5, 0.5, 0.25)
    assert s["recovery_self_verify"] == 1.0 and s["recovery_majority"] == 0.5


def test_recovery_is_undefined_when_O_K_equals_D():
    cands = POOL.assign(question_id="a", route="r")
    deployed = pd.DataFrame({"question_id": ["a"], "realized": [True], "deployed_answer": ["5"], "deployed_scored": [True]})
    s = cell_summary(question_table(cands, deployed, SELECTORS), SELECTORS, by=())
    assert s.loc[0, "O_K"] == s.loc[0, "D"] == 1.0
    assert all(math.isnan(s.loc[0, f"recovery_{n}"]) for n in SELECTORS)
    assert format_recovery(s.loc[0, "recovery_majority"]) == "undefined"
    med = median_recovery(s, SELECTORS)
    assert med["cells_undefined"].tolist() == [1] * 5 and med["median_recovery"].isna().all()


def test_median_recovery_over_cells():
    summary = pd.DataFrame({"recovery_majority": [0.1, 0.5, math.nan, 0.3]})
    med = median_recovery(summary, ["majority"]).iloc[0]
    assert (med["median_recovery"], med["cells_defined"], med["cells_undefined"]) == (0.3, 3, 1)


def test_reach_curve_counts_the_first_k_evaluations():
    cands = pd.DataFrame({
        "question_id": ["a"] * 4 + ["b"] * 4, "candidate_idx": [0, 1, 2, 3] * 2,
        "correct": [False, False, True, False, False, False, False, False], "scored": True,
    })
    curve = reach_curve(cands)
    assert curve.set_index("k")["O_K"].to_dict() == {1: 0.0, 2: 0.0, 4: 0.5}


def test_selectors_on_audit_temperature_samples():
    """majority@K vs O_K on an audit's own samples (no routes involved)."""
    proto = Protocol("arith", k=4, temperature=1.0, max_new_tokens=12).resolved(load_task("arith", n=1))
    qs = [Question("a", {"expr": "1+1"}, "2"), Question("b", {"expr": "2+2"}, "4")]

    def c(text, lp=-0.5):
        return Completion(text, (1,), "stop", (lp,))

    q, s = grade_questions(
        proto, qs, [c(" #### 3"), c(" #### 4")],
        [[c("#### 3"), c("#### 2", -0.1), c("#### 2"), c("#### 5")], [c("#### 5")] * 3 + [c("#### 4")]],
    )
    table, summary = audit_selector_table(AuditResult.new(proto, {"spec": "x", "fingerprint": "y"}, q, s))
    assert table["majority"].tolist() == [1.0, 0.0] and table["logprob"].tolist() == [1.0, 0.0]
    row = summary.iloc[0]
    assert (row["D"], row["O_K"], row["majority"]) == (0.5, 1.0, 0.5)
    assert row["recovery_majority"] == 0.0


def test_a_route_evaluated_twice_is_one_vote():
    # Route r1 was proposed three times (budget spent), r2 and r3 once each: by route, "5" has two
    # votes and "9" one; counting evaluations would have made "9" the majority.
    cands = pd.DataFrame({
        "question_id": ["a"] * 5, "candidate_idx": range(5), "route": ["r1", "r1", "r1", "r2", "r3"],
        "answer": ["9", "9", "9", "5", "5"], "correct": [False, False, False, True, True], "scored": [True] * 5,
    })
    deployed = pd.DataFrame({"question_id": ["a"], "realized": [False], "deployed_answer": ["9"], "deployed_scored": [True]})
    q = question_table(cands, deployed, ["majority"]).iloc[0]
    assert (q["majority_answer"], q["majority"], q["n_candidates"], q["n_unique"]) == ("5", 1.0, 5, 3)
