"""A probe run's verified reach (issue 56): D^trace and O^trace per probe and union against a direct count of the
candidates that are the gold worked solution (the only valid ones here), and the tiny model's probe run carries
them in its summary and report."""

from __future__ import annotations

import random

import numpy as np
import pytest

from reachlens import load_task
from reachlens.grading import get_grader
from reachlens.studies.trace_reach import solutions_valid
from reachlens.probes.bank import bank_frame, bank_row
from reachlens.probes.summary import default_unions, probe_summary, probe_tables
from reachlens.stats import mcnemar_exact_p

LABELS = ["sampling:k=4", "routes:budget=3"]


def _slipped(solution: str, rng: random.Random) -> str:
    """One step's result off by one, the final answer kept: right answer, invalid solution."""
    body, final = solution.split(" #### ")
    steps = body.strip().split(";")
    i = rng.randrange(len(steps))
    lhs, c = steps[i].split("=")
    steps[i] = f"{lhs}={int(c) + 1}"
    return " " + ";".join(steps) + " #### " + final


def _bank(task, rng):
    g = get_grader("numeric")
    rows = []
    for i, q in enumerate(task.questions):
        kinds = [q.solution, _slipped(q.solution, rng), f" #### {q.gold}", f" #### {int(q.gold) + 1}"]
        made = [("greedy", 0, kinds[i % 3])]
        made += [(LABELS[0], j, kinds[(i + j) % 4] if i % 5 else kinds[1]) for j in range(4)]
        made += [(LABELS[1], j, kinds[(i * j + 1) % 4]) for j in range(3)]
        for probe, j, text in made:
            gr = g.grade(text, q.gold)
            c = {"question_id": q.question_id, "candidate_idx": j, "text": text, "answer": gr.answer,
                 "correct": gr.correct, "scored": True, "finish_reason": "stop", "n_tokens": len(text),
                 "mean_logprob": -1.0 - j}
            rows.append(bank_row(c, probe, probe, False))
    return bank_frame(rows)


def test_verified_reach_per_probe_and_union_against_a_direct_count():
    task = load_task("arith_hard", n=15)
    bank = _bank(task, random.Random(3))
    gold = {q.question_id: q.solution for q in task.questions}
    solves = bank["text"].to_numpy() == bank["question_id"].map(gold).to_numpy()  # independent: the gold solution
    valid = solutions_valid(bank["question_id"], bank["text"], "arith_hard")
    assert list(np.asarray(valid) & bank["correct"].to_numpy(bool)) == list(solves)
    unions = default_unions(LABELS)
    s = probe_summary(bank, LABELS, unions, tables=probe_tables(bank, LABELS, unions, valid))

    def direct(probes):
        hit = bank[bank["probe"].isin(probes) & solves].groupby("question_id").size()
        return len(hit) / len(task.questions)

    assert s["D_trace"] == pytest.approx(direct(["greedy"]))
    for label in LABELS:
        assert s["probes"][label]["O_trace"] == pytest.approx(direct([label]))
        assert s["probes"][label]["O_trace"] <= s["probes"][label]["O"]
    assert s["unions"]["O[greedy+sampling]"]["O_trace"] == pytest.approx(direct(["greedy", LABELS[0]]))
    assert 0 < s["D_trace"] < s["D"]  # some right answers on invalid solutions, some solved
    assert "O_trace" not in probe_summary(bank, LABELS, unions)["probes"][LABELS[0]]  # no trace: no verified column
    assert solutions_valid(["q"], ["1+1=2"], "piqa") is None  # a task with no trace grader


