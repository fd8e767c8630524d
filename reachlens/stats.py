"""The statistics a skeptic asks for: paired tests, intervals, multiplicity and unreachability bounds.

Every function here is pure (numbers in, numbers out) and seeded where it resamples, so a table
that quotes it can be recomputed bit for bit.

* :func:`mcnemar_exact_p`: the exact McNemar test of a paired binary change. Of the questions whose
  outcome changed, ``b`` went one way and ``c`` the other; under "no change in the rate" each change
  is a fair coin, so the two-sided p-value is ``min(1, 2 * P(X <= min(b, c)))`` for
  ``X ~ Binomial(b + c, 1/2)`` (the doubled smaller tail; for a symmetric binomial this equals
  scipy's ``binomtest(b, b + c).pvalue``). No change at all (``b + c = 0``) gives p = 1.
* :func:`wilson_interval`: the Wilson score interval of a binomial rate; unlike the Wald interval it
  stays inside [0, 1] and does not collapse to a point at 0 or n successes.
* :func:`paired_bootstrap_ci`: the percentile interval of a mean per-question difference,
  resampling questions with replacement (the pairing is kept: a question's two outcomes travel
  together). Percentile intervals of a mean are slightly narrow for small n; at the n of an audit
  (hundreds of questions) they agree with the BCa interval to the resolution an audit reports.
* :func:`paired_permutation_p`: the two-sided sign-flip test of a mean per-question difference
  (under "the two checkpoints are exchangeable on each question" every difference is as likely
  negated); exact enumeration when the non-zero differences are few, else a seeded Monte Carlo
  estimate ``(1 + hits) / (1 + n_perm)``, which is never 0.
* :func:`holm`: the Holm step-down adjustment of a family of p-values (controls the family-wise
  error rate, no independence assumed).
* :func:`unreachability_bound`: for a question with 0 of n samples correct, the one-sided upper
  confidence bound on its per-sample success probability, ``1 - alpha ** (1 / n)`` (about 3/n at 95 %,
  the "rule of three"): "unreachable at K samples" means "per-sample rate below this bound".
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np
from jaxtyping import Float

from reachlens.errors import ReachlensError

__all__ = [
    "N_BOOT",
    "N_PERM",
    "holm",
    "mcnemar_exact_p",
    "paired_bootstrap_ci",
    "paired_permutation_p",
    "unreachability_bound",
    "wilson_interval",
]

N_BOOT = 2000
"""Bootstrap resamples behind every interval reachlens reports (each table says so)."""
N_PERM = 10000
"""Sign-flip permutations behind a Monte Carlo permutation p-value (exact below 2^13 patterns)."""


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ReachlensError(f"level={level!r} must lie in (0, 1)")


def mcnemar_exact_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value of ``b`` changes one way against ``c`` the other.

    >>> mcnemar_exact_p(0, 0)
    1.0
    >>> round(mcnemar_exact_p(1, 9), 6)  # 2 * (1 + 9) / 2**10
    0.021484
    """
    b, c = int(b), int(c)
    if b < 0 or c < 0:
        raise ReachlensError(f"discordant counts must be >= 0, got b={b!r}, c={c!r}")
    n = b + c
    if n == 0:
        return 1.0
    lo = min(b, c)
    # P(X <= lo) for X ~ Binomial(n, 1/2), summed exactly in integers before one division
    tail = sum(math.comb(n, i) for i in range(lo + 1))
    return min(1.0, 2 * tail / 2**n)


def wilson_interval(successes, n, level: float = 0.95):
    """The Wilson score interval ``(lo, hi)`` of ``successes`` out of ``n`` (scalars or arrays).

    Undefined (NaN) where ``n`` is 0. At 0 successes the lower bound is exactly 0 and at ``n`` the upper bound
    exactly 1 (the formula's cancellation would leave 2.8e-17 there).

    >>> tuple(round(x, 4) for x in wilson_interval(0, 10))
    (0.0, 0.2775)
    >>> tuple(round(x, 4) for x in wilson_interval(5, 10))
    (0.2366, 0.7634)
    """
    _check_level(level)
    x = np.asarray(successes, dtype=float)
    m = np.asarray(n, dtype=float)
    if np.any(x < 0) or np.any(x > m):
        raise ReachlensError(f"successes={successes!r} must lie in 0..n={n!r}")
    z = NormalDist().inv_cdf(0.5 + level / 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = x / m
        denom = 1 + z**2 / m
        centre = (p + z**2 / (2 * m)) / denom
        half = z * np.sqrt(p * (1 - p) / m + z**2 / (4 * m**2)) / denom
        lo, hi = np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)
    lo, hi = np.where(x == 0, 0.0, lo), np.where(x == m, 1.0, hi)
    lo, hi = np.where(m > 0, lo, np.nan), np.where(m > 0, hi, np.nan)
    if lo.ndim == 0:
        return float(lo), float(hi)
    return lo, hi


