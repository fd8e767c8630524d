"""The checkpoint join: fates, consistency, refusal, propensity bins, budget extension."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import fake_audit as fake

from reachlens.execution import ExecConfig
from reachlens import Protocol, ProtocolMismatch, audit, load_task
from reachlens.errors import ReachlensError
from reachlens.studies import rerun
from reachlens.studies import AuditResult, compare, propensity_bins

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


def test_a_budget_rerun_equals_a_fresh_audit(tiny_model, tmp_path):
    task = load_task("arith", n=4)
    small = audit(tiny_model, task, PROTO, out=tmp_path / "k4", exec_config=ExecConfig(max_batch_rows=10))
    fresh = audit(tiny_model, task, PROTO.with_k(8), exec_config=ExecConfig(max_batch_rows=40))
    ext = rerun(tmp_path / "k4", model=tiny_model, task=task, k=8, into=tmp_path, exec_config=ExecConfig(max_batch_rows=10))
    pd.testing.assert_frame_equal(ext.samples[["question_id", "candidate_idx", "text", "correct"]],
                                  fresh.samples[["question_id", "candidate_idx", "text", "correct"]])
    assert ext.questions["n_correct"].tolist() == fresh.questions["n_correct"].tolist()
    assert AuditResult.load(tmp_path / "k4--k=8").k == 8 and ext.location == tmp_path / "k4--k=8"
    # the first K samples are the stored ones, untouched
    pd.testing.assert_frame_equal(ext.restrict_k(4).samples, small.samples)
    with pytest.raises(ReachlensError, match="k=4 is the audit's own; a rerun changes it"):
        rerun(small, model=tiny_model, task=task, k=4)


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


def test_summary_tests_every_delta_against_independent_references():
    from scipy.stats import binomtest
    from statsmodels.stats.multitest import multipletests
    from statsmodels.stats.proportion import proportion_confint

    c = compare(BASE, TRAINED)
    s = c.summary()
    # McNemar beside the counts it tests: gained 3 vs lost 1, entered 2 vs left 2
    assert s["mcnemar_realized_p"] == pytest.approx(binomtest(3, 4, 0.5).pvalue)
    assert s["mcnemar_reachable_p"] == pytest.approx(binomtest(2, 4, 0.5).pvalue)
    keys = list(s)
    assert keys.index("mcnemar_realized_p") == keys.index("lost") + 1
    assert keys.index("mcnemar_reachable_p") == keys.index("left") + 1
    # Wilson intervals of the four rates
    assert s["D_base_ci"] == pytest.approx(list(proportion_confint(2, 7, method="wilson")))
    assert s["O_K_trained_ci"] == pytest.approx(list(proportion_confint(5, 7, method="wilson")))
    # the paired bootstrap of delta D, by a plain loop over resampled questions (same generator, same draws)
    d = (c.questions["trained_realized"].astype(float) - c.questions["base_realized"].astype(float)).to_numpy()
    rng = np.random.default_rng(s["bootstrap_seed"])
    idx = rng.integers(0, len(d), size=(s["bootstrap_resamples"], len(d)))
    means = [d[row].mean() for row in idx]
    assert s["delta_D_ci"] == pytest.approx(list(np.percentile(means, [2.5, 97.5])))
    assert s["bootstrap_resamples"] >= 2000
    lo, hi = s["delta_O_K_ci"]
    assert lo <= s["delta_O_K"] <= hi
    # pass@k at every k: a delta, its interval, a p and the Holm p over the ks
    ks = sorted(s["delta_pass_at_k"])
    assert ks == [1, 2, 4]
    ps = [s["delta_pass_at_k"][k]["p"] for k in ks]
    assert [s["delta_pass_at_k"][k]["p_holm"] for k in ks] == pytest.approx(multipletests(ps, method="holm")[1].tolist())
    assert "3 ks" in s["holm_family"]


def test_unreachability_bounds_per_question_and_for_the_left_group():
    c = compare(BASE, TRAINED)
    q = c.questions.set_index("question_id")
    # q1 and q6 left the reachable set (0 of 4 correct after training); q4 never was reachable by the base
    assert q.loc["q1", "trained_unreachable_bound"] == pytest.approx(1 - 0.05 ** 0.25)
    assert np.isnan(q.loc["q0", "trained_unreachable_bound"])
    assert q.loc["q4", "base_unreachable_bound"] == pytest.approx(1 - 0.05 ** 0.25)
    left = c.summary()["left_bound"]
    assert left["n"] == 2 and left["min"] == left["max"] == pytest.approx(1 - 0.05 ** 0.25)
    assert compare(BASE, BASE).summary()["left_bound"]["n"] == 0


def test_truncation_parity_is_flagged_beyond_the_margin():
    from reachlens.studies.compare import truncation_parity

    cut = fake([True] * 7, [4] * 7, spec="t")
    cut.samples.loc[cut.samples.index[:3], "finish_reason"] = "length"  # 3 of 28 samples: 10.7 points
    cut.questions.loc[0, "deployed_finish"] = "length"  # 1 of 7 deployed
    t = compare(BASE, cut).summary()["truncation"]
    assert t["samples_base"] == 0 and t["samples_trained"] == pytest.approx(3 / 28)
    assert t["deployed_gap"] == pytest.approx(1 / 7)
    assert t["flagged"] is True and t["margin"] == 0.02
    assert truncation_parity(BASE, BASE)["flagged"] is False
    assert cut.summary()["truncated_samples"] == pytest.approx(3 / 28)


def test_propensity_bins_carry_wilson_intervals():
    from statsmodels.stats.proportion import proportion_confint

    bins = compare(BASE, TRAINED).propensity_bins((0.0, 0.3, 0.6, 1.0))
    for row in bins.itertuples():
        assert (row.rate_lo, row.rate_hi) == pytest.approx(proportion_confint(row.realized_after, row.n, method="wilson"))


def _voted(answers: list[list[str]], spec: str) -> AuditResult:
    """An audit whose K=4 samples answer ``answers`` (gold "2" everywhere), graded by the arith grader."""
    from reachlens.engine import Completion
    from reachlens.studies import grade_questions
    from reachlens.tasks import Question

    proto = PROTO.resolved(load_task("arith", n=1))
    qs = [Question(f"q{i}", {"expr": "1+1"}, "2") for i in range(len(answers))]
    done = lambda a: Completion(f" #### {a}", (1,), "stop", (-0.5,))  # noqa: E731
    q, s = grade_questions(proto, qs, [done("2")] * len(qs), [[done(a) for a in row] for row in answers])
    return AuditResult.new(proto, {"spec": spec, "fingerprint": spec}, q, s, {"generator": "voted"})


def _counted(answers: list[list[str]]) -> list[float]:
    """Each question's majority correctness (gold "2"), ties averaged, counted with Counter."""
    from collections import Counter

    out = []
    for row in answers:
        votes = Counter(row)
        tied = [a for a, n in votes.items() if n == max(votes.values())]
        out.append(sum(a == "2" for a in tied) / len(tied))
    return out


