"""The audit end to end on a tiny random model: tables, resume, refusal, rescore, budget extension."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import StopAudit, stop_after
from reachlens.execution import ExecConfig
from reachlens import Protocol, ProtocolMismatch, audit, load_task, rescore
from reachlens.engine import Completion
from reachlens.studies import AuditResult, grade_questions
from reachlens.tasks import Question

PROTO = Protocol("arith", k=4, temperature=1.0, max_new_tokens=12)


@pytest.fixture(scope="module")
def task():
    return load_task("arith", n=6)


def test_audit_tables_and_summary(tiny_model, task):
    r = audit(tiny_model, task, PROTO, exec_config=ExecConfig(max_batch_rows=10))
    assert list(r.questions["question_id"]) == [q.question_id for q in task.questions]
    assert len(r.samples) == 6 * 4
    assert set(r.samples.groupby("question_id").size()) == {4}
    assert (r.questions["k"] == 4).all()
    q = r.questions.set_index("question_id")
    counts = r.samples.groupby("question_id")["correct"].sum()
    assert (q["n_correct"] == counts.reindex(q.index)).all()
    assert (q["reachable"] == (q["n_correct"] > 0)).all()
    assert r.protocol.stop == ("\n",) and r.protocol.prompt_format == "qa" and r.protocol.grader == "numeric"
    assert 0 <= r.D <= 1 and r.D <= r.O_K or not r.questions["realized"].any()
    assert list(r.pass_at_k_curve()["k"]) == [1, 2, 4]


def test_grading_tables_from_hand_made_completions():
    qs = [Question("a", {"expr": "1+1"}, "2"), Question("b", {"expr": "2+2"}, "4")]

    def c(text):
        return Completion(text, (1,), "stop", (-0.5,))

    q, s = grade_questions(
        PROTO.resolved(load_task("arith", n=1)),
        qs,
        [c(" 1+1=2 #### 2"), c(" 2+2=5 #### 5")],
        [[c("#### 3"), c("#### 2"), c("x"), c("#### 2")], [c("#### 5")] * 4],
    )
    assert q["realized"].tolist() == [True, False]
    assert q["reachable"].tolist() == [True, False]
    assert q["n_correct"].tolist() == [2, 0]
    assert q["propensity"].tolist() == [0.5, 0.0]
    assert s["answer"].tolist()[:2] == ["3", "2"] and pd.isna(s["answer"][2])
    r = AuditResult.new(PROTO, {"spec": "x", "fingerprint": "y"}, q, s)
    assert r.D == 0.5 and r.O_K == 0.5 and r.gap == 0.0


def test_each_distinct_text_of_a_question_is_graded_once_with_the_same_rows(monkeypatch):
    import reachlens.runner.decode as mod
    from reachlens.grading.numeric import NumericGrader

    qs = [Question("a", {"expr": "1+1"}, "2"), Question("b", {"expr": "2+2"}, "4")]
    texts = [["#### 2", "#### 3", "#### 2", "x", "#### 2"], ["#### 2", "#### 4", "#### 4"]]
    samples = [[Completion(t, (1,), "stop", (-0.5,)) for t in row] for row in texts]
    protocol = PROTO.resolved(load_task("arith", n=1))
    graded = []
    real = NumericGrader.grade
    monkeypatch.setattr(NumericGrader, "grade", lambda self, text, gold: graded.append((text, gold)) or real(self, text, gold))
    s = mod.grade_samples(protocol, qs, samples)
    assert sorted(graded) == sorted({(t, q.gold) for q, row in zip(qs, texts) for t in row})  # once per (text, question)
    by_hand = [real(NumericGrader(), t, q.gold) for q, row in zip(qs, texts) for t in row]
    assert s["correct"].tolist() == [bool(g.correct and g.scored) for g in by_hand]
    assert s["answer"].fillna("-").tolist() == [g.answer if g.answer is not None else "-" for g in by_hand]
    assert s["candidate_idx"].tolist() == [0, 1, 2, 3, 4, 0, 1, 2]


def test_resume_after_interruption_equals_uninterrupted_run(tiny_model, task, tmp_path):
    whole = audit(tiny_model, task, PROTO, out=tmp_path / "whole", exec_config=ExecConfig(max_batch_rows=10))

    with pytest.raises(StopAudit):
        audit(tiny_model, task, PROTO, out=tmp_path / "cut", exec_config=ExecConfig(max_batch_rows=10), progress=stop_after(2))
    partial = AuditResult.load(tmp_path / "cut")
    assert 0 < len(partial.questions) < len(task)
    resumed = audit(tiny_model, task, PROTO, out=tmp_path / "cut", exec_config=ExecConfig(max_batch_rows=10))
    pd.testing.assert_frame_equal(resumed.questions, whole.questions)
    pd.testing.assert_frame_equal(resumed.samples, whole.samples)
    reloaded = AuditResult.load(tmp_path / "cut")
    pd.testing.assert_frame_equal(reloaded.samples, whole.samples)
    assert (tmp_path / "cut" / "summary.json").is_file() and not (tmp_path / "cut" / "parts").exists()


def test_resume_skips_finished_questions(tiny_model, task, tmp_path):
    audit(tiny_model, task, PROTO, out=tmp_path / "a", exec_config=ExecConfig(max_batch_rows=10))
    import reachlens.runner.decode as mod

    calls = []
    real = mod.generate_rows
    mod.generate_rows = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        seen = []
        audit(tiny_model, task, PROTO, out=tmp_path / "a", exec_config=ExecConfig(max_batch_rows=10), progress=lambda done, total: seen.append(done))
        assert calls == [] and seen[-1] == len(task)
        audit(tiny_model, load_task("arith", n=8), PROTO, out=tmp_path / "a", exec_config=ExecConfig(max_batch_rows=10))
        assert len(calls) == 1  # only the batch holding the two new questions is decoded
    finally:
        mod.generate_rows = real


def test_protocol_mismatch_is_refused_naming_fields(tiny_model, task, tmp_path):
    audit(tiny_model, task.head(2), PROTO, out=tmp_path / "d", exec_config=ExecConfig(max_batch_rows=10))
    other = Protocol("arith", k=5, temperature=0.7, max_new_tokens=12)
    with pytest.raises(ProtocolMismatch, match="k, temperature"):
        audit(tiny_model, task.head(2), other, out=tmp_path / "d")


def test_different_model_into_the_same_directory_is_refused(tiny_model, task, tmp_path, monkeypatch):
    from reachlens.models import ModelIdentity

    audit(tiny_model, task.head(2), PROTO, out=tmp_path / "d", exec_config=ExecConfig(max_batch_rows=10))
    monkeypatch.setattr(tiny_model, "reachlens_identity", ModelIdentity("zoo:other", "abc"))
    with pytest.raises(ProtocolMismatch, match="model.spec, model.fingerprint") as err:
        audit(tiny_model, task.head(2), PROTO, out=tmp_path / "d")
    assert "write to a new directory (out=), or delete this one to redo it" in str(err.value)


def test_rescore_reproduces_the_stored_grades(tiny_model, task, tmp_path):
    r = audit(tiny_model, task, PROTO, out=tmp_path / "r", exec_config=ExecConfig(max_batch_rows=10))
    again = rescore(tmp_path / "r")
    pd.testing.assert_frame_equal(again.questions, r.questions)
    pd.testing.assert_frame_equal(again.samples, r.samples)


def test_rescore_applies_a_changed_grader(tiny_model, task, tmp_path):
    audit(tiny_model, task.head(2), PROTO, out=tmp_path / "r", exec_config=ExecConfig(max_batch_rows=10))
    r = rescore(tmp_path / "r", grader="math")
    assert r.protocol.grader == "math"
    assert AuditResult.load(tmp_path / "r").protocol.grader == "math"
    with pytest.raises(LookupError, match="unknown grader 'nope'"):
        rescore(tmp_path / "r", grader="nope")


def test_budget_extension_reuses_the_first_k_samples(tiny_model, task):
    small = audit(tiny_model, task, PROTO, exec_config=ExecConfig(max_batch_rows=10))
    big = audit(tiny_model, task, PROTO.with_k(8), exec_config=ExecConfig(max_batch_rows=40))
    restricted = big.restrict_k(4)
    assert restricted.samples["text"].tolist() == small.samples["text"].tolist()
    from reachlens.runner import run_jobs
    from reachlens.studies import AuditJob, rerun

    extra = run_jobs([AuditJob(tiny_model, task, PROTO, exec_config=ExecConfig(max_batch_rows=10), sample_offset=4)])[0]
    assert extra.samples["candidate_idx"].min() == 4
    assert extra.samples["text"].tolist() == big.samples[big.samples["candidate_idx"] >= 4]["text"].tolist()
    # the budget control is a rerun at k=8: the first 4 samples reused, the next 4 drawn, equal to a fresh K=8 audit
    extended = rerun(small, k=8, model=tiny_model, task=task, exec_config=ExecConfig(max_batch_rows=10))
    pd.testing.assert_frame_equal(extended.samples, big.samples)
    pd.testing.assert_frame_equal(extended.questions, big.questions)


def test_audit_without_prefix_sharing_gives_the_same_samples(tiny_model, task):
    proto = Protocol("arith", k=8, temperature=0.7, max_new_tokens=12)
    shared = audit(tiny_model, task, proto)
    alone = audit(tiny_model, task, proto, exec_config=ExecConfig(share_prefixes=False))
    pd.testing.assert_frame_equal(shared.samples.drop(columns="mean_logprob"), alone.samples.drop(columns="mean_logprob"))
    assert (shared.samples["mean_logprob"] - alone.samples["mean_logprob"]).abs().max() < 1e-5
    assert shared.samples.groupby("question_id")["text"].nunique().min() < 8, "some samples must agree to share"


def test_summary_maj_K_is_the_majority_vote_of_the_samples_table():
    """maj_K and the selection gap of a real audit (zoo:base, ties among its answers) against a majority vote
    counted here from its samples table with Counter, and a Wilson interval from statsmodels."""
    from collections import Counter

    import numpy as np
    from statsmodels.stats import proportion

    from reachlens.models import load_model

    r = audit(load_model("zoo:base"), load_task("arith", n=12),
              Protocol("arith", k=6, temperature=1.0, max_new_tokens=24, seed=3))
    per_question, tied_somewhere = [], False
    for _, g in r.samples.groupby("question_id"):
        voters = g[g["scored"] & g["answer"].notna()]
        votes = Counter(voters["answer"])
        top = max(votes.values()) if votes else 0
        tied = [a for a, n in votes.items() if n == top]
        tied_somewhere |= len(tied) > 1
        per_question.append(np.mean([voters.loc[voters["answer"] == a, "correct"].iloc[0] for a in tied]) if tied else 0.0)
    assert tied_somewhere and g["scored"].all()  # the tie path is exercised; every sample graded
    s = r.summary()
    assert s["maj_K"] == pytest.approx(np.mean(per_question))
    assert s["maj_K_ci"] == pytest.approx(list(proportion.proportion_confint(sum(per_question), len(per_question),
                                                                            method="wilson")))
    assert s["selection_gap"] == pytest.approx(s["O_K"] - s["maj_K"])
    lo, hi = s["selection_gap_ci"]
    assert lo <= s["selection_gap"] <= hi
