"""The power of the paired tests reachlens runs: the smallest effect a comparison could have detected.

A delta whose interval holds 0 is a *null*, and a null says something only when the comparison could have
detected the effects a reader cares about (Miller 2024, "Adding error bars to evals", arXiv 2411.00640: report
paired differences with their standard errors, and plan the number of questions by a power calculation). For
each of the two kinds of paired outcome a comparison tests, this module gives the power of the test at a given
effect, the *minimum detectable effect* (MDE: the smallest effect with that power) at a given n, and the n a
given effect needs. Every MDE is a size: the tests are two-sided, so a change of that size either way.

**Paired binary outcomes** (the deployment's correctness d_i, reachability o_i(K), a majority vote of 0 or 1),
tested by the exact McNemar test (:func:`reachlens.stats.mcnemar_exact_p`). A question goes 0 -> 1 with
probability ``p01`` and 1 -> 0 with ``p10``; the effect is ``delta = p01 - p10`` (the change in the rate) and the
*discordance* ``psi = p01 + p10`` (the share of questions whose outcome changes, ``(gained + lost) / n`` measured).

* Normal approximation (Connor 1987, Biometrics 43: 207-211): the number of discordant questions is about
  ``n psi``, the statistic ``(b - c) / sqrt(b + c)`` has null variance ``psi`` and alternative variance
  ``psi - delta^2`` per question, so ``power = Phi((|delta| sqrt(n) - z_{1-alpha/2} sqrt(psi)) / sqrt(psi -
  delta^2))`` and ``n = (z_{1-alpha/2} sqrt(psi) + z_{power} sqrt(psi - delta^2))^2 / delta^2``. Solving the
  latter for delta gives the MDE in closed form, ``sqrt(psi) (sqrt(n) z_a + z_b sqrt(n - z_a^2 + z_b^2)) / (n +
  z_b^2)``. Good when the expected number of discordant questions is large (hundreds).
* Exact: the number of discordant questions ``m ~ Binomial(n, psi)``; given m, those going 0 -> 1 ``b ~
  Binomial(m, p01 / psi)``; the exact test rejects when ``min(b, m - b) <= c_m``, ``c_m`` the largest c with
  ``2 P(X <= c) <= alpha`` for ``X ~ Binomial(m, 1/2)``. The power is that rejection probability summed over m
  (the m within 10 standard deviations of ``n psi``, and for each the b within 10 of theirs; what lies outside
  weighs under 1e-20): time and memory grow with ``n psi``, never with n. It is the power of the test reachlens
  runs, at any count: below 6 discordant questions the test cannot reject at 5 %. ``method="auto"`` computes it
  exactly when ``n psi`` is below :data:`EXACT_BELOW` (5,000: a few seconds an MDE at worst), else by Connor,
  whose MDE is within 0.5 % of the exact one there (at 80 %: its exact power is 0.796; at 300 expected
  discordant questions Connor's is 1.8 % small, exact power 0.785).

Assumptions: questions are independent draws from the population the test split samples; the discordance is
held at the value given whatever delta is (a planning value: a comparison's measured one, or an assumed one).
A change larger than psi cannot happen at that discordance: it moves at least ``|delta|`` of the questions, so
it is computed at discordance ``|delta|`` (every changed question moving one way: the fewest changes that make
it, the most favourable case). So a comparison in which few questions changed still has an MDE, the smallest
one-way change its n detects (about 8 questions' worth at 80 %: ``P(m >= 6) = 0.8`` for ``m ~ Poisson(7.9)``).

**Paired continuous outcomes** (per-question pass@k, a majority vote with fractional ties): the mean of n
per-question differences whose standard deviation is ``sd``, tested two-sided by a z test: ``power =
Phi(|delta| sqrt(n) / sd - z_{1-alpha/2}) + Phi(-|delta| sqrt(n) / sd - z_{1-alpha/2})`` (both tails, as
statsmodels' ``NormalIndPower`` with ``ratio=0``), solved for delta or n by bisection; without the far tail
``n = ((z_{1-alpha/2} + z_{power}) sd / delta)^2``. reachlens tests these means by a sign-flip permutation test
and a bootstrap interval, both asymptotically this z test; for n below about 30 it is optimistic (the t test
needs about 2 questions more). ``sd`` is held at its given value whatever delta is.

Every function is pure and deterministic; a bad argument is a :class:`~reachlens.errors.ReachlensError`.
One module, past 400 lines: power, MDE and n of both tests are one concept, read together by `plan`, `compare`
and the report, and the exact sum and its bisection serve all three.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np
from jaxtyping import Float

from reachlens.errors import ReachlensError

__all__ = [
    "ALPHA",
    "EXACT_BELOW",
    "POWER",
    "detectable",
    "mcnemar_critical",
    "mcnemar_mde",
    "mcnemar_power",
    "mcnemar_sample_size",
    "mde_verdict",
    "paired_mde",
    "paired_power",
    "paired_sample_size",
]

ALPHA = 0.05
"""The two-sided level every reported MDE assumes."""
POWER = 0.8
"""The power every reported MDE assumes."""
EXACT_BELOW = 5000
"""Expected discordant questions (``n * psi``) below which ``method="auto"`` computes McNemar's power exactly (past
it Connor's MDE is within 0.5 % of the exact one)."""

