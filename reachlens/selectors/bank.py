"""The selectors over a candidate bank: per-question selections, accuracies with intervals, the selection gap.

A **bank** is a DataFrame with one row per candidate, holding :data:`~reachlens.records.SELECTOR_COLUMNS`
(``question_id``, ``candidate_idx``: the candidate's index within its question, ``answer``: None where none was
extracted, ``correct``, ``scored``: five of the candidate columns every study writes,
:data:`~reachlens.records.CANDIDATE_COLUMNS`) and the columns its selectors read (:mod:`reachlens.selectors.rules`).
An audit's samples, a routing run's route evaluations and a probe run's candidates are banks.

Per question, a selection's ``correct`` is 1.0 or 0.0, or the mean over the tied answers for a ``majority``
tie (the expected correctness under a uniform tie-break), or NaN when the question has no graded candidate
(undefined, never counted wrong). A question with graded candidates but no extracted answer selects nothing,
which is wrong. ``reachable`` is 1.0 when a graded candidate is correct, 0.0 when none is, NaN when none was
graded: O_K over the questions where it is defined.

The selection gap is ``O_K - S_best``, the best selector's accuracy, over the questions where both are
defined (all of them unless a question had no graded candidate), with a seeded paired bootstrap interval
over questions. The best selector is chosen on the full data; the interval is that of the gap to it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.records import SELECTOR_COLUMNS
from reachlens.selectors.rules import SELECTORS, Pool, Selector
from reachlens.stats import N_BOOT, paired_bootstrap_ci, wilson_interval

__all__ = [
    "SELECTION_COLUMNS", "SelectionGap", "answer_blind", "reachable", "select", "selection_gap",
    "selector_table",
]

SELECTION_COLUMNS = ["question_id", "selected_answer", "correct", "n_candidates", "candidate_idx", "n_tied"]
""":func:`select`'s table: the answer chosen (the first of the tied answers of a ``majority`` tie), its
correctness (an expectation over ``n_tied`` tied choices; 0 choices: nothing selected), the candidates seen
and the index of the one chosen (NA when nothing or a tie was chosen)."""


def _check_bank(bank: pd.DataFrame, selector: Selector | None = None) -> None:
    missing = [c for c in SELECTOR_COLUMNS if c not in bank.columns]
    if missing:
        raise ReachlensError(f"a candidate bank needs the column(s) {missing}; it has {list(bank.columns)}")
    if selector is not None and not any(all(c in bank.columns for c in alt) for alt in selector.needs):
        wanted = " or ".join(repr(list(alt)) for alt in selector.needs)
        raise ReachlensError(f"selector {selector.name!r} needs column(s) {wanted} that the bank lacks; "
                             f"it has {list(bank.columns)}")
    if bank.duplicated(["question_id", "candidate_idx"]).any():
        dup = bank.loc[bank.duplicated(["question_id", "candidate_idx"]), ["question_id", "candidate_idx"]].iloc[0]
        raise ReachlensError(f"candidate {int(dup['candidate_idx'])} of question {dup['question_id']!r} appears twice "
                             "in the bank; give each candidate of a question its own candidate_idx")


def _pools(bank: pd.DataFrame, extra: Sequence[str]) -> Iterator[Pool]:
    """The bank's questions in order of first appearance, each pool in ``candidate_idx`` order."""
    order = {q: i for i, q in enumerate(pd.unique(bank["question_id"]))}
    b = bank.assign(_q=bank["question_id"].map(order)).sort_values(["_q", "candidate_idx"], kind="stable")
    cols = {c: b[c].tolist() for c in ("question_id", "candidate_idx", "answer", "correct", "scored", *extra)}
    starts = np.flatnonzero(np.r_[True, b["_q"].to_numpy()[1:] != b["_q"].to_numpy()[:-1]]).tolist() if len(b) else []
    for lo, hi in zip(starts, [*starts[1:], len(b)]):
        yield Pool(cols["question_id"][lo], [int(i) for i in cols["candidate_idx"][lo:hi]],
                   [None if _na(a) else a for a in cols["answer"][lo:hi]],
                   [bool(x) for x in cols["correct"][lo:hi]], [bool(x) for x in cols["scored"][lo:hi]],
                   {c: cols[c][lo:hi] for c in extra})