def test_weight_noise_phi_by_verified_solutions_against_a_direct_count():
    """φ per sigma by verified solutions: each draw's share of questions it solves, the gold worked solution being
    the only valid text here, counted directly from the bank."""
    task = load_task("arith_hard", n=12)
    rng, g = random.Random(5), get_grader("numeric")
    label, rows = "weight_noise:sigma=0.1:k=3", []
    for i, q in enumerate(task.questions):
        kinds = [q.solution, _slipped(q.solution, rng), f" #### {int(q.gold) + 1}"]
        made = [("greedy", "greedy", 0, kinds[i % 3])]
        made += [(label, f"weight_noise:sigma=0.1:draw={j}", j, kinds[(i + j) % 3]) for j in range(3)]
        for probe, arm, j, text in made:
            gr = g.grade(text, q.gold)
            rows.append(bank_row({"question_id": q.question_id, "candidate_idx": j, "text": text, "answer": gr.answer,
                                  "correct": gr.correct, "scored": True, "finish_reason": "stop",
                                  "n_tokens": len(text), "mean_logprob": -1.0}, probe, arm, probe != "greedy"))
    bank = bank_frame(rows)
    gold = {q.question_id: q.solution for q in task.questions}
    solves = bank["text"].to_numpy() == bank["question_id"].map(gold).to_numpy()
    valid = solutions_valid(bank["question_id"], bank["text"], "arith_hard")
    s = probe_summary(bank, [label], [], tables=probe_tables(bank, [label], [], valid))
    (row,), (answers,) = s["weight_noise_trace"], s["weight_noise"]
    per_draw = [solves[(bank["arm"] == f"weight_noise:sigma=0.1:draw={j}").to_numpy()].mean() for j in range(3)]
    clean = solves[(bank["probe"] == "greedy").to_numpy()].mean()
    assert row["clean"] == pytest.approx(clean) and row["best_draw"] == pytest.approx(max(per_draw))
    assert row["mean_draw"] == pytest.approx(np.mean(per_draw)) and row["phi"] == pytest.approx(max(per_draw) / clean)
    noised = (bank["probe"] == label).to_numpy()
    assert row["union"] == pytest.approx(len(set(bank.loc[noised & solves, "question_id"])) / len(task.questions))
    assert answers["best_draw"] > row["best_draw"]  # the slipped solutions count by answers only
    assert "weight_noise_trace" not in probe_summary(bank, [label], [])  # no trace: no verified table


GRAFT = "graft:kind=zero,noise,direction:layer=3"
COMPARED = ["sampling:k=4", GRAFT, f"{GRAFT}:placebo=true"]


def _compared_bank(task, rng):
    """Per question the greedy row, 4 samples and 3 candidates of a graft and of its placebo, each one of: the gold
    worked solution (solves), a slipped step (right answer, invalid), a bare right answer, a wrong answer."""
    g = get_grader("numeric")
    rows = []
    for q in task.questions:
        kinds = [q.solution, _slipped(q.solution, rng), f" #### {q.gold}", f" #### {int(q.gold) + 1}"]
        made = [("greedy", "greedy", 0, rng.choice(kinds[1:]))]  # the deployment never solves: every fix counts
        made += [(COMPARED[0], COMPARED[0], j, rng.choice(kinds[1:] if rng.random() < 0.5 else kinds)) for j in range(4)]
        made += [(p, f"{p}/{kind}", j, rng.choice(kinds)) for p in COMPARED[1:]
                 for j, kind in enumerate(("zero", "noise", "direction"))]
        for probe, arm, j, text in made:
            gr = g.grade(text, q.gold)
            rows.append(bank_row({"question_id": q.question_id, "candidate_idx": j, "text": text, "answer": gr.answer,
                                  "correct": gr.correct, "scored": True, "finish_reason": "stop", "n_tokens": 5,
                                  "mean_logprob": -1.0}, probe, arm, probe.startswith("graft")))
    return bank_frame(rows)