BASE_VOTES = [["2", "2", "3", "4"], ["3", "3", "3", "2"], ["5", "5", "2", "1"], ["2"] * 4, ["7", "7", "8", "9"],
              ["3", "3", "2", "1"]]
TRAINED_VOTES = [["3", "3", "2", "4"], ["2", "2", "2", "3"], ["2", "2", "2", "5"], ["2"] * 4, ["7", "7", "7", "9"],
                 ["2"] * 4]


def test_delta_maj_K_with_exact_mcnemar_when_every_majority_is_whole():
    from scipy.stats import binomtest

    c = compare(_voted(BASE_VOTES, "b"), _voted(TRAINED_VOTES, "t"))
    s = c.summary()
    b, t = _counted(BASE_VOTES), _counted(TRAINED_VOTES)
    assert c.questions["base_majority"].tolist() == b and c.questions["trained_majority"].tolist() == t
    assert (s["maj_K_base"], s["maj_K_trained"]) == pytest.approx((np.mean(b), np.mean(t)))
    assert s["delta_maj_K"] == pytest.approx(np.mean(t) - np.mean(b))
    gained = sum(x > y for x, y in zip(t, b))
    lost = sum(x < y for x, y in zip(t, b))
    assert (gained, lost) == (3, 1)
    assert s["majority_test"] == "mcnemar" and s["majority_p"] == pytest.approx(binomtest(lost, gained + lost).pvalue)
    d = np.array(t) - np.array(b)
    means = d[np.random.default_rng(0).integers(0, len(d), size=(s["bootstrap_resamples"], len(d)))].mean(axis=1)
    assert s["delta_maj_K_ci"] == pytest.approx([np.quantile(means, 0.025), np.quantile(means, 0.975)])


def test_delta_maj_K_with_a_sign_flip_test_when_ties_make_it_fractional():
    import itertools

    trained = [["2", "2", "3", "3"], *TRAINED_VOTES[1:]]  # a 2-2 tie: majority 0.5
    s = compare(_voted(BASE_VOTES, "b"), _voted(trained, "t")).summary()
    d = np.array(_counted(trained)) - np.array(_counted(BASE_VOTES))
    assert s["majority_test"] == "sign-flip" and s["delta_maj_K"] == pytest.approx(d.mean())
    nz = d[d != 0]  # every sign pattern of the non-zero differences, enumerated here
    flips = [abs(np.dot(signs, nz)) >= abs(nz.sum()) - 1e-12 for signs in itertools.product((1, -1), repeat=len(nz))]
    assert s["majority_p"] == pytest.approx(np.mean(flips))
