"""The selectors over a candidate bank, against answers computed here another way (Counter, statsmodels, numpy)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats import proportion

from reachlens.errors import ReachlensError
from reachlens.selectors import (
    SELECTION_COLUMNS,
    lowest_window_mean,
    reachable,
    select,
    selection_gap,
    selector_table,
)

# question, candidate_idx, answer, correct, scored
ROWS = [
    ("tie2", 0, "7", False, True), ("tie2", 1, "5", True, True), ("tie2", 2, "7", False, True),
    ("tie2", 3, "5", True, True), ("tie2", 4, None, False, True),
    ("tie3", 0, "1", True, True), ("tie3", 1, "2", False, True), ("tie3", 2, "3", False, True),
    ("clear", 2, "4", True, True), ("clear", 0, "4", True, True), ("clear", 1, "8", False, True),
    # the unscored "9"s would outvote "6" if they counted
    ("unscored", 0, "9", False, False), ("unscored", 1, "9", False, False), ("unscored", 2, "6", True, True),
    ("all_unscored", 0, "3", False, False), ("all_unscored", 1, "3", False, False),
    ("no_answer", 0, None, False, True), ("no_answer", 1, None, False, True),
    ("tie_after_unscored", 0, "a", False, True), ("tie_after_unscored", 1, "b", True, True),
    ("tie_after_unscored", 2, "b", True, False),
]
BANK = pd.DataFrame(ROWS, columns=["question_id", "candidate_idx", "answer", "correct", "scored"])


def counter_majority(bank: pd.DataFrame) -> dict[str, float]:
    """Expected correctness of plurality voting under a uniform tie-break, computed with Counter."""
    out = {}
    for qid, g in bank.groupby("question_id", sort=False):
        if not g["scored"].any():
            out[qid] = math.nan
            continue
        voters = g[g["scored"] & g["answer"].notna()]
        votes = Counter(voters["answer"])
        if not votes:
            out[qid] = 0.0
            continue
        top = max(votes.values())
        tied = [a for a, n in votes.items() if n == top]
        grade = {a: float(voters.loc[voters["answer"] == a, "correct"].iloc[0]) for a in tied}
        out[qid] = sum(grade.values()) / len(tied)
    return out


def test_majority_equals_a_counter_computation_with_ties_and_unscored():
    got = select(BANK, "majority")
    want = counter_majority(BANK)
    assert list(got.columns) == SELECTION_COLUMNS
    assert got["question_id"].tolist() == list(want)  # first-appearance order
    for qid, value in want.items():
        g = got.set_index("question_id").loc[qid, "correct"]
        assert (math.isnan(g) and math.isnan(value)) or g == pytest.approx(value), qid
    # the values themselves, so the Counter reference is not trusted blindly
    assert got.set_index("question_id")["correct"].to_dict() == pytest.approx(
        {"tie2": 0.5, "tie3": 1 / 3, "clear": 1.0, "unscored": 1.0, "all_unscored": math.nan, "no_answer": 0.0,
         "tie_after_unscored": 0.5}, nan_ok=True)
    row = got.set_index("question_id").loc["tie2"]
    assert (row["selected_answer"], row["n_tied"], row["n_candidates"]) == ("7", 2, 5) and pd.isna(row["candidate_idx"])
    clear = got.set_index("question_id").loc["clear"]
    assert (clear["selected_answer"], clear["candidate_idx"], clear["n_tied"]) == ("4", 0, 1)


def test_seeded_tie_break_picks_one_tied_answer_and_averages_to_the_expectation():
    picks = [select(BANK, "majority", seed=s).set_index("question_id") for s in range(200)]
    assert all(p.loc["tie3", "selected_answer"] in {"1", "2", "3"} and p.loc["tie3", "n_tied"] == 1 for p in picks)
    assert select(BANK, "majority", seed=7).equals(select(BANK, "majority", seed=7))
    mean = pd.concat([p["correct"] for p in picks], axis=1).mean(axis=1)
    assert mean["tie2"] == pytest.approx(0.5, abs=0.1) and mean["tie3"] == pytest.approx(1 / 3, abs=0.1)
    assert mean["clear"] == 1.0 and math.isnan(mean["all_unscored"])
    with pytest.raises(ReachlensError, match="seed='x' must be an integer"):
        select(BANK, "majority", seed="x")


# answer, correct, mean lp, lowest-window lp, verify lp, objective, token lps
POOL = pd.DataFrame([
    ["7", False, -0.10, -0.90, -2.0, 0.30, [0.0, 0.0, -0.6, 0.0]],  # best mean, one bad window
    ["5", True, -0.30, -0.40, -0.5, 0.20, [-0.3, -0.3, -0.3, -0.3]],   # best verification
    ["7", False, -0.50, -0.60, -3.0, 0.90, [-0.5, -0.5, -0.5, -0.5]],  # the search's favourite
    [None, False, -0.01, -0.01, -0.1, 1.00, [-0.0, -0.0, -0.0, -0.0]],  # no answer: never selected
    ["5", True, -0.40, -0.50, -1.0, 0.10, [-0.4, -0.4, -0.4, -0.4]],
    ["9", False, -0.20, -0.30, -0.7, 0.50, [-0.2, -0.2, -0.2, -0.2]],  # best lowest window
], columns=["answer", "correct", "mean_logprob", "lowest_window_logprob", "verify_logprob", "objective",
            "token_logprobs"]).assign(question_id="q", candidate_idx=range(6), scored=True)


def test_score_selectors_on_a_hand_made_pool():
    def one(name, bank=POOL, **kw):
        r = select(bank, name, **kw).iloc[0]
        return r["candidate_idx"], r["selected_answer"], r["correct"]

    assert one("logprob") == (0, "7", 0.0)
    assert one("deepconf", POOL.drop(columns="token_logprobs")) == (5, "9", 0.0)  # the stored lowest windows
    assert one("deepconf", window=2) == (5, "9", 0.0)  # windows of 2 over token_logprobs: -0.3, -0.3, ..., -0.2
    assert one("deepconf", window=8)[0] == 0  # one window: the plain mean, -0.15 for candidate 0
    assert one("self_verify") == (1, "5", 1.0)
    assert one("search") == (2, "7", 0.0)
    assert one("majority")[2] == 0.5  # "7" and "5" two votes each


def test_a_selector_refuses_a_bank_it_cannot_read():
    with pytest.raises(ReachlensError, match=r"selector 'self_verify' needs column\(s\) \['verify_logprob'\]"):
        select(POOL.drop(columns="verify_logprob"), "self_verify")
    with pytest.raises(ReachlensError, match=r"\['token_logprobs'\] or \['lowest_window_logprob'\]"):
        select(POOL.drop(columns=["token_logprobs", "lowest_window_logprob"]), "deepconf")
    with pytest.raises(ReachlensError, match="window=4 needs a token_logprobs column"):
        select(POOL.drop(columns="token_logprobs"), "deepconf", window=4)
    with pytest.raises(ReachlensError, match=r"selector 'logprob' takes no option\(s\) \['seed'\]"):
        select(POOL, "logprob", seed=1)
    with pytest.raises(ReachlensError, match=r"needs the column\(s\) \['candidate_idx'\]"):
        select(POOL.drop(columns="candidate_idx"), "majority")
    with pytest.raises(ReachlensError, match="candidate 1 of question 'q' appears twice"):
        select(POOL.assign(candidate_idx=[0, 1, 1, 2, 3, 4]), "majority")
    with pytest.raises(LookupError, match="unknown selector 'best'"):
        select(POOL, "best")


def test_reachable_per_question():
    r = reachable(BANK)
    assert r.to_dict() == pytest.approx({"tie2": 1.0, "tie3": 1.0, "clear": 1.0, "unscored": 1.0,
                                         "all_unscored": math.nan, "no_answer": 0.0, "tie_after_unscored": 1.0},
                                        nan_ok=True)


def test_selector_table_is_wilson_on_the_defined_questions():
    bank = BANK.assign(mean_logprob=-np.arange(len(BANK), dtype=float))
    t = selector_table(bank, ["majority", "logprob"]).set_index("selector")
    maj = counter_majority(BANK)
    defined = [v for v in maj.values() if not math.isnan(v)]
    assert t.loc["majority", "n"] == len(defined) == 6
    assert t.loc["majority", "accuracy"] == pytest.approx(np.mean(defined))
    ref = proportion.proportion_confint(sum(defined), len(defined), alpha=0.05, method="wilson")
    assert (t.loc["majority", "ci_low"], t.loc["majority", "ci_high"]) == pytest.approx(ref)
    assert t.loc["O_K", "accuracy"] == pytest.approx(5 / 6)
    # logprob takes the first graded answered candidate in row order (the scores fall with the row)
    assert t.loc["logprob", "accuracy"] == pytest.approx(np.mean([0, 1, 1, 1, 0, 0]))


def test_selection_gap_is_O_K_minus_the_best_selector_with_a_paired_bootstrap():
    bank = BANK.assign(mean_logprob=-np.arange(len(BANK), dtype=float))
    g = selection_gap(bank, ["majority", "logprob"], n_boot=500, seed=3)
    maj = {q: v for q, v in counter_majority(BANK).items() if not math.isnan(v)}
    assert (g.selector, g.n, g.best_of) == ("majority", 6, ("majority", "logprob"))
    assert g.accuracy == pytest.approx(np.mean(list(maj.values())))
    assert g.O_K == pytest.approx(5 / 6) and g.gap == pytest.approx(5 / 6 - g.accuracy)
    # the interval: percentile bootstrap of the per-question differences, resampled here with numpy
    reach = reachable(BANK).dropna()
    diff = np.array([reach[q] - maj[q] for q in reach.index])
    rng = np.random.default_rng(3)
    means = diff[rng.integers(0, len(diff), size=(500, len(diff)))].mean(axis=1)
    assert g.gap_ci == pytest.approx((np.quantile(means, 0.025), np.quantile(means, 0.975)))
    assert selection_gap(bank, ["majority", "logprob"], n_boot=500, seed=3) == g  # seeded
    assert g.as_dict()["gap_ci"] == list(g.gap_ci)
    with pytest.raises(ReachlensError, match="at least one selector"):
        selection_gap(bank, [])


def test_lowest_window_mean():
    assert lowest_window_mean([-1.0, -3.0, -1.0, -1.0], 2) == pytest.approx(-2.0)
    assert lowest_window_mean([-1.0, -2.0], 8) == pytest.approx(-1.5)
    assert math.isnan(lowest_window_mean([], 8))
    with pytest.raises(ReachlensError, match="window=0 must be an integer >= 1"):
        lowest_window_mean([-1.0], 0)
