"""The between-draw summary and MDE of an elicitation cell. References: scipy's t interval on the same values and
statsmodels' two-sample t-test power solver (a standardized effect times the sd)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.power import TTestIndPower

from reachlens.errors import ReachlensError
from reachlens.studies.draws import between_draws, draws_mde


def test_between_draws_is_the_t_interval_over_draw_means():
    values = [0.157, 0.200, 0.260, 0.097, 0.181, 0.140]
    s = between_draws(values)
    lo, hi = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
    assert (s.mean, s.sd) == pytest.approx((np.mean(values), np.std(values, ddof=1)))
    assert (s.lo, s.hi) == pytest.approx((lo, hi))
    with pytest.raises(ReachlensError, match="at least 2"):
        between_draws([0.1])


@pytest.mark.parametrize("n, sd", [(10, 0.069), (3, 0.05), (25, 0.1)])
def test_draws_mde_matches_statsmodels(n, sd):
    effect = TTestIndPower().solve_power(nobs1=n, alpha=0.05, power=0.8, ratio=1.0, alternative="two-sided")
    assert draws_mde(sd, n) == pytest.approx(effect * sd, rel=1e-4)


class _Run:
    """Stands in for an elicitation run: its difference table, one row per (demonstrations, metric)."""

    def __init__(self, d_model, d_control, n_demos=8):
        import pandas as pd

        self.table = pd.DataFrame({"n_demos": [n_demos, n_demos], "metric": ["D", "O_K"],
                                   "uplift_model": [d_model, 2 * d_model], "uplift_control": [d_control, 0.0],
                                   "difference": [d_model - d_control, 2 * d_model]})

    def difference(self):
        return self.table


def test_draws_table_summarises_each_cell_over_its_runs_with_scipy_s_interval():
    from reachlens.studies.draws import draws_table

    gold = [(0.18, 0.00), (0.30, 0.02), (0.24, 0.01), (0.01, 0.03), (-0.01, 0.0)]
    flat = [(0.0, 0.0)] * 3
    t = draws_table({"gold": [_Run(*g) for g in gold], "wrong": [_Run(*g) for g in flat]})
    row = t[(t.cell == "gold") & (t.metric == "D")].iloc[0]
    diffs = [m - c for m, c in gold]
    lo, hi = stats.t.interval(0.95, len(diffs) - 1, loc=np.mean(diffs), scale=stats.sem(diffs))
    assert row.n_draws == 5 and row.n_demos == 8 and row.difference_draws == pytest.approx(diffs)
    assert (row.difference, row.difference_sd) == pytest.approx((np.mean(diffs), np.std(diffs, ddof=1)))
    assert (row.difference_lo, row.difference_hi) == pytest.approx((lo, hi))
    assert row.uplift_control == pytest.approx(np.mean([c for _, c in gold]))
    effect = TTestIndPower().solve_power(nobs1=5, alpha=0.05, power=0.8, ratio=1.0, alternative="two-sided")
    assert row.difference_mde == pytest.approx(effect * np.std(diffs, ddof=1), rel=1e-4)
    o_k = t[(t.cell == "gold") & (t.metric == "O_K")].iloc[0]
    assert o_k.uplift_model == pytest.approx(2 * np.mean([m for m, _ in gold]))
    zero = t[(t.cell == "wrong") & (t.metric == "D")].iloc[0]  # every draw 0: no spread, no MDE
    assert (zero.difference, zero.difference_sd, zero.difference_lo, zero.difference_hi) == (0, 0, 0, 0)
    assert np.isnan(zero.difference_mde)
    with pytest.raises(ReachlensError, match="other demonstration counts"):
        draws_table({"mixed": [_Run(0.1, 0.0), _Run(0.2, 0.0, n_demos=16)]})
