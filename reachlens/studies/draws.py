"""The draw of demonstrations inside the uncertainty of a training-based elicitation cell.

A fine-tune's interval over test questions (:func:`reachlens.stats.paired_bootstrap_ci`) holds one draw of
demonstrations and one training seed fixed; the draw moves the uplift far more (issue 57: three other draws at 8
demonstrations gave +0.200, +0.260 and +0.097 against one draw's +0.157 [+0.113, +0.200]). A cell measured over
several draws (each its own demonstrations and seed, on the same test questions) is summarised by
:func:`between_draws`: the mean uplift over draws, the between-draw sd and a t interval over the draws' means, which
holds both sources (each draw's mean already carries its question-sampling noise). :func:`draws_mde` is the smallest
difference between two such cells (two organisms, or organism and twin) that ``n_draws`` draws each detect with
the given power (two-sided two-sample t test, exact noncentral t). :func:`draws_table` lays a family of cells out
from their elicitation runs (one run a draw): per cell and metric, the model's uplift, the control's and their
difference over draws.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from reachlens.errors import ReachlensError

__all__ = ["DRAW_SIDES", "DrawSummary", "between_draws", "draws_mde", "draws_table"]

DRAW_SIDES = ("uplift_model", "uplift_control", "difference")
"""The columns of an elicitation run's :meth:`~reachlens.studies.elicitation.Elicitation.difference` that a
draws table summarises: the model's uplift, the control's, and model minus control."""


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


def draws_table(cells: Mapping[str, Sequence[Any]], level: float = 0.95) -> pd.DataFrame:
    """Each cell (a name, and its elicitation runs: one a draw of demonstrations and seed, on the same test
    questions) over its draws: a row per cell, number of demonstrations and metric (``D``, ``O_K`` and their
    ``^trace`` forms), with ``n_draws`` and, for each of :data:`DRAW_SIDES`, the mean over draws, the between-draw
    sd, the t interval (:func:`between_draws`) and the draws' values; ``difference_mde``: the smallest difference
    between this cell's and another's mean difference that designs of this many draws detect at this sd
    (:func:`draws_mde`; NaN at sd 0)."""
    rows = []
    for name, runs in cells.items():
        tables = [run.difference().set_index(["n_demos", "metric"]) for run in runs]
        keys = tables[0].index if tables else []
        if any(not t.index.equals(keys) for t in tables):
            raise ReachlensError(f"the runs of cell {name!r} hold other demonstration counts or metrics; a cell's "
                                 "draws differ in their demonstrations and seed alone")
        for n_demos, metric in keys:
            row: dict[str, Any] = {"cell": name, "n_demos": int(n_demos), "metric": metric, "n_draws": len(tables)}
            for side in DRAW_SIDES:
                values = [float(t.loc[(n_demos, metric), side]) for t in tables]
                s = between_draws(values, level)
                row.update({side: s.mean, f"{side}_sd": s.sd, f"{side}_lo": s.lo, f"{side}_hi": s.hi,
                            f"{side}_draws": values})
            sd = row["difference_sd"]
            row["difference_mde"] = draws_mde(sd, len(tables)) if sd > 0 else math.nan
            rows.append(row)
    return pd.DataFrame(rows)
