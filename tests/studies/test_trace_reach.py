"""The verified figures and the lucky-guess null against direct recomputations (every derangement enumerated; pass@k
by scipy's binomials), and `reachlens rescore --trace`, `show` and `compare` on hand-made audits on disk."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pandas as pd
import pytest
from scipy.special import comb

from reachlens import Protocol, load_task
from reachlens.cli.main import main
from reachlens.grading import get_grader
from reachlens.records import SAMPLE_COLUMNS, canonical, update_question_table
from reachlens.studies import AuditResult, compare, rescore
from reachlens.studies.lucky_null import answer_kind, lucky_null
from reachlens.studies.trace_reach import trace_of

K = 6


def _audit(task, texts_of, deployed_of) -> AuditResult:
    """An audit made by hand from completions: ``texts_of(q)`` its K samples, ``deployed_of(q)`` its deployment."""
    g = get_grader("numeric")
    rows, qs = [], []
    for q in task.questions:
        for j, t in enumerate(texts_of(q)):
            gr = g.grade(t, q.gold)
            rows.append(dict(question_id=q.question_id, candidate_idx=j, text=t, answer=gr.answer, correct=gr.correct,
                             scored=True, finish_reason="stop", n_tokens=len(t), mean_logprob=-1.0))
        d = deployed_of(q)
        dg = g.grade(d, q.gold)
        qs.append(dict(question_id=q.question_id, realized=dg.correct, reachable=False, n_correct=0, n_scored=0, k=K,
                       propensity=0.0, deployed_answer=dg.answer, deployed_text=d, deployed_scored=True,
                       deployed_finish="stop", gold=q.gold, labels=None))
    s = canonical(pd.DataFrame(rows)[SAMPLE_COLUMNS])
    return AuditResult.new(Protocol("arith_hard", k=K).resolved(task), {"spec": "hand", "fingerprint": "f"},
                           update_question_table(pd.DataFrame(qs), s, K), s)


def _slipped(q, rng) -> str:
    """The gold solution with one step's result off by one and the final answer kept: right answer, invalid."""
    body, final = q.solution.split(" #### ")
    steps = body.strip().split(";")
    i = rng.randrange(len(steps))
    lhs, c = steps[i].split("=")
    steps[i] = f"{lhs}={int(c) + 1}"
    return " " + ";".join(steps) + " #### " + final


@pytest.fixture(scope="module")
def task():
    return load_task("arith_hard", n=12)


@pytest.fixture(scope="module")
def hand(task):
    rng = random.Random(0)

    def texts(q):
        i = int(q.question_id[-2:])
        kinds = [q.solution, _slipped(q, rng), f" #### {q.gold}", " 1+1=2 #### 2", f" #### {int(q.gold) + 1}",
                 q.solution.replace(";", " ; ")]
        keep = [kinds[(i + j) % 6] if (i + j) % 3 else kinds[4] for j in range(K)]
        return keep

    return _audit(task, texts, lambda q: _slipped(q, rng) if int(q.question_id[-2:]) % 2 else q.solution)


def _solved(text: str, q) -> bool:
    """Independent: the text is the gold solution, up to spaces around ';'."""
    return text.replace(" ; ", ";") == q.solution


def test_verified_figures_against_a_direct_recomputation(task, hand):
    audit = AuditResult(hand.questions, hand.samples, trace_of(hand), record=hand.record)
    s = audit.summary()
    by_id = {q.question_id: q for q in task.questions}
    solved = {qid: [_solved(t, by_id[qid]) for t in g["text"]] for qid, g in hand.samples.groupby("question_id")}
    reach = np.mean([any(v) for v in solved.values()])
    dep = np.mean([_solved(t, by_id[qid]) for qid, t in zip(hand.questions["question_id"], hand.questions["deployed_text"])])
    assert s["O_K_trace"] == pytest.approx(reach) and s["D_trace"] == pytest.approx(dep)
    assert s["O_K_minus_O_K_trace"] == pytest.approx(s["O_K"] - reach)
    for k in (1, 2, 4, K):
        want = np.mean([1 - comb(K - sum(v), k) / comb(K, k) for v in solved.values()])
        assert s["pass_at_k_trace"][k] == pytest.approx(want)
    # maj^trace: the valid samples all carry the gold answer here, so it is "a valid sample exists"
    assert s["maj_K_trace"] == pytest.approx(reach)
    assert s["n_correct_valid_samples"] == sum(map(sum, solved.values()))
    assert 0 < s["checkable_share"] < 1 and 0 < reach <= s["O_K"]


