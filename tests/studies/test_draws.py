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