def test_recovery_budget_matched_and_placebo_by_verified_solutions_against_a_direct_count():
    """Each comparison table's ``*_trace`` columns, counted directly: a candidate solves its question when its text is
    the gold worked solution (the only valid text here); the majority vote by verified solutions is over the valid
    candidates alone, so it is right exactly when one of them is there."""
    import itertools

    task = load_task("arith_hard", n=40)
    bank = _compared_bank(task, random.Random(11))
    gold = {q.question_id: q.solution for q in task.questions}
    ids = [q.question_id for q in task.questions]
    solves = {(q, p): [] for q in ids for p in ("greedy", *COMPARED)}
    for q, p, text in zip(bank["question_id"], bank["probe"], bank["text"]):
        solves[q, p].append(text == gold[q])
    valid = solutions_valid(bank["question_id"], bank["text"], "arith_hard")
    t = probe_tables(bank, COMPARED, [], valid)

    def solved(q, probes):
        return any(any(solves[q, p]) for p in probes)

    # recovery: the stratum is the questions no sample solves; each source's share of it that it solves
    stratum = [q for q in ids if not solved(q, [COMPARED[0]])]
    rec = t["recovery"].set_index("source")
    assert rec.loc["greedy", "stratum_trace"] == len(stratum) > rec.loc["greedy", "stratum"]
    for source, probes in ((GRAFT, [GRAFT]), (f"O[greedy+{GRAFT}]", ["greedy", GRAFT])):
        rate = np.mean([solved(q, probes) for q in stratum])
        assert rec.loc[source, "rate_trace"] == pytest.approx(rate) and rec.loc[source, "drate_trace"] == pytest.approx(rate)
    assert rec.loc["greedy", "rate_trace"] == 0 and 0 < rec.loc[GRAFT, "rate_trace"] < 1
    # budget-matched: every subset of each pool, its reach and its majority vote over the valid candidates
    bm = t["budget_matched"][t["budget_matched"]["probe"] == GRAFT].set_index("mixture")
    for mixture, parts in (("4 samples", [(COMPARED[0], 4)]), (f"greedy + 3 of {GRAFT}", [("greedy", 1), (GRAFT, 3)]),
                           (f"2 samples + 2 of {GRAFT}", [(COMPARED[0], 2), (GRAFT, 2)])):
        per_q = []
        for q in ids:
            pools = [list(itertools.combinations(solves[q, p], take)) for p, take in parts]
            per_q.append(np.mean([any(any(c) for c in choice) for choice in itertools.product(*pools)]))
        assert bm.loc[mixture, "O_trace"] == pytest.approx(np.mean(per_q))
        assert bm.loc[mixture, "majority_trace"] == pytest.approx(np.mean(per_q))
    assert bm["majority_trace"].iloc[0] != pytest.approx(bm["majority"].iloc[0])  # the slipped ones vote by answers
    # placebo: each side's verified reach, their paired difference, the discordant pairs of the exact McNemar test
    pl = t["placebo"].iloc[0]
    a = np.array([solved(q, [GRAFT]) for q in ids], dtype=float)
    b = np.array([solved(q, [COMPARED[2]]) for q in ids], dtype=float)
    assert pl["O_graft_trace"] == pytest.approx(a.mean()) and pl["O_placebo_trace"] == pytest.approx(b.mean())
    assert pl["dO_trace"] == pytest.approx((a - b).mean())
    assert pl["mcnemar_p_trace"] == pytest.approx(mcnemar_exact_p(int(((a == 1) & (b == 0)).sum()),
                                                                  int(((a == 0) & (b == 1)).sum())))
    assert pl["fix_graft_trace"] == a.sum()  # greedy never solves: every solved question is a fix
    in_stratum = [ids.index(q) for q in stratum]
    assert pl["recovery_graft_trace"] == pytest.approx(a[in_stratum].mean())
    assert pl["drecovery_trace"] == pytest.approx((a[in_stratum] - b[in_stratum]).mean())
    assert not any(c.endswith("_trace") for c in probe_tables(bank, COMPARED, [])["recovery"].columns)
    columns = list(t["placebo"].columns)
    assert columns.index("dO_trace") == columns.index("dO_mde") + 1  # beside its answer column