def _exact_null(golds: list[str], answers: list[set]) -> float:
    """Every derangement within each kind enumerated: the mean share of questions hitting the borrowed gold."""
    kinds: dict[str, list[int]] = {}
    for i, g in enumerate(golds):
        kinds.setdefault(answer_kind(g), []).append(i)
    total = 0.0
    for members in kinds.values():
        ders = [p for p in itertools.permutations(members) if all(a != b for a, b in zip(members, p))]
        total += sum(sum(golds[j] in answers[i] for i, j in zip(members, p)) for p in ders) / len(ders)
    return total / len(golds)


def test_lucky_null_against_every_derangement():
    golds = ["12", "15", "18", "11", "-3", "-4", "-7", "-9", "105", "130", "171"]
    answers = [{"15", "12"}, {"11"}, {"18", "12"}, set(), {"-4"}, {"-3", "-7"}, {"-9"}, {"-7"}, {"130"}, {"105"},
               {"171", "130"}]
    q = pd.DataFrame({"question_id": [f"q{i}" for i in range(len(golds))], "gold": golds,
                      "reachable": [g in a for g, a in zip(golds, answers)]})
    s = pd.DataFrame([{"question_id": f"q{i}", "answer": a, "scored": True} for i, al in enumerate(answers)
                      for a in sorted(al)])
    null = lucky_null(q, s, n_draws=4000, seed=1)
    exact = _exact_null(golds, answers)
    assert null.O_K_null == pytest.approx(exact)
    assert null.O_K_minus_null == pytest.approx(q["reachable"].mean() - exact)
    lo, hi = null.O_K_minus_null_ci
    assert lo <= null.O_K_minus_null <= hi
    # the draws' 95th percentile against the exact distribution of the null over every combination of derangements
    groups = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]  # the kinds: +2, -1, +3 digits
    per_group = [[sum(golds[j] in answers[i] for i, j in zip(m, p)) for p in itertools.permutations(m)
                  if all(a != b for a, b in zip(m, p))] for m in groups]
    totals = [sum(c) / len(golds) for c in itertools.product(*per_group)]
    assert np.mean(totals) == pytest.approx(exact)
    assert abs(null.O_K_null_p95 - np.quantile(totals, 0.95)) <= 1 / len(golds) + 1e-9
    assert [answer_kind(g) for g in ("7", "-12", "1,319", "B")] == ["+1", "-2", "+4", "label"]


def test_the_null_of_an_audit_whose_samples_guess(task, hand):
    null = hand.lucky_null()
    assert 0 <= null.O_K_null <= null.O_K_null_p95 < hand.O_K
    assert hand.summary()["O_K_null"] == pytest.approx(null.O_K_null)


