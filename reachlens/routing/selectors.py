"""Answer-blind selectors: pick one answer from a question's candidate pool without the gold answer.

A pool is a DataFrame with one row per candidate (route evaluations from a search, or the K
temperature samples of an audit) and at least ``answer``, ``correct`` and ``scored``. A selector
reads only answer-blind columns to choose a row; the row's grade then says whether the selection
is right. Reachability (:func:`reachable`: any candidate correct) is the ceiling a selector is measured against.

Registered selectors (:data:`SELECTORS`):

* ``majority``: the most frequent extracted answer (self-consistency). Ties go to the answer that
  appeared first in the pool.
* ``confidence``: the candidate with the highest mean token log-probability.
* ``lowest_window``: the candidate whose lowest sliding-window mean log-probability is highest
  (DeepConf's "lowest group confidence", on the chosen tokens' log-probabilities).
* ``self_verify``: the candidate the full model finds most likely under a fixed verification prompt
  (column ``verify_logprob``, see :mod:`reachlens.routing.verification`).
* ``search``: the candidate with the highest search objective (the search's own pick; answer-blind
  unless the search ran in oracle mode).

Candidates without an extracted answer are never selected; a pool with no answer at all selects
nothing, which counts as wrong. Score ties go to the earliest candidate. A selection whose candidate
could not be graded (``scored`` False) is undefined (NaN), not wrong.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from reachlens._registry import Registry
from reachlens.errors import ReachlensError

__all__ = ["Selector", "Selection", "SELECTORS", "select", "reachable"]


@dataclass(frozen=True)
class Selector:
    """A named rule that picks one candidate of a pool (its position) or none."""

    name: str
    needs: tuple[str, ...]
    """Columns the rule reads besides ``answer``."""
    pick: Callable[[pd.DataFrame], int | None]


@dataclass(frozen=True)
class Selection:
    """What a selector chose from one pool."""

    position: int | None
    """Row position of the chosen candidate in the pool (None: nothing to choose)."""
    answer: str | None
    correct: float
    """1.0 right, 0.0 wrong (also when nothing was chosen), NaN when the choice was not graded."""


SELECTORS: Registry[Selector] = Registry("selector")


def _answered(pool: pd.DataFrame) -> pd.Series:
    return pool["answer"].notna()


def _majority(pool: pd.DataFrame) -> int | None:
    answers = pool["answer"].tolist()
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, a in enumerate(answers):
        if a is None or (isinstance(a, float) and math.isnan(a)):
            continue
        counts[a] = counts.get(a, 0) + 1
        first.setdefault(a, i)
    if not counts:
        return None
    best = max(counts, key=lambda a: (counts[a], -first[a]))
    return first[best]


def _argmax(column: str) -> Callable[[pd.DataFrame], int | None]:
    def pick(pool: pd.DataFrame) -> int | None:
        values = pd.to_numeric(pool[column], errors="coerce").where(_answered(pool))
        if values.isna().all():
            return None
        return int(values.reset_index(drop=True).idxmax())  # idxmax returns the first maximum

    return pick


for _sel in (
    Selector("majority", (), _majority),
    Selector("confidence", ("mean_logprob",), _argmax("mean_logprob")),
    Selector("lowest_window", ("lowest_window_logprob",), _argmax("lowest_window_logprob")),
    Selector("self_verify", ("verify_logprob",), _argmax("verify_logprob")),
    Selector("search", ("objective",), _argmax("objective")),
):
    SELECTORS.register(_sel.name, _sel)


def _grade(pool: pd.DataFrame, position: int | None) -> float:
    if position is None:
        return 0.0
    row = pool.iloc[position]
    if not bool(row["scored"]):
        return math.nan
    return 1.0 if bool(row["correct"]) else 0.0


def select(pool: pd.DataFrame, name: str) -> Selection:
    """Apply the selector ``name`` to one question's pool.

    >>> pool = pd.DataFrame({"answer": ["3", "4", "4", None], "correct": [True, False, False, False],
    ...                      "scored": [True] * 4, "mean_logprob": [-0.1, -0.5, -0.2, -0.01]})
    >>> select(pool, "majority").answer, select(pool, "confidence").answer
    ('4', '3')
    """
    sel = SELECTORS[name]
    missing = [c for c in ("answer", "correct", "scored", *sel.needs) if c not in pool.columns]
    if missing:
        raise ReachlensError(f"selector {name!r} needs column(s) {missing} that the pool lacks; "
                         f"it has {list(pool.columns)}")
    if len(pool) == 0:
        return Selection(None, None, 0.0)
    pos = sel.pick(pool)
    answer = None if pos is None else pool.iloc[pos]["answer"]
    return Selection(pos, answer, _grade(pool, pos))


def reachable(pool: pd.DataFrame) -> float:
    """1.0 if any candidate is correct, 0.0 if none is and some were graded, NaN if none was graded.

    >>> reachable(pd.DataFrame({"answer": ["3", "4"], "correct": [False, True], "scored": [True, True]}))
    1.0
    """
    if bool((pool["correct"].astype(bool) & pool["scored"].astype(bool)).any()):
        return 1.0
    return 0.0 if bool(pool["scored"].astype(bool).any()) else math.nan
