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
