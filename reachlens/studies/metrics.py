"""Estimators shared by the studies: unbiased pass@k, its curve and its sign changes.

The tests and intervals on differences live in :mod:`reachlens.stats`.

pass@k for one question with n graded samples of which c are correct is the probability that k
samples drawn without replacement from those n contain a correct one:
``1 - C(n - c, k) / C(n, k)`` (Chen et al., 2021). It is undefined (NaN) when n < k, as in
inspect_ai's ``pass_at``. Computed as ``1 - prod_{i=n-c+1}^{n} (1 - k / i)``, which is exact in
floating point for the n of any audit (no huge binomials).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from reachlens.errors import ReachlensError

__all__ = ["pass_at_k", "pass_at_k_matrix", "pass_at_k_curve", "budget_grid", "sign_changes"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one question.

    >>> pass_at_k(4, 1, 2)
    0.5
    >>> pass_at_k(2, 1, 4)
    nan
    """
    if k < 1:
        raise ReachlensError(f"k={k!r} must be >= 1")
    if not 0 <= c <= n:
        raise ReachlensError(f"c={c!r} correct out of n={n!r} samples is impossible")
    if n < k:
        return math.nan
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def budget_grid(k_max: int) -> list[int]:
    """1, 2, 4, ... up to ``k_max``, with ``k_max`` itself included.

    >>> budget_grid(200)
    [1, 2, 4, 8, 16, 32, 64, 128, 200]
    """
    ks, k = [], 1
    while k < k_max:
        ks.append(k)
        k *= 2
    ks.append(k_max)
    return ks


def pass_at_k_matrix(n: Iterable[int], c: Iterable[int], ks: Sequence[int]) -> np.ndarray:
    """Per-question pass@k: one row per question, one column per k (NaN where a question has n < k).

    >>> pass_at_k_matrix([4, 2], [1, 2], [1, 4]).tolist()
    [[0.25, 1.0], [1.0, nan]]
    """
    return np.array([[pass_at_k(int(ni), int(ci), int(k)) for k in ks] for ni, ci in zip(n, c)],
                    dtype=float).reshape(-1, len(ks))


def pass_at_k_curve(n: Iterable[int], c: Iterable[int], ks: Sequence[int]) -> pd.DataFrame:
    """Mean pass@k over questions for each k: columns ``k, pass_at_k, n_questions``.

    Questions with fewer than k graded samples are undefined at that k and left out of the mean;
    ``n_questions`` counts those that entered it.
    """
    m = pass_at_k_matrix(n, c, ks)
    defined = ~np.isnan(m)
    rows = []
    for j, k in enumerate(ks):
        rows.append({"k": int(k), "pass_at_k": float(m[defined[:, j], j].mean()) if defined[:, j].any() else math.nan,
                     "n_questions": int(defined[:, j].sum())})
    return pd.DataFrame(rows)


def sign_changes(ks: Sequence[int], a: Sequence[float], b: Sequence[float], tol: float = 1e-9) -> list[int]:
    """The ks at which the sign of ``b - a`` flips: each is the first k of the new sign.

    Points where the curves are equal (within ``tol``) or undefined carry no sign and are passed over,
    so a touch without a crossing is not one. The pass@k crossover of a base ``a`` and a trained ``b``
    model is the budget from which the base reaches more questions than the trained model.

    >>> sign_changes([1, 2, 4, 8], [0.3, 0.5, 0.7, 0.9], [0.4, 0.55, 0.7, 0.85])
    [8]
    >>> sign_changes([1, 2], [0.3, 0.5], [0.3, 0.5])
    []
    """
    if not len(ks) == len(a) == len(b):
        raise ValueError(f"ks, a and b must have one value per k; got lengths {len(ks)}, {len(a)}, {len(b)}")
    out, last = [], 0
    for k, x, y in zip(ks, a, b):
        d = y - x
        if math.isnan(d) or abs(d) <= tol:
            continue
        sign = 1 if d > 0 else -1
        if last and sign != last:
            out.append(int(k))
        last = sign
    return out