_N = NormalDist()
_METHODS = ("auto", "exact", "normal")


def _check(alpha: float, power: float | None = None) -> None:
    if not 0 < alpha < 1:
        raise ReachlensError(f"alpha={alpha!r} must lie in (0, 1)")
    if 1 - alpha / 2 == 1:  # the normal quantile of 1 - alpha/2 is infinite in floating point
        raise ReachlensError(f"alpha={alpha!r} is too small to compute with (1 - alpha/2 rounds to 1); use >= 1e-15")
    if power is not None and not alpha / 2 < power < 1:
        raise ReachlensError(f"power={power!r} must lie in ({alpha / 2:g}, 1), e.g. 0.8")


def _check_binary(n: int, psi: float, method: str) -> None:
    if n < 0:
        raise ReachlensError(f"n={n!r} must be >= 0 questions")
    if not 0 <= psi <= 1:
        raise ReachlensError(f"discordance={psi!r} must lie in [0, 1] (the share of questions whose outcome changes)")
    if method not in _METHODS:
        raise ReachlensError(f"method={method!r} is not one of {', '.join(_METHODS)}")


def _exact(n: int, psi: float, method: str) -> bool:
    return bool(method == "exact" or (method == "auto" and n * psi < EXACT_BELOW))


_LF = np.zeros(1)
"""log(i!) for i up to its length - 1, grown on demand (shared: every exact sum reads it)."""
_LF_MAX = 1 << 27
"""The largest count a log-factorial table is grown to (1 GiB); the exact sums need counts near ``n psi`` only."""


def _log_factorials(n: int) -> np.ndarray:
    """log(i!) for i = 0..n at least (a shared table, grown geometrically; never a copy per call)."""
    global _LF
    if n >= len(_LF):
        if n > _LF_MAX:
            raise ReachlensError(f"{n:,} discordant questions are beyond an exact sum; use method='normal'")
        size = min(_LF_MAX, max(n, 2 * len(_LF))) + 1
        _LF = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, size, dtype=float)))])
    return _LF


def mcnemar_critical(m: int, alpha: float = ALPHA) -> int:
    """The largest c with ``mcnemar_exact_p(c, m - c) <= alpha``: with m discordant questions the exact test
    rejects when the smaller of its two counts is at most this (-1: it cannot reject at this m).

    >>> mcnemar_critical(5), mcnemar_critical(6), mcnemar_critical(20)
    (-1, 0, 5)
    """
    _check(alpha)
    return _critical(int(m), alpha)


