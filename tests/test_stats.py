"""The statistics module against references computed another way, in the test.

McNemar against scipy.stats.binomtest, Wilson against statsmodels' proportion_confint, the bootstrap
against a plain loop, the sign-flip test against scipy.stats.permutation_test, Holm against hand
arithmetic and statsmodels' multipletests, the unreachability bound against its defining equation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reachlens.errors import ReachlensError
from reachlens.stats import (
    holm,
    mcnemar_exact_p,
    paired_bootstrap_ci,
    paired_permutation_p,
    unreachability_bound,
    wilson_interval,
)

scipy_stats = pytest.importorskip("scipy.stats")
proportion = pytest.importorskip("statsmodels.stats.proportion")
multitest = pytest.importorskip("statsmodels.stats.multitest")


@pytest.mark.parametrize("b,c", [(28, 37), (24, 44), (2, 133), (1, 2), (0, 5), (5, 5), (0, 1), (100, 140), (7, 0)])
def test_mcnemar_matches_scipy_binomtest(b, c):
    expected = scipy_stats.binomtest(b, b + c, 0.5, alternative="two-sided").pvalue
    assert mcnemar_exact_p(b, c) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_of_the_issue_figures_and_edges():
    # issue 12: base -> grpo gains 28, loses 37 (p = 0.32); base -> dapo gains 24, loses 44 (p = 0.02)
    assert round(mcnemar_exact_p(28, 37), 2) == 0.32
    assert round(mcnemar_exact_p(24, 44), 2) == 0.02
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(3, 3) == 1.0
    assert mcnemar_exact_p(0, 3) == pytest.approx(2 / 8)  # hand: 2 * P(X=0), X ~ Bin(3, 1/2)
    with pytest.raises(ReachlensError, match="must be >= 0"):
        mcnemar_exact_p(-1, 3)


@given(st.integers(0, 60), st.integers(0, 60))
@settings(max_examples=60, deadline=None)
def test_mcnemar_matches_scipy_everywhere(b, c):
    expected = 1.0 if b + c == 0 else scipy_stats.binomtest(b, b + c, 0.5).pvalue
    assert mcnemar_exact_p(b, c) == pytest.approx(expected, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("x,n", [(0, 10), (10, 10), (5, 10), (1, 300), (137, 300), (299, 300), (0, 1), (3, 7)])
@pytest.mark.parametrize("level", [0.95, 0.9])
def test_wilson_matches_statsmodels(x, n, level):
    lo, hi = wilson_interval(x, n, level)
    ref = proportion.proportion_confint(x, n, alpha=1 - level, method="wilson")
    assert (lo, hi) == pytest.approx(ref, abs=1e-12)


def test_wilson_vectorized_and_empty():
    lo, hi = wilson_interval(np.array([0, 3, 0]), np.array([5, 7, 0]))
    ref = [proportion.proportion_confint(x, n, method="wilson") for x, n in ((0, 5), (3, 7))]
    assert lo[:2] == pytest.approx([r[0] for r in ref]) and hi[:2] == pytest.approx([r[1] for r in ref])
    assert math.isnan(lo[2]) and math.isnan(hi[2])
    assert all(math.isnan(v) for v in wilson_interval(0, 0))
    with pytest.raises(ReachlensError, match="must lie in 0..n"):
        wilson_interval(4, 3)


def test_paired_bootstrap_matches_a_plain_loop():
    rng = np.random.default_rng(7)
    diff = rng.choice([-1.0, 0.0, 0.0, 1.0, 1.0], size=120)
    lo, hi = paired_bootstrap_ci(diff, n_boot=4000, seed=3)
    # the reference: resample the questions one draw at a time, with another generator and seed
    ref_rng = np.random.default_rng(12345)
    means = []
    for _ in range(20000):
        means.append(np.mean([diff[ref_rng.integers(len(diff))] for _ in range(len(diff))]))
    ref_lo, ref_hi = np.percentile(means, [2.5, 97.5])
    step = 1 / len(diff)  # the resolution of a mean of 120 values in {-1, 0, 1}
    assert abs(lo - ref_lo) <= 2 * step and abs(hi - ref_hi) <= 2 * step
    # and it is centred on the mean, with the width of a normal interval of the mean
    se = diff.std(ddof=1) / math.sqrt(len(diff))
    assert (hi - lo) == pytest.approx(2 * 1.96 * se, rel=0.15)


def test_paired_bootstrap_is_seeded_and_skips_nan():
    d = np.array([1.0, np.nan, 0.0, 1.0, -1.0, np.nan])
    assert paired_bootstrap_ci(d, seed=1) == paired_bootstrap_ci(d, seed=1)
    assert paired_bootstrap_ci(d, seed=1) == paired_bootstrap_ci(d[~np.isnan(d)], seed=1)
    assert all(math.isnan(v) for v in paired_bootstrap_ci(np.array([np.nan, np.nan])))
    with pytest.raises(ReachlensError, match="level"):
        paired_bootstrap_ci(d, level=1.5)


def test_sign_flip_matches_scipy_permutation_test_exactly_when_small():
    rng = np.random.default_rng(1)
    for _ in range(5):
        d = rng.normal(0.1, 1.0, size=9)
        ref = scipy_stats.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=np.inf,
                                           alternative="two-sided").pvalue
        assert paired_permutation_p(d) == pytest.approx(ref, rel=1e-9)


def test_sign_flip_monte_carlo_is_close_to_exact_and_never_zero():
    rng = np.random.default_rng(2)
    d = rng.normal(0.15, 1.0, size=40)  # 2^40 patterns: Monte Carlo
    ref = scipy_stats.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=200000,
                                       alternative="two-sided", random_state=9).pvalue
    p = paired_permutation_p(d, n_perm=20000, seed=5)
    assert p == pytest.approx(ref, abs=0.015)
    assert paired_permutation_p(np.full(40, 1.0)) == pytest.approx(1 / 10001)
    assert paired_permutation_p(np.zeros(5)) == 1.0


def test_holm_by_hand_and_against_statsmodels():
    # hand: sorted 0.01, 0.03, 0.04 times 3, 2, 1 -> 0.03, 0.06, 0.04 -> monotone 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.2]) == pytest.approx([0.5, 0.4])
    assert holm([0.6, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([]) == []
    out = holm([0.02, float("nan"), 0.01])  # NaN is outside the family: m = 2
    assert out[0] == pytest.approx(0.02) and math.isnan(out[1]) and out[2] == pytest.approx(0.02)
    rng = np.random.default_rng(3)
    p = rng.uniform(0, 0.2, size=12)
    assert holm(p.tolist()) == pytest.approx(multitest.multipletests(p, method="holm")[1].tolist())


def test_unreachability_bound_is_the_rule_of_three():
    for k in (1, 4, 50, 200, 400):
        p = unreachability_bound(k)
        assert (1 - p) ** k == pytest.approx(0.05)  # the defining equation: all k miss with probability 5 %
        # and the Clopper-Pearson one-sided upper limit at 0 successes, from scipy's beta quantile
        assert p == pytest.approx(scipy_stats.beta.ppf(0.95, 1, k))
    assert unreachability_bound(200) == pytest.approx(3 / 200, rel=0.01)  # about 3/K for large K
    assert unreachability_bound(0) == 1.0
    assert unreachability_bound(np.array([4, 0])).tolist() == pytest.approx([1 - 0.05 ** 0.25, 1.0])


@pytest.mark.parametrize("n", [1, 3, 10, 20, 57, 300, 10_000])
def test_wilson_bounds_at_zero_and_n_are_exact(n):
    """Issue 53, finding 3: 0 successes reported a lower bound of 2.776e-17 (n=10); the bound is exactly 0 (and
    exactly 1 at n successes), as statsmodels' closed form says at those ends."""
    assert wilson_interval(0, n)[0] == 0.0 and wilson_interval(n, n)[1] == 1.0
    lo, hi = wilson_interval(np.array([0, n]), np.array([n, n]))
    assert lo[0] == 0.0 and hi[1] == 1.0
    ref = proportion.proportion_confint(0, n, method="wilson")
    assert wilson_interval(0, n)[1] == pytest.approx(ref[1], abs=1e-12)


def test_an_audit_with_no_correct_question_reports_zero(tiny_model):
    """The summary a user reads: D_ci, O_K_ci and maj_K_ci of an audit of arith_null (no model reaches it) start
    at 0."""
    from reachlens import Protocol, audit, load_task

    task = load_task("arith_null", n=10)
    r = audit(tiny_model, task, Protocol("arith_null", k=2, temperature=1.0, max_new_tokens=4))
    s = r.summary()
    assert s["D"] == s["O_K"] == 0.0
    assert s["D_ci"][0] == 0.0 and s["O_K_ci"][0] == 0.0 and s["maj_K_ci"][0] == 0.0