def test_rescore_show_and_compare_on_disk(task, hand, tmp_path, capsys):
    rng = random.Random(5)
    other = _audit(task, lambda q: [q.solution] * 2 + [_slipped(q, rng)] * (K - 2), lambda q: q.solution)
    hand.save(tmp_path / "base")
    other.save(tmp_path / "trained")
    assert "O_K_trace" not in AuditResult.load(tmp_path / "base").summary()
    for side in ("base", "trained"):
        assert main(["rescore", str(tmp_path / side), "--trace"]) == 0
    out = capsys.readouterr().out
    assert "verified: D^trace=" in out and "null" in out
    again = AuditResult.load(tmp_path / "base")
    assert again.trace is not None and len(again.trace) == len(again.samples) + len(again.questions)
    assert again.summary()["O_K_trace"] == pytest.approx(
        AuditResult(hand.questions, hand.samples, trace_of(hand), record=hand.record).summary()["O_K_trace"])
    assert main(["show", str(tmp_path / "base")]) == 0
    shown = capsys.readouterr().out
    assert "O_6^null=" in shown and "O_6^trace=" in shown
    c = compare(tmp_path / "base", tmp_path / "trained").summary()
    b, t = (AuditResult.load(tmp_path / side).summary() for side in ("base", "trained"))
    assert c["O_K_trace_base"] == pytest.approx(b["O_K_trace"]) and c["O_K_trace_trained"] == pytest.approx(t["O_K_trace"])
    assert c["delta_O_K_trace"] == pytest.approx(t["O_K_trace"] - b["O_K_trace"])
    assert c["delta_D_trace"] == pytest.approx(t["D_trace"] - b["D_trace"])
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "trained")]) == 0
    assert "O_K^trace (a sample solves)" in capsys.readouterr().out
    assert main(["rescore", str(tmp_path / "base"), "--trace", "nope"]) == 2  # an unknown trace grader: one line
    assert "unknown trace grader 'nope'" in capsys.readouterr().err
    assert rescore(tmp_path / "base").trace is not None  # a plain rescore keeps the trace table
    assert not math.isnan(AuditResult.load(tmp_path / "base").summary()["D_trace"])



def test_an_audit_is_trace_graded_as_it_finishes(task, hand, tiny_model, tmp_path, monkeypatch, capsys):
    """An audit of arith_hard (its slices' decoding replaced by the hand-made completions) writes its trace table and
    the verified figures with its summary: no rescore; the figures against the direct recomputation."""
    from reachlens.studies import audit
    from reachlens.studies import audit_job

    def decoded(model, task_, protocol, start, stop, exec_config, sample_offset=0):
        ids = {q.question_id for q in task_.questions[start:stop]}
        return (hand.questions[hand.questions["question_id"].isin(ids)].reset_index(drop=True),
                hand.samples[hand.samples["question_id"].isin(ids)].reset_index(drop=True))

    monkeypatch.setattr(audit_job, "audit_slice", decoded)
    result = audit(tiny_model, task, Protocol("arith_hard", k=K), out=tmp_path / "a")
    by_id = {q.question_id: q for q in task.questions}
    reach = np.mean([any(_solved(t, by_id[qid]) for t in g["text"]) for qid, g in hand.samples.groupby("question_id")])
    s = AuditResult.load(tmp_path / "a").summary()
    assert s["O_K_trace"] == pytest.approx(reach) and result.summary()["O_K_trace"] == pytest.approx(reach)
    assert s["O_K"] == pytest.approx(hand.O_K) and "O_K_null" in s and s["trace_grader"] == "arith_trace"
    assert (tmp_path / "a" / "trace.parquet").exists()
    (tmp_path / "a" / "trace.parquet").unlink()  # an audit finished before audits were trace-graded
    audit(tiny_model, task, Protocol("arith_hard", k=K), out=tmp_path / "a")  # re-run into the complete directory
    assert AuditResult.load(tmp_path / "a").trace is not None
    assert main(["show", str(tmp_path / "a")]) == 0
    shown = capsys.readouterr().out
    assert f"O_{K}^trace={reach:.3f}" in shown and f"O_{K}^null=" in shown