@functools.lru_cache(maxsize=8192)
def _critical(m: int, alpha: float) -> int:
    """``c_m`` (:func:`mcnemar_critical`), from float sums of the Binomial(m, 1/2) pmf in log space."""
    if m < 1:
        return -1
    lf = _log_factorials(m)
    b = np.arange(m // 2 + 1)
    cdf = np.cumsum(np.exp(lf[m] - lf[b] - lf[m - b] - m * math.log(2.0)))
    return int(np.sum(2 * cdf <= alpha * (1 + 1e-12))) - 1


def _log_pmf(lf: np.ndarray, m: np.ndarray, b: np.ndarray, p: float) -> np.ndarray:
    """log Binomial(m, p) pmf at b (broadcast), -inf where b > m or the probability is 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = np.where(b > 0, b * math.log(p), 0.0) if p > 0 else np.where(b > 0, -np.inf, 0.0)
        logq = np.where(m - b > 0, (m - b) * math.log1p(-p), 0.0) if p < 1 else np.where(m - b > 0, -np.inf, 0.0)
        out = lf[m] - lf[np.clip(b, 0, None)] - lf[np.clip(m - b, 0, None)] + logp + logq
    return np.where((b >= 0) & (b <= m), out, -np.inf)


def _discordant_weights(n: int, psi: float, lo: int, hi: int, lf: np.ndarray) -> np.ndarray:
    """P(m discordant questions) for m = lo..hi, m ~ Binomial(n, psi): ``m log(n psi) + sum_{i<m} log1p(-i/n)
    - log m! + (n - m) log1p(-psi)``, each term of the size of ``n psi`` (no lgamma of n: at n = 10^12 its
    rounding alone moves a probability by 3e-3; no table of n entries)."""
    m = np.arange(lo, hi + 1)
    falling = np.concatenate([[0.0], np.cumsum(np.log1p(-np.arange(hi, dtype=float) / n))])
    with np.errstate(divide="ignore", invalid="ignore"):
        rest = (n - m) * math.log1p(-psi) if psi < 1 else np.where(m < n, -np.inf, 0.0)
        return np.exp(m * math.log(n * psi) + falling[m] - lf[m] + rest)


def _exact_power(n: int, psi: float, delta: float, alpha: float) -> float:
    """The exact McNemar test's power (module docstring), summed over the likely numbers m of discordant questions
    (within 10 standard deviations of ``n psi``; what lies outside weighs under 1e-20): for each m, one less the
    chance that the count going 0 -> 1 falls in the test's acceptance region ``(c_m, m - c_m)`` (summed where it
    meets 10 standard deviations of that count). Time and memory grow with ``n psi``, not n."""
    if n == 0 or psi == 0:
        return 0.0
    sd = math.sqrt(n * psi * (1 - psi))
    lo, hi = max(0, math.floor(n * psi - 10 * sd) - 1), min(n, math.ceil(n * psi + 10 * sd) + 1)
    lf = _log_factorials(hi)
    pi = min(1.0, (psi + abs(delta)) / (2 * psi))
    weights = _discordant_weights(n, psi, lo, hi, lf)
    total = 0.0
    for start in range(lo, hi + 1, 32):  # rows of m, columns of b: the acceptance region near m pi
        m = np.arange(start, min(hi, start + 31) + 1)
        weight = weights[start - lo: start - lo + len(m)]
        c = np.array([_critical(int(x), alpha) for x in m])
        width = 10 * math.sqrt(m[-1] * pi * (1 - pi)) + 2
        b0 = max(int(c.min()) + 1, math.floor(m[0] * pi - width))
        b1 = min(int((m - c).max()) - 1, math.ceil(m[-1] * pi + width))
        accept = np.zeros(len(m))
        if b1 >= b0:
            mm, b = m[:, None], np.arange(b0, b1 + 1)[None, :]
            inside = (b > c[:, None]) & (b < (m - c)[:, None])
            accept = np.sum(np.exp(_log_pmf(lf, mm, b, pi)) * inside, axis=1)
        total += float(np.sum(weight * (1.0 - accept)))
    return min(1.0, max(0.0, total))


def _binary_power(n: int, psi: float, delta: float, alpha: float, method: str) -> float:
    """The power at ``delta``, at discordance ``max(psi, |delta|)`` (module docstring)."""
    psi = max(psi, abs(delta))
    if n == 0 or psi == 0:
        return 0.0
    if _exact(n, psi, method):
        return _exact_power(n, psi, delta, alpha)
    z = _N.inv_cdf(1 - alpha / 2)
    var = psi - delta**2
    num = abs(delta) * math.sqrt(n) - z * math.sqrt(psi)
    return float(_N.cdf(num / math.sqrt(var))) if var > 0 else float(num > 0)


def mcnemar_power(n: int, discordance: float, delta: float, *, alpha: float = ALPHA, method: str = "auto") -> float:
    """The power of the two-sided exact McNemar test of n paired binary outcomes at an effect ``delta``.

    ``discordance`` is psi (the share of questions whose outcome changes), ``delta`` the change in the rate; a
    ``|delta|`` above psi is computed at discordance ``|delta|`` (every change one way). ``method``:
    ``"exact"``, ``"normal"`` (Connor 1987) or ``"auto"`` (exact below :data:`EXACT_BELOW` expected discordant
    questions); the module docstring gives both formulas and their assumptions. No change at all (psi and
    delta 0): the test never rejects, power 0.

    >>> round(mcnemar_power(300, 0.2, 0.08, method="normal"), 3)
    0.876
    >>> mcnemar_power(100, 0.03, 0.03)  # about 3 discordant questions: under 6, the test rejects rarely
    0.08...
    """
    _check(alpha)
    _check_binary(n, discordance, method)
    if not abs(delta) <= 1:
        raise ReachlensError(f"delta={delta!r} must lie in [-1, 1] (a change of a rate)")
    return _binary_power(n, discordance, delta, alpha, method)


def _bisect(ok, lo: float, hi: float) -> float:
    """The smallest x in (lo, hi] with ``ok(x)``, for ``ok`` false up to a point and true after (to 1e-7 of it)."""
    for _ in range(200):
        if hi - lo <= 1e-7 * hi:
            break
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def mcnemar_mde(n: int, discordance: float, *, power: float = POWER, alpha: float = ALPHA,
                method: str = "auto") -> float:
    """The smallest change in a paired binary rate the exact McNemar test detects with ``power`` at n questions
    of this ``discordance`` (its size: either direction).

    Up to psi: Connor's closed form (normal; module docstring) or bisection on the exact power, which rises with
    delta. When even a change of psi falls short (few questions change), the smallest one-way change beyond psi
    that reaches the power (bisection at discordance delta). NaN when no change reaches it (n below 6).

    >>> round(mcnemar_mde(300, 0.2, method="normal"), 4)
    0.0721
    >>> round(mcnemar_mde(300, 0.01), 3)  # 3 questions changed: beyond them, a one-way change of ~8 questions
    0.026
    >>> mcnemar_mde(5, 0.4)
    nan
    """
    _check(alpha, power)
    _check_binary(n, discordance, method)

    def enough(delta: float) -> bool:
        return _binary_power(n, discordance, delta, alpha, method) >= power

    if n == 0 or not enough(1.0):
        return math.nan
    if discordance > 0 and not _exact(n, discordance, method):
        za, zb = _N.inv_cdf(1 - alpha / 2), _N.inv_cdf(power)
        if n - za**2 + zb**2 >= 0:
            d = math.sqrt(discordance) * (math.sqrt(n) * za + zb * math.sqrt(n - za**2 + zb**2)) / (n + zb**2)
            if d <= discordance:
                return d
    if discordance > 0 and enough(discordance):
        return _bisect(enough, 0.0, discordance)
    return _bisect(enough, discordance, 1.0)


def mcnemar_sample_size(delta: float, discordance: float, *, power: float = POWER, alpha: float = ALPHA,
                        method: str = "auto") -> int:
    """The questions the exact McNemar test needs to detect a change ``delta`` with ``power`` at this discordance
    (at discordance ``|delta|`` when that is larger: every change one way).

    Normal: Connor's n, rounded up. Exact (``"auto"``: when Connor's n promises fewer than :data:`EXACT_BELOW`
    discordant questions): the exact power rises with n in a saw-tooth, so the answer is the first n at which it
    reaches ``power`` found by bisection from Connor's n, then moved down while the power holds; a slightly larger
    n may fall short by a point or two of power.

    >>> mcnemar_sample_size(0.1, 0.2, power=0.9, method="normal")  # (1.96 sqrt(.2) + 1.28 sqrt(.19))^2 / .01
    206
    """
    _check(alpha, power)
    _check_binary(1, discordance, method)
    if not 0 < abs(delta) <= 1:
        raise ReachlensError(f"delta={delta!r} must be non-zero and in [-1, 1] (a change of a rate)")
    psi = max(discordance, abs(delta))
    za, zb = _N.inv_cdf(1 - alpha / 2), _N.inv_cdf(power)
    normal = (za * math.sqrt(psi) + zb * math.sqrt(psi - delta**2)) ** 2 / delta**2
    n = max(1, math.ceil(normal - 1e-9))
    if not _exact(n, psi, method):
        return n

    def enough(k: int) -> bool:
        return _exact_power(k, psi, delta, alpha) >= power

    lo, hi = max(1, n // 2), n
    while not enough(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    while hi > 1 and enough(hi - 1):
        hi -= 1
    return hi


def _z_power(x: float, za: float) -> float:
    """Two-sided z test power at standardized effect x = |delta| sqrt(n) / sd."""
    return _N.cdf(x - za) + _N.cdf(-x - za)


def _solve_x(power: float, alpha: float) -> float:
    """The standardized effect x at which the two-sided z test has ``power`` (bisection; both tails)."""
    za = _N.inv_cdf(1 - alpha / 2)
    lo, hi = 0.0, za + _N.inv_cdf(power) + 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _z_power(mid, za) >= power else (mid, hi)
    return hi


def _check_sd(sd: float) -> None:
    if not sd >= 0:
        raise ReachlensError(f"sd={sd!r} must be >= 0 (the standard deviation of the per-question differences)")


def paired_power(n: int, sd: float, delta: float, *, alpha: float = ALPHA) -> float:
    """The power of the two-sided z test of a mean of n per-question differences of standard deviation ``sd`` at
    a true mean ``delta`` (module docstring: formula, assumptions). NaN when sd is 0 or n is 0.

    >>> round(paired_power(300, 0.3, 0.05), 3)
    0.823
    """
    _check(alpha)
    _check_sd(sd)
    if n <= 0 or sd == 0:
        return math.nan
    return _z_power(abs(delta) * math.sqrt(n) / sd, _N.inv_cdf(1 - alpha / 2))


def paired_mde(n: int, sd: float, *, power: float = POWER, alpha: float = ALPHA) -> float:
    """The smallest mean per-question difference the two-sided z test detects with ``power`` from n questions
    whose differences have standard deviation ``sd``: ``x sd / sqrt(n)``, x solving the power equation (about
    ``z_{1-alpha/2} + z_{power}``, 2.80 at 80 % and 5 %). NaN when sd or n is 0 (nothing varies: no
    standard error to test against).

    >>> round(paired_mde(300, 0.3), 4)
    0.0485
    """
    _check(alpha, power)
    _check_sd(sd)
    if n <= 0 or sd == 0:
        return math.nan
    return _solve_x(power, alpha) * sd / math.sqrt(n)


def paired_sample_size(delta: float, sd: float, *, power: float = POWER, alpha: float = ALPHA) -> int:
    """The questions a mean per-question difference ``delta`` needs to be detected with ``power`` when the
    differences have standard deviation ``sd``: ``(x sd / delta)^2`` rounded up (x as in :func:`paired_mde`).

    >>> paired_sample_size(0.05, 0.3)
    283
    """
    _check(alpha, power)
    _check_sd(sd)
    if delta == 0:
        raise ReachlensError("delta=0 is never detected; give the smallest change worth detecting, e.g. 0.03")
    if sd == 0:
        return 1
    return max(1, math.ceil((_solve_x(power, alpha) * sd / abs(delta)) ** 2 - 1e-9))


def detectable(diff: Float[np.ndarray, " question"], *, binary: bool = True, power: float = POWER, alpha: float = ALPHA) -> float:
    """The minimum detectable effect of a paired test of per-question differences ``diff`` (NaN: undefined
    on either side, left out), at ``power`` and two-sided ``alpha`` (this module).

    ``binary``: differences of 0/1 outcomes, tested by the exact McNemar test: its MDE at this n and the
    measured discordance (the share of non-zero differences; when few changed, the smallest one-way change its n
    detects). Else a mean of continuous differences (pass@k, a majority with fractional ties) tested by the
    sign-flip test: the z test's MDE from the standard deviation of the differences (NaN when they do not vary).

    >>> round(detectable(np.array([1.0] * 30 + [-1.0] * 36 + [0.0] * 234)), 3)  # 66 of 300 changed
    0.078
    """
    d = np.asarray(diff, dtype=float)
    d = d[~np.isnan(d)]
    if binary:
        return mcnemar_mde(len(d), float(np.mean(d != 0)) if len(d) else 0.0, power=power, alpha=alpha)
    return paired_mde(len(d), float(np.std(d, ddof=1)) if len(d) > 1 else 0.0, power=power, alpha=alpha)


def mde_verdict(ci: Sequence[float | None], mde: float | None, p: float | None = None, alpha: float = ALPHA) -> str:
    """How a delta reads beside the effect its comparison could detect.

    An interval that holds 0 is a null: ``"not detected; detectable at this n: >= X"`` (X the MDE), or
    ``"...: undefined"`` when the MDE is (a spread of 0, too few questions). An interval that excludes 0:
    ``"detected (MDE at this n: X)"``; a delta below the MDE can be detected too, by less than the stated power.
    With ``p``, the p-value printed beside the delta (Holm-adjusted where the table adjusts), the verdict agrees
    with that test too: an interval that excludes 0 beside ``p >= alpha`` is not detected (``"not detected at
    p = 0.094; ..."``).

    >>> mde_verdict([-0.02, 0.05], 0.081)
    'not detected; detectable at this n: >= 0.081'
    >>> mde_verdict([0.01, 0.05], 0.03)
    'detected (MDE at this n: 0.030)'
    >>> mde_verdict([0.01, 0.4], 0.5, p=0.094)
    'not detected at p = 0.094; detectable at this n: >= 0.500'
    """
    lo, hi = (float(x) if x is not None else math.nan for x in ci)
    none = mde is None or math.isnan(mde)
    if math.isnan(lo) or math.isnan(hi):
        return "undefined"
    tested = p is None or math.isnan(float(p)) or float(p) < alpha
    if (lo > 0 or hi < 0) and tested:
        return f"detected (MDE at this n: {'undefined' if none else f'{mde:.3f}'})"
    if lo > 0 or hi < 0:
        return f"not detected at p = {float(p):.3g}; detectable at this n: {'undefined' if none else f'>= {mde:.3f}'}"
    return f"not detected; detectable at this n: {'undefined' if none else f'>= {mde:.3f}'}"
