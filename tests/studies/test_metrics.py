import math

import pytest

from reachlens.errors import ReachlensError
from reachlens.studies.metrics import budget_grid, pass_at_k, pass_at_k_curve


@pytest.mark.parametrize(
    "n,c,k,expected",
    [
        (4, 1, 1, 0.25),          # 1 - C(3,1)/C(4,1) = 1 - 3/4
        (4, 1, 2, 0.5),           # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (5, 2, 2, 0.7),           # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (10, 3, 5, 11 / 12),      # 1 - C(7,5)/C(10,5) = 1 - 21/252
        (6, 0, 3, 0.0),
        (6, 6, 3, 1.0),
        (6, 4, 3, 1.0),           # n - c < k: every draw of 3 holds a correct one
    ],
)
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_is_nan_when_n_below_k():
    assert math.isnan(pass_at_k(3, 1, 4))


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ReachlensError, match="c=5 correct out of n=3"):
        pass_at_k(3, 5, 1)


def test_curve_averages_over_defined_questions():
    curve = pass_at_k_curve([4, 4, 2], [1, 0, 2], [1, 4])
    assert curve.loc[0, "pass_at_k"] == pytest.approx((0.25 + 0 + 1) / 3)
    assert curve.loc[1, "n_questions"] == 2  # the n=2 question is undefined at k=4
    assert curve.loc[1, "pass_at_k"] == pytest.approx((1.0 + 0.0) / 2)


def test_budget_grid():
    assert budget_grid(1) == [1]
    assert budget_grid(64) == [1, 2, 4, 8, 16, 32, 64]
    assert budget_grid(200)[-2:] == [128, 200]


def test_sign_changes_find_every_sign_change_and_refuse_ragged_input():
    from reachlens.studies.metrics import sign_changes

    nan = float("nan")
    assert sign_changes([1, 2, 4, 8, 16], [0.1, 0.2, 0.3, 0.4, 0.5], [0.2, 0.1, nan, 0.5, 0.4]) == [2, 8, 16]
    with pytest.raises(ValueError, match="lengths 2, 1, 2"):
        sign_changes([1, 2], [0.1], [0.1, 0.2])