def _na(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _selection(pool: Pool, chosen: tuple[int, ...]) -> dict[str, Any]:
    graded = any(pool.scored)
    if not chosen:
        correct = 0.0 if graded else math.nan
    else:
        grades = [(1.0 if pool.correct[i] else 0.0) if pool.scored[i] else math.nan for i in chosen]
        correct = math.nan if not graded else float(np.mean(grades))
    return {"question_id": pool.question_id, "selected_answer": pool.answer[chosen[0]] if chosen else None,
            "correct": correct, "n_candidates": len(pool),
            "candidate_idx": pool.candidate_idx[chosen[0]] if len(chosen) == 1 else pd.NA, "n_tied": len(chosen)}


def select(bank: pd.DataFrame, name: str, **options: Any) -> pd.DataFrame:
    """Apply the selector ``name`` to every question of ``bank``: one row per question
    (:data:`SELECTION_COLUMNS`), in the order the questions first appear.

    >>> bank = pd.DataFrame({"question_id": ["q"] * 4, "candidate_idx": range(4), "answer": ["3", "4", "4", None],
    ...                      "correct": [True, False, False, False], "scored": [True] * 4,
    ...                      "mean_logprob": [-0.1, -0.5, -0.2, -0.01]})
    >>> select(bank, "majority").loc[0, "selected_answer"], select(bank, "logprob").loc[0, "selected_answer"]
    ('4', '3')
    """
    sel = SELECTORS[name]
    unknown = sorted(set(options) - set(sel.options))
    if unknown:
        raise ReachlensError(f"selector {name!r} takes no option(s) {unknown}; its options: {list(sel.options) or 'none'}")
    _check_bank(bank, sel)
    extra = next(alt for alt in sel.needs if all(c in bank.columns for c in alt))
    rows = [_selection(pool, sel.choose(pool, **options)) for pool in _pools(bank, extra)]
    out = pd.DataFrame(rows, columns=SELECTION_COLUMNS)
    out["correct"] = out["correct"].astype(float)
    out["candidate_idx"] = out["candidate_idx"].astype("Int64")
    return out


def reachable(bank: pd.DataFrame) -> pd.Series:
    """Per question (index ``question_id``, first-appearance order): 1.0 when a graded candidate is correct,
    0.0 when none is, NaN when no candidate was graded.

    >>> reachable(pd.DataFrame({"question_id": ["q", "q"], "candidate_idx": [0, 1], "answer": ["3", "4"],
    ...                         "correct": [False, True], "scored": [True, True]})).tolist()
    [1.0]
    """
    _check_bank(bank)
    hit = bank["correct"].astype(bool) & bank["scored"].astype(bool)
    g = pd.DataFrame({"question_id": bank["question_id"], "hit": hit, "graded": bank["scored"].astype(bool)})
    agg = g.groupby("question_id", sort=False).agg(hit=("hit", "any"), graded=("graded", "any"))
    return agg["hit"].astype(float).where(agg["graded"]).rename("reachable")


def answer_blind(bank: pd.DataFrame) -> tuple[str, ...]:
    """The answer-blind selectors whose columns ``bank`` holds (``search`` is never one)."""
    return tuple(n for n in SELECTORS if SELECTORS[n].answer_blind
                 and any(all(c in bank.columns for c in alt) for alt in SELECTORS[n].needs))


def selector_table(bank: pd.DataFrame, names: Sequence[str] | None = None, *, level: float = 0.95,
                   options: Mapping[str, Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """Per selector: ``n`` (questions where it is defined), ``accuracy``, its Wilson interval
    (``ci_low``, ``ci_high``; a tie's expected correctness counts as a fractional success), and the
    ``reachable`` ceiling O_K as the last row (selector ``O_K``).

    Args:
        names: selectors to apply (the answer-blind ones the bank supports when None).
        options: per selector name, the options it runs with (``{"majority": {"seed": 0}}``).
    """
    names = answer_blind(bank) if names is None else tuple(names)
    rows = []
    for name in names:
        rows.append(_accuracy_row(name, select(bank, name, **dict((options or {}).get(name, {})))["correct"], level))
    rows.append(_accuracy_row("O_K", reachable(bank), level))
    return pd.DataFrame(rows, columns=["selector", "n", "accuracy", "ci_low", "ci_high"])


def _accuracy_row(name: str, correct: pd.Series, level: float) -> dict[str, Any]:
    c = correct.dropna().astype(float)
    lo, hi = wilson_interval(float(c.sum()), len(c), level)
    return {"selector": name, "n": len(c), "accuracy": float(c.mean()) if len(c) else math.nan, "ci_low": lo, "ci_high": hi}


@dataclass(frozen=True)
class SelectionGap:
    """``O_K - S_best`` over the questions where both are defined, with its paired bootstrap interval."""

    O_K: float
    selector: str | None
    """The best selector (the highest accuracy of ``best_of``; the first listed on a tie)."""
    accuracy: float
    """The best selector's accuracy."""
    gap: float
    gap_ci: tuple[float, float]
    n: int
    best_of: tuple[str, ...]
    """The selectors the best was chosen from."""

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["gap_ci"], d["best_of"] = list(self.gap_ci), list(self.best_of)
        return d


def selection_gap(bank: pd.DataFrame, best_of: Sequence[str] | None = None, *, level: float = 0.95,
                  n_boot: int = N_BOOT, seed: int = 0,
                  options: Mapping[str, Mapping[str, Any]] | None = None) -> SelectionGap:
    """The selection gap of ``bank``: O_K minus the best of the selectors ``best_of`` (the answer-blind ones
    the bank supports when None), with a percentile interval from ``n_boot`` paired resamples of the
    questions (``seed``).

    >>> bank = pd.DataFrame({"question_id": ["a", "a", "a", "b", "b"], "candidate_idx": [0, 1, 2, 0, 1],
    ...                      "answer": ["1", "2", "2", "5", "5"], "correct": [True, False, False, True, True],
    ...                      "scored": [True] * 5})
    >>> g = selection_gap(bank, ["majority"])
    >>> g.O_K, g.accuracy, g.gap
    (1.0, 0.5, 0.5)
    """
    best_of = answer_blind(bank) if best_of is None else tuple(best_of)
    if not best_of:
        raise ReachlensError("selection_gap needs at least one selector in best_of, e.g. ['majority']")
    reach = reachable(bank)
    per = {n: select(bank, n, **dict((options or {}).get(n, {}))).set_index("question_id")["correct"] for n in best_of}
    defined = reach.notna()
    for s in per.values():
        defined &= s.reindex(reach.index).notna()
    o = reach[defined].to_numpy(dtype=float)
    acc = {n: float(per[n].reindex(reach.index)[defined].mean()) if defined.any() else math.nan for n in best_of}
    best = max(best_of, key=lambda n: (-math.inf if math.isnan(acc[n]) else acc[n], -best_of.index(n)))
    s = per[best].reindex(reach.index)[defined].to_numpy(dtype=float)
    o_k = float(o.mean()) if len(o) else math.nan
    ci = paired_bootstrap_ci(o - s, n_boot=n_boot, level=level, seed=seed)
    return SelectionGap(o_k, best if len(o) else None, acc[best], o_k - acc[best], ci, len(o), best_of)
