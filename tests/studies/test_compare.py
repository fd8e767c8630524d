"""The checkpoint join: fates, consistency, refusal, propensity bins, budget extension."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import fake_audit as fake

from reachlens import Protocol, ProtocolMismatch, audit, load_task
from reachlens.errors import ReachlensError
from reachlens.studies import AuditResult, compare, extend_budget, propensity_bins

PROTO = Protocol("arith", k=4, temperature=1.0, max_new_tokens=12)


BASE = fake([True, True, False, False, False, False, False], [4, 3, 2, 1, 0, 0, 3])
TRAINED = fake([True, False, True, True, False, True, False], [4, 0, 4, 3, 1, 2, 0], spec="t")


def test_fates_by_hand():
    c = compare(BASE, TRAINED)
    assert c.questions["realized_fate"].tolist() == ["kept", "lost", "gained", "gained", "never", "gained", "never"]
    assert c.questions["reach_fate"].tolist() == ["kept", "left", "kept", "kept", "entered", "entered", "left"]
    s = c.summary()
    assert (s["gained"], s["lost"], s["net"]) == (3, 1, 2)
    assert (s["gained_from_base_reachable"], s["gained_outside_base_reachable"]) == (2, 1)
    assert s["all_gains_base_reachable"] is False
    assert (s["entered"], s["left"]) == (2, 2)


def test_fate_counts_are_consistent():
    c = compare(BASE, TRAINED)
    q, s = c.questions, c.summary()
    assert s["gained"] - s["lost"] == q["trained_realized"].sum() - q["base_realized"].sum()
    assert s["delta_D"] == pytest.approx(s["net"] / s["n"])
    assert s["entered"] - s["left"] == q["trained_reachable"].sum() - q["base_reachable"].sum()
    assert q["realized_fate"].notna().all() and q["realized_fate"].isin(["kept", "gained", "lost", "never"]).all()
    assert c.fate_counts()["n"].sum() == len(q)


def test_propensity_bins_by_hand():
    c = compare(BASE, TRAINED)
    bins = c.propensity_bins((0.0, 0.3, 0.6, 1.0))
    # base reachable & unrealized: q2 (0.5 -> realized), q3 (0.25 -> realized), q6 (0.75 -> not)
    assert bins["n"].tolist() == [1, 1, 1]
    assert bins["realized_after"].tolist() == [1, 1, 0]
    assert bins["rate"].tolist() == [1.0, 1.0, 0.0]
    with pytest.raises(ReachlensError, match="must increase from 0.0 to 1.0"):
        propensity_bins(c.questions, (0.1, 1.0))


def test_mismatched_protocols_are_refused_naming_fields():
    other = fake([True] * 7, [4] * 7, protocol=Protocol("arith", k=4, temperature=0.7, max_new_tokens=16))
    with pytest.raises(ProtocolMismatch, match="temperature, max_new_tokens"):
        compare(BASE, other)


def test_allowed_field_lets_a_control_through():
    verbose = fake([True] * 7, [4] * 7, protocol=Protocol("arith", k=4, temperature=1.0, max_new_tokens=12,
                                                            prompt_format="verbose"))
    with pytest.raises(ProtocolMismatch, match="prompt_format"):
        compare(BASE, verbose)
    assert compare(BASE, verbose, allow=("prompt_format",)).summary()["n"] == 7


def test_different_question_sets_are_refused():
    short = fake([True] * 3, [4] * 3)
    with pytest.raises(ProtocolMismatch, match="different question sets"):
        compare(BASE, short)


def test_budgets_differ_only_with_common_k():
    big = fake([True] * 7, [8] * 7, k=8, protocol=PROTO.with_k(8))
    with pytest.raises(ProtocolMismatch, match="k"):
        compare(BASE, big)
    assert compare(BASE, big, k=4).summary()["k"] == 4


def test_extend_budget_equals_a_fresh_audit(tiny_model, tmp_path):
    task = load_task("arith", n=4)
    small = audit(tiny_model, task, PROTO, out=tmp_path / "k4", max_batch_rows=10)
    fresh = audit(tiny_model, task, PROTO.with_k(8), max_batch_rows=40)
    ext = extend_budget(tiny_model, task, tmp_path / "k4", 8, out=tmp_path / "k8", max_batch_rows=10)
    pd.testing.assert_frame_equal(ext.samples[["question_id", "sample_idx", "text", "correct"]],
                                  fresh.samples[["question_id", "sample_idx", "text", "correct"]])
    assert ext.questions["n_correct"].tolist() == fresh.questions["n_correct"].tolist()
    assert AuditResult.load(tmp_path / "k8").k == 8
    # the first K samples are the stored ones, untouched
    pd.testing.assert_frame_equal(ext.restrict_k(4).samples, small.samples)
    with pytest.raises(ReachlensError, match="must exceed"):
        extend_budget(tiny_model, task, small, 4)


def test_pass_at_k_crossover_by_hand():
    # base: one correct of 4 on every question; trained: all 4 on two questions, none on the others.
    base = fake([False] * 4, [1, 1, 1, 1])
    trained = fake([True, True, False, False], [4, 4, 0, 0])
    c = compare(base, trained)
    table = c.pass_at_k_curve().set_index("k")
    # pass@1: 0.25 vs 0.5; pass@2: 1 - C(3,2)/C(4,2) = 0.5 for the base, 0.5 for the trained (a touch);
    # pass@4: 1.0 vs 0.5. The trained model leads at k=1, ties at 2, and the base leads from k=4.
    assert table["base"].tolist() == pytest.approx([0.25, 0.5, 1.0])
    assert table["trained"].tolist() == pytest.approx([0.5, 0.5, 0.5])
    assert table["delta"].tolist() == pytest.approx([0.25, 0.0, -0.5])
    assert c.crossovers() == [4]
    assert compare(base, base).crossovers() == []
    # the paired interval: at k=4 the per-question differences are 0, 0, -1, -1; resampling four questions
    # draws only zeros with probability 1/16 > 2.5 %, so the interval reaches 0 and the crossing is noise
    lo, hi = table.loc[4, ["delta_lo", "delta_hi"]]
    assert lo == -1.0 and hi == 0.0
    assert c.crossovers(outside_noise=True) == []
    # the same pool ten times over (40 questions): the crossing at k=4 holds beyond noise
    big = compare(fake([False] * 40, [1] * 40), fake([True, True, False, False] * 10, [4, 4, 0, 0] * 10))
    assert big.pass_at_k_curve().set_index("k").loc[4, "delta_hi"] < 0
    assert big.crossovers(outside_noise=True) == [4]
