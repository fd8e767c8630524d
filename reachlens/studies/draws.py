"""The draw of demonstrations inside the uncertainty of a training-based elicitation cell.

A fine-tune's interval over test questions (:func:`reachlens.stats.paired_bootstrap_ci`) holds one draw of
demonstrations and one training seed fixed; the draw moves the uplift far more (issue 57: three other draws at 8
demonstrations gave +0.200, +0.260 and +0.097 against one draw's +0.157 [+0.113, +0.200]). A cell measured over
several draws (each its own demonstrations and seed, on the same test questions) is summarised by
:func:`between_draws`: the mean uplift over draws, the between-draw sd and a t interval over the draws' means, which
holds both sources (each draw's mean already carries its question-sampling noise). :func:`draws_mde` is the smallest
difference between two such cells (two organisms, or organism and twin) that ``n_draws`` draws each detect with
the given power (two-sided two-sample t test, exact noncentral t).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from reachlens.errors import ReachlensError

__all__ = ["DrawSummary", "between_draws", "draws_mde"]


@dataclass(frozen=True)
class DrawSummary:
    """A cell over draws of demonstrations."""

    n_draws: int
    mean: float
    sd: float
    """Between-draw standard deviation (ddof 1)."""
    lo: float
    hi: float
    level: float


def between_draws(uplifts: Sequence[float], level: float = 0.95) -> DrawSummary:
    """Mean, between-draw sd and a t interval over the per-draw uplifts (at least 2 draws).

    >>> s = between_draws([0.157, 0.200, 0.260, 0.097])
    >>> round(s.mean, 3), round(s.sd, 3)
    (0.178, 0.069)
    """
    from scipy.stats import t

    values = [float(u) for u in uplifts]
    if len(values) < 2 or not all(math.isfinite(v) for v in values):
        raise ReachlensError(f"a between-draw summary needs at least 2 finite uplifts, got {values!r}")
    if not 0 < level < 1:
        raise ReachlensError(f"level={level!r} must lie in (0, 1)")
    n, mean = len(values), sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return DrawSummary(n, mean, sd, mean - half, mean + half, level)


def draws_mde(sd: float, n_draws: int, *, power: float = 0.8, alpha: float = 0.05) -> float:
    """The smallest difference in mean uplift between two cells of ``n_draws`` draws each, with between-draw sd
    ``sd``, that a two-sided two-sample t test at ``alpha`` detects with probability ``power``.

    >>> round(draws_mde(0.069, 10), 3)
    0.091
    """
    from scipy.optimize import brentq
    from scipy.stats import nct, t

    if n_draws < 2 or not sd > 0 or not 0 < alpha < 1 or not 0 < power < 1:
        raise ReachlensError(f"draws_mde needs n_draws >= 2, sd > 0 and alpha, power in (0, 1); got n_draws={n_draws}, "
                             f"sd={sd}, alpha={alpha}, power={power}")
    df, crit = 2 * n_draws - 2, t.ppf(1 - alpha / 2, 2 * n_draws - 2)

    def achieved(d: float) -> float:
        nc = d / (sd * math.sqrt(2 / n_draws))
        lower = nct.cdf(-crit, df, nc)  # the far tail: NaN where scipy underflows, 0 to any precision there
        return nct.sf(crit, df, nc) + (lower if math.isfinite(lower) else 0.0) - power

    return float(brentq(achieved, 1e-12, 12 * sd * math.sqrt(2 / n_draws)))  # power ~1 at nc 12