def test_a_study_reports_verified_reach_deltas_and_nulls(task, hand, tmp_path, capsys):
    """A study (what `reachlens demo` writes) with a trace-graded pair and one not trace-graded: its verified
    headline, summary, printed tables and `reachlens show` against the reach recomputed from the texts and an exact
    McNemar test from scipy."""
    from scipy.stats import binomtest

    from reachlens.report import text_summary
    from reachlens.store import RunDir, RunRecord
    from reachlens.studies import StudyView
    from reachlens.studies.study_plan import StudyPlan

    rng = random.Random(7)

    def made(solved, deployed_solved) -> AuditResult:
        """Solved (one valid sample among wrong answers) where ``solved(i)``, else K right answers on a slip."""
        def texts(q):
            i = int(q.question_id[-2:])
            return [q.solution] + [f" #### {int(q.gold) + 1}"] * (K - 1) if solved(i) else [_slipped(q, rng)] * K

        a = _audit(task, texts, lambda q: q.solution if deployed_solved(int(q.question_id[-2:])) else _slipped(q, rng))
        return AuditResult(a.questions, a.samples, trace_of(a), record=a.record)

    audits = {"base": made(lambda i: i % 3 != 0, lambda i: i % 2 == 1),
              "trained": made(lambda i: i % 2 == 0, lambda i: i % 3 == 0)}
    plan = StudyPlan({"base": "hand", "trained": "hand", "plain": "hand"}, (("base", "trained"), ("base", "plain")),
                     hand.protocol)
    plain = hand  # not trace-graded
    view = StudyView(plan, {**audits, "plain": plain})
    by_id = {q.question_id: q for q in task.questions}
    reach, dep = {}, {}
    for name, a in audits.items():
        reach[name] = pd.Series({qid: any(_solved(t, by_id[qid]) for t in g["text"])
                                 for qid, g in a.samples.groupby("question_id")}).sort_index()
        dep[name] = pd.Series({qid: _solved(t, by_id[qid]) for qid, t in
                               zip(a.questions["question_id"], a.questions["deployed_text"])}).sort_index()
    v = view.verified_headline().set_index("pair")
    row = v.loc["base -> trained"]
    for key, ups, side in (("O_K_trace", ("entered", "left"), reach), ("D_trace", ("gained", "lost"), dep)):
        b, t = side["base"].to_numpy(), side["trained"].to_numpy()
        up, down = int((~b & t).sum()), int((b & ~t).sum())
        assert up > 0 and down > 0  # both fates occur, so the test below reads a real McNemar p
        assert (row[f"{key}_base"], row[f"{key}_trained"]) == pytest.approx((b.mean(), t.mean()))
        assert row[f"delta_{key}"] == pytest.approx(t.mean() - b.mean())
        assert (row[f"{key}_{ups[0]}"], row[f"{key}_{ups[1]}"]) == (up, down)
        p = binomtest(min(up, down), up + down, 0.5).pvalue
        assert row[f"p_{key}"] == pytest.approx(p) and row[f"p_{key}_holm"] == pytest.approx(p)  # one graded pair
        assert row[f"delta_{key}_lo"] <= row[f"delta_{key}"] <= row[f"delta_{key}_hi"]
    assert math.isnan(v.loc["base -> plain", "delta_O_K_trace"]) and math.isnan(v.loc["base -> plain", "p_O_K_trace_holm"])
    assert v.loc["base -> plain", "O_K_null_trained"] == pytest.approx(plain.lucky_null().O_K_null)
    s = view.summary()
    assert s["audits"]["base"]["O_K_trace"] == pytest.approx(reach["base"].mean())
    assert s["audits"]["base"]["O_K_null"] == pytest.approx(audits["base"].lucky_null().O_K_null)
    assert math.isnan(s["audits"]["plain"]["O_K_trace"])
    delta = reach["trained"].mean() - reach["base"].mean()
    assert s["pairs"]["base -> trained"]["delta_O_K_trace"] == pytest.approx(delta)
    printed = text_summary(view)
    assert "headline: verified solutions" in printed and f"{delta:+.3f} [" in printed and "not trace-graded" in printed
    root = RunDir(tmp_path / "study")
    with root.writer():
        root.start(RunRecord.new("training_audit", hand.protocol, dict(plan.models)))
        root.finish(s)
    assert main(["show", str(tmp_path / "study")]) == 0
    shown = capsys.readouterr().out
    assert f"O_{K}^trace={reach['base'].mean():.3f}" in shown and f"delta O_K^trace={delta:+.3f} [" in shown
    assert f"O_{K}^null={audits['base'].lucky_null().O_K_null:.3f}" in shown
    assert "verified: not trace-graded" in shown  # the plain checkpoint
