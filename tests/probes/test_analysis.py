"""Cross-probe analysis on a bank made by hand: every number checked against a computation written here
(plain sets, counters, itertools, scipy), not against the module's own helpers."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from reachlens.errors import ReachlensError
from reachlens.probes import (
    budget_matched,
    default_unions,
    fix_sets,
    jaccard_table,
    placebo_pairs,
    placebo_table,
    probe_summary,
    reach,
    reach_table,
    realized,
    recovery_table,
)
from reachlens.probes.bank import bank_frame

GOLD = "7"
SAMPLING, GRAFT, PLACEBO = "sampling:k=3", "graft:kind=zero,bos:layer=1", "graft:kind=zero,bos:layer=1:placebo=true"
# per question: greedy's answer, then each probe's answers (None: no answer; "?": could not be graded)
ANSWERS = {
    "q0": {"greedy": ["7"], SAMPLING: ["7", "7", "1"], GRAFT: ["7", "2"], PLACEBO: ["7", "7"]},
    "q1": {"greedy": ["1"], SAMPLING: ["7", "1", "1"], GRAFT: ["1", "7"], PLACEBO: ["1", "1"]},
    "q2": {"greedy": ["1"], SAMPLING: ["1", "2", None], GRAFT: ["7", "2"], PLACEBO: ["2", "1"]},
    "q3": {"greedy": ["2"], SAMPLING: ["1", "2", "3"], GRAFT: ["7", "1"], PLACEBO: ["7", "3"]},
    "q4": {"greedy": ["2"], SAMPLING: ["1", "1", "2"], GRAFT: ["3", "4"], PLACEBO: ["5", "6"]},
    "q5": {"greedy": ["?"], SAMPLING: ["?", "?", "?"], GRAFT: ["?", "7"], PLACEBO: ["?", "?"]},
    "q6": {"greedy": ["1"], SAMPLING: ["7", "2", "2"], GRAFT: ["2", "2"], PLACEBO: ["1", "2"]},
}


def make_bank() -> pd.DataFrame:
    rows = []
    for qid, probes in ANSWERS.items():
        for probe, answers in probes.items():
            for j, a in enumerate(answers):
                rows.append({"question_id": qid, "probe": probe, "arm": probe if probe in ("greedy", SAMPLING) else
                             ("placebo:" if probe == PLACEBO else "") + ("graft:zero@L1", "graft:bos@L1")[j],
                             "candidate_idx": j, "text": f"A: {a}", "answer": None if a in (None, "?") else a,
                             "correct": a == GOLD, "scored": a != "?", "mean_logprob": -1.0 - j,
                             "finish_reason": "stop", "n_tokens": 3, "intervention": probe not in ("greedy", SAMPLING),
                             "detail": ""})
    return bank_frame(rows)


BANK = make_bank()
LABELS = [SAMPLING, GRAFT, PLACEBO]


def hits(probe: str) -> dict[str, float]:
    """Reach of one probe per question, from ANSWERS alone (NaN when nothing was graded)."""
    out = {}
    for qid, probes in ANSWERS.items():
        graded = [a for a in probes[probe] if a != "?"]
        out[qid] = math.nan if not graded else float(GOLD in graded)
    return out


def test_reach_and_realized_follow_the_answers_and_leave_ungraded_questions_undefined():
    for probe in ("greedy", SAMPLING, GRAFT, PLACEBO):
        got = reach(BANK, probe)
        want = hits(probe)
        assert list(got.index) == list(ANSWERS)
        assert all((math.isnan(want[q]) and math.isnan(got[q])) or got[q] == want[q] for q in ANSWERS)
    assert realized(BANK).tolist()[:2] == [1.0, 0.0]
    union = reach(BANK, "O[greedy+graft]")  # the family name "graft" leaves the placebo out
    assert union["q3"] == 1.0 and union["q4"] == 0.0 and union["q5"] == 1.0
    assert reach(BANK, "placebo")["q3"] == 1.0


def test_reach_table_labels_interventions_and_gives_wilson_intervals():
    from scipy.stats import binomtest

    table = reach_table(BANK, ["greedy", SAMPLING, GRAFT, "O[sampling+graft]"]).set_index("source")
    assert table["kind"].tolist() == ["decoding", "decoding", "intervention", "intervention"]
    row = table.loc[GRAFT]
    x = sum(v == 1.0 for v in hits(GRAFT).values())
    n = sum(not math.isnan(v) for v in hits(GRAFT).values())
    assert (row["reached"], row["n"], row["O"]) == (x, n, x / n)
    ci = binomtest(x, n).proportion_ci(method="wilson")
    assert row["O_lo"] == pytest.approx(ci.low) and row["O_hi"] == pytest.approx(ci.high)
    assert table.loc[GRAFT, "candidates"] == 2 and table.loc["O[sampling+graft]", "candidates"] == 5


def test_an_unknown_source_is_one_line_naming_the_probes():
    with pytest.raises(ReachlensError, match="'steer' .* names no probe, family or arm"):
        reach(BANK, "O[sampling+steer]")


def test_fix_sets_and_their_jaccard_with_a_bootstrap_interval():
    sets = fix_sets(BANK, [SAMPLING, GRAFT, PLACEBO])
    wrong = {q for q, v in hits("greedy").items() if v == 0.0}
    for probe in (SAMPLING, GRAFT, PLACEBO):
        assert sets[probe] == {q for q, v in hits(probe).items() if v == 1.0} & wrong
    table = jaccard_table(BANK, [SAMPLING, GRAFT, PLACEBO], n_boot=500).set_index(["a", "b"])
    a, b = sets[SAMPLING], sets[GRAFT]
    row = table.loc[(SAMPLING, GRAFT)]
    assert row["jaccard"] == len(a & b) / len(a | b) and row["both"] == len(a & b)
    assert 0 <= row["jaccard_lo"] <= row["jaccard"] <= row["jaccard_hi"] <= 1
    assert table.loc[(GRAFT, PLACEBO), "kind"] == "intervention"


def test_recovery_on_the_stratum_that_k_samples_never_solve():
    stratum = [q for q, v in hits(SAMPLING).items() if v == 0.0]
    table = recovery_table(BANK, SAMPLING, [GRAFT, "O[greedy+graft]"]).set_index("source")
    assert table.loc[GRAFT, "stratum"] == len(stratum) == 3
    assert table.loc[GRAFT, "recovered"] == sum(hits(GRAFT)[q] == 1.0 for q in stratum)


def majority_correct(answers: list) -> float:
    """Plurality vote with ties averaged, over graded answers (written here, apart from reachlens.selectors)."""
    graded = [a for a in answers if a != "?"]
    if not graded:
        return math.nan
    counts = Counter(a for a in graded if a is not None)
    if not counts:
        return 0.0
    top = max(counts.values())
    tied = [a for a, c in counts.items() if c == top]
    return sum(a == GOLD for a in tied) / len(tied)


def brute_force(parts: list[tuple[str, int]], skip=("q5",)) -> tuple[float, float]:
    """Mean reach and majority over every subset, on the questions every mixture of the test defines (q5 has
    no graded sample)."""
    o, maj = [], []
    for qid, probes in ANSWERS.items():
        if qid in skip:
            continue
        pools = [list(itertools.combinations(probes[p], t)) for p, t in parts]
        subsets = [sum(map(list, choice), []) for choice in itertools.product(*pools)]
        reach_ = [math.nan if all(a == "?" for a in s) else float(GOLD in s) for s in subsets]
        votes = [majority_correct(s) for s in subsets]
        if not all(math.isnan(v) for v in reach_):
            o.append(np.nanmean(reach_))
            maj.append(np.nanmean(votes))
    return float(np.mean(o)), float(np.mean(maj))


def test_budget_matched_mixtures_average_every_subset_and_the_majority_vote_ties():
    mixtures = {"3 samples": [(SAMPLING, 3)], "greedy + 2 grafts": [("greedy", 1), (GRAFT, 2)],
                "2 samples + 1 graft": [(SAMPLING, 2), (GRAFT, 1)]}
    table = budget_matched(BANK, mixtures, n_boot=300).set_index("mixture")
    for name, parts in mixtures.items():
        o, maj = brute_force(parts)
        assert table.loc[name, "O"] == pytest.approx(o) and table.loc[name, "majority"] == pytest.approx(maj)
        assert table.loc[name, "budget"] == 3 and table.loc[name, "n"] == 6
    ref = table.loc["3 samples"]
    assert table.loc["greedy + 2 grafts", "dO"] == pytest.approx(table.loc["greedy + 2 grafts", "O"] - ref["O"])
    assert table.loc["2 samples + 1 graft", "subsets"] == 3 * 2
    assert table["kind"].tolist() == ["decoding", "intervention", "intervention"]
    with pytest.raises(ReachlensError, match="takes 4 candidates"):
        budget_matched(BANK, {"too many": [(SAMPLING, 4)]})


def test_a_graft_beside_its_placebo():
    from scipy.stats import binomtest

    assert placebo_pairs(LABELS) == [(GRAFT, PLACEBO)]
    row = placebo_table(BANK, [(GRAFT, PLACEBO)], stratum_of=SAMPLING, n_boot=300).iloc[0]
    g, p = hits(GRAFT), hits(PLACEBO)
    b = sum(g[q] == 1.0 and p[q] == 0.0 for q in ANSWERS)
    c = sum(g[q] == 0.0 and p[q] == 1.0 for q in ANSWERS)
    assert row["mcnemar_p"] == pytest.approx(binomtest(b, b + c).pvalue if b + c else 1.0)
    both = [q for q in ANSWERS if not (math.isnan(g[q]) or math.isnan(p[q]))]
    assert row["dO"] == pytest.approx(np.mean([g[q] - p[q] for q in both]))


def test_the_summary_names_every_union_and_labels_interventions():
    unions = default_unions(LABELS)
    assert unions == ["O[greedy+sampling]", "O[greedy+graft]", "O[sampling+graft]"]
    s = probe_summary(BANK, LABELS, unions)
    assert s["D"] == pytest.approx(1 / 6) and s["n"] == 6  # q0 only; q5 ungraded
    assert s["probes"][GRAFT]["kind"] == "intervention" and s["probes"][SAMPLING]["kind"] == "decoding"
    assert set(s["probes"][GRAFT]["arms"]) == {"graft:zero@L1", "graft:bos@L1"}
    assert s["unions"]["O[sampling+graft]"]["kind"] == "intervention"
    assert {r["mixture"] for r in s["budget_matched"]} >= {"3 samples", f"greedy + 2 of {GRAFT}"}
    assert s["placebo"][0]["graft"] == GRAFT and len(s["overlap"]) == 3


def test_budget_matched_on_a_random_bank_is_the_majority_selector_on_every_subset_written_out():
    """Every subset of 10 random questions (7 samples each: answers drawn from 4 values, some missing, some not
    graded) written out as a bank of its own and scored by ``select(..., "majority")``, the selectors' own rule:
    the mixture's O and majority are their means, where every subset is enumerated and where a seeded sample of
    ``max_subsets`` of them is drawn (the same draws: ``random.Random`` seeded by the question, as documented)."""
    import random

    from reachlens.selectors import select

    rng = np.random.default_rng(7)
    k, labels = 7, ["sampling:k=7"]
    rows = []
    for q in range(10):
        qid = f"r{q}"
        rows.append({"question_id": qid, "probe": "greedy", "arm": "greedy", "candidate_idx": 0, "answer": "1",
                     "correct": False, "scored": True})
        for j in range(k):
            a = str(rng.integers(4)) if rng.random() > 0.15 else None
            rows.append({"question_id": qid, "probe": labels[0], "arm": labels[0], "candidate_idx": j, "answer": a,
                         "correct": a == "0", "scored": bool(rng.random() > 0.1)})
    bank = bank_frame([{**r, "text": f"A: {r['answer']}", "mean_logprob": -1.0, "finish_reason": "stop",
                        "n_tokens": 3, "intervention": False, "detail": ""} for r in rows])
    mixtures = {"4 samples": [(labels[0], 4)], "greedy + 3 samples": [("greedy", 1), (labels[0], 3)]}
    for max_subsets in (10_000, 20):  # C(7, 4) = 35: all of them, then a seeded sample of 20
        table = budget_matched(bank, mixtures, max_subsets=max_subsets, n_boot=50).set_index("mixture")
        for name, parts in mixtures.items():
            o_q, maj_q = [], []
            for q in range(10):
                qid = f"r{q}"
                pools = [bank[(bank["question_id"] == qid) & (bank["probe"] == p)].reset_index(drop=True)
                         for p, _ in parts]
                total = math.prod(math.comb(len(pool), t) for pool, (_, t) in zip(pools, parts))
                if total <= max_subsets:
                    choices = list(itertools.product(*(itertools.combinations(range(len(pool)), t)
                                                       for pool, (_, t) in zip(pools, parts))))
                else:
                    r = random.Random(f"budget-matched/0/{qid}")
                    choices = [tuple(tuple(sorted(r.sample(range(len(pool)), t))) for pool, (_, t) in zip(pools, parts))
                               for _ in range(max_subsets)]
                o_s, maj_s = [], []
                for choice in choices:
                    sub = pd.concat([pool.iloc[list(c)] for pool, c in zip(pools, choice)], ignore_index=True)
                    sub["candidate_idx"] = range(len(sub))
                    graded = sub["scored"].any()
                    o_s.append(float((sub["correct"] & sub["scored"]).any()) if graded else math.nan)
                    maj_s.append(float(select(sub, "majority")["correct"].iloc[0]))
                o_q.append(np.nanmean(o_s) if not all(map(math.isnan, o_s)) else math.nan)
                maj_q.append(np.nanmean(maj_s) if not all(map(math.isnan, maj_s)) else math.nan)
            keep = ~(np.isnan(o_q) | np.isnan(maj_q))
            assert table.loc[name, "O"] == pytest.approx(np.mean(np.array(o_q)[keep]), abs=1e-12)
            assert table.loc[name, "majority"] == pytest.approx(np.mean(np.array(maj_q)[keep]), abs=1e-12)
