"""A view of a question set: its rows under a filter, a text search and a sort, and the paired figures of them.

The page's address holds the view
(``?set=0/comparisons/base--grpo&filter=realized_fate == "gained"&sort=-base_propensity``); :func:`questions_of`
takes the same words in Python and returns the same rows, so a view seen in the browser is a DataFrame one call
away:

>>> questions_of("runs/demo", "0/comparisons/base--grpo",
...              'realized_fate == "gained" and base_reachable')  # doctest: +SKIP

For a comparison, :func:`paired_figures` are the realized and reachable halves of ``reachlens compare``'s summary
(:func:`~reachlens.studies.compare.paired_deltas`) on the rows shown. When a filter or a search chose those rows
after the data was seen, the figures are **post hoc**: a p-value of a subset picked by looking is no test of it,
and the page says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.store.filter_expr import matches
from reachlens.view.source import QuestionSet, question_sets

__all__ = ["View", "paired_figures", "questions_of", "select"]

SEARCH_COLUMNS = ("question_id", "question", "gold", "deployed_answer", "base_answer", "trained_answer")
"""The columns a text search looks in (those a set has)."""


@dataclass(frozen=True)
class View:
    """A view's words, as the address bar holds them."""

    filter: str = ""
    """An expression over the set's columns (:func:`reachlens.store.filter_expr.matches`)."""
    search: str = ""
    """Text every row shown holds in one of :data:`SEARCH_COLUMNS` (case ignored)."""
    sort: str = ""
    """A column to sort by, ``-COLUMN`` descending; empty: the task's order."""

    @property
    def post_hoc(self) -> bool:
        """Whether the rows were chosen by looking (a filter or a search)."""
        return bool(self.filter.strip() or self.search.strip())


def select(table: pd.DataFrame, view: View) -> pd.DataFrame:
    """The rows of ``table`` that ``view`` shows, in its order.

    Raises:
        ReachlensError: the filter does not read (one line naming it), or the sort names no column.
    """
    out = table[matches(table, view.filter)]
    needle = view.search.strip().casefold()
    if needle:
        hit = pd.Series(False, index=out.index)
        for col in SEARCH_COLUMNS:
            if col in out.columns:
                hit |= out[col].astype(str).str.casefold().str.contains(needle, regex=False)
        out = out[hit]
    key = view.sort.strip()
    if key:
        column = key.lstrip("-")
        if column not in out.columns:
            raise ReachlensError(f"sort={key!r} names no column here; the columns are {', '.join(out.columns)}")
        out = out.sort_values(column, ascending=not key.startswith("-"), kind="stable", na_position="last")
    return out


def paired_figures(rows: pd.DataFrame, *, n_boot: int | None = None, seed: int = 0) -> dict[str, Any]:
    """``reachlens compare``'s realized and reachable figures on ``rows`` of a comparison's question list
    (:func:`~reachlens.studies.compare.paired_deltas`, its bootstrap's draws and seed by default)."""
    from reachlens.stats import N_BOOT
    from reachlens.studies.compare import paired_deltas

    return paired_deltas(rows, n_boot=N_BOOT if n_boot is None else n_boot, seed=seed)


def find_set(sets: list[QuestionSet], key: str | None) -> QuestionSet:
    """The set called ``key`` (the first when None)."""
    if not sets:
        raise ReachlensError("no question set to show")
    if key is None:
        return sets[0]
    for s in sets:
        if s.key == key:
            return s
    raise ReachlensError(f"set={key!r} is not here; the sets are {', '.join(s.key for s in sets)}")


def questions_of(dir: str | Path, set: str | None = None, filter: str = "", search: str = "",
                 sort: str = "") -> pd.DataFrame:
    """The question list the viewer shows for ``set`` (its key in the address bar; the first set of ``dir`` when
    None) under ``filter``, ``search`` and ``sort``, as a DataFrame: one row per question.

    >>> questions_of("runs/demo", filter='realized_fate == "gained" and base_reachable')  # doctest: +SKIP
    """
    qs = find_set(question_sets([dir]), set)
    if qs.problem is not None and qs.status == "complete":
        raise ReachlensError(qs.problem)
    return select(qs.table(), View(filter, search, sort)).reset_index(drop=True)