def paired_bootstrap_ci(diff: Float[np.ndarray, " question"], *, n_boot: int = N_BOOT, level: float = 0.95,
                        seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the mean of per-question differences, resampling questions.

    NaN differences (questions undefined on either side) are left out before resampling; none left
    gives ``(nan, nan)``.

    >>> paired_bootstrap_ci(np.zeros(10))
    (0.0, 0.0)
    """
    _check_level(level)
    if n_boot < 1:
        raise ReachlensError(f"n_boot={n_boot!r} must be >= 1")
    d = diff[~np.isnan(diff)]
    if len(d) == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(n_boot, len(d)))].mean(axis=1)
    tail = (1 - level) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def paired_permutation_p(diff: Float[np.ndarray, " question"], *, n_perm: int = N_PERM, seed: int = 0) -> float:
    """Two-sided sign-flip p-value of "mean difference = 0" for per-question differences.

    Zero and NaN differences carry no sign and are left out. With ``m`` non-zero differences the
    test is exact when ``2**m <= n_perm`` (every sign pattern enumerated), else a Monte Carlo
    estimate from ``n_perm`` seeded patterns, ``(1 + hits) / (1 + n_perm)``.

    >>> paired_permutation_p(np.array([1.0, 1.0, 1.0]))  # 2 of the 8 sign patterns are as extreme
    0.25
    """
    if n_perm < 1:
        raise ReachlensError(f"n_perm={n_perm!r} must be >= 1")
    d = diff[~np.isnan(diff)]
    d = d[d != 0]
    m = len(d)
    if m == 0:
        return 1.0
    observed = abs(d.sum())
    tol = 1e-12 * max(1.0, float(np.abs(d).sum()))  # sums of the same numbers in another order
    if 2**m <= n_perm:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=m)))
        return float(np.mean(np.abs(signs @ d) >= observed - tol))
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, n_perm, 1000):  # chunks keep memory at 1000 x m
        signs = rng.choice((1.0, -1.0), size=(min(1000, n_perm - start), m))
        hits += int(np.sum(np.abs(signs @ d) >= observed - tol))
    return (1 + hits) / (1 + n_perm)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the input's order; NaN entries are outside the family.

    The i-th smallest of m p-values is multiplied by ``m - i + 1`` (i from 1), capped at 1, and made
    non-decreasing along the sorted order.

    >>> holm([0.01, 0.04, 0.03])
    [0.03, 0.06, 0.06]
    """
    p = np.asarray(pvalues, dtype=float)
    if np.any((p < 0) | (p > 1)):
        raise ReachlensError(f"p-values must lie in [0, 1], got {list(pvalues)!r}")
    out = np.full(len(p), np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    m = len(idx)
    running = 0.0
    for rank, i in enumerate(idx[np.argsort(p[idx], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return [float(x) for x in out]


def unreachability_bound(n_scored, level: float = 0.95):
    """One-sided ``level`` upper bound on the per-sample success rate after 0 of ``n_scored`` correct.

    ``1 - (1 - level) ** (1 / n)``: the largest rate p with ``(1 - p) ** n >= 1 - level``, i.e. the
    rate at which K samples would all miss with probability ``1 - level``. About ``3 / n`` at 95 %.
    With no graded sample nothing is known: the bound is 1. Scalars or arrays.

    >>> round(unreachability_bound(200), 5)
    0.01487
    """
    _check_level(level)
    n = np.asarray(n_scored, dtype=float)
    if np.any(n < 0):
        raise ReachlensError(f"n_scored={n_scored!r} must be >= 0")
    with np.errstate(divide="ignore"):
        out = np.where(n > 0, 1.0 - (1.0 - level) ** (1.0 / np.where(n > 0, n, 1.0)), 1.0)
    return float(out) if out.ndim == 0 else out
