"""The candidate bank of a probe run, and reachability under any probe, arm or named union of probes.

One row per candidate (:data:`~reachlens.records.BANK_COLUMNS`: the candidate columns of every study, then the
bank's own): the greedy deployment (probe ``greedy``, arm ``greedy``) and every candidate of every probe, with its
raw text (kept for re-grading), extracted answer, grade, why decoding stopped, the tokens it generated
(``n_tokens``, the compute charged), their mean log-probability, which probe and arm made it and whether an
activation probe did (``intervention``).

* realized: the greedy row is correct (``D`` its mean), as in every study;
* reachable under a *source* (a probe, an arm, or a union): any of its candidates on the question is
  correct; NaN when none of them could be graded, 0 when some were and none is right. ``O`` is its mean
  over the questions where it is defined.

A source is named so that no reach is pooled unnamed (:func:`source_mask`): a probe's label
(``sampling:k=6``) or its family (``graft``: every graft probe of the run; ``placebo``: every placebo graft), ``greedy``, ``arm:NAME`` for one
arm, and a union ``O[sampling+graft]`` of such names (:func:`union_name`). A source with an activation probe
in it is an intervention, and every table says so (:func:`source_is_intervention`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.records import BANK_COLUMNS, CANDIDATE_COLUMNS, candidate_frame, candidate_row

__all__ = [
    "BANK_COLUMNS", "GREEDY", "ORDER", "bank_frame", "bank_row", "bank_rows", "family_of", "question_ids", "reach", "realized",
    "solved_bank", "source_is_intervention", "source_mask", "union_name", "union_terms",
]

GREEDY = "greedy"
"""The probe and arm name of the deployment's row."""
ORDER = ["question_order", "probe_order", "candidate_idx"]
"""How a bank is sorted: the task's question order, the run's probe order (greedy first), the candidate."""

_UNION = re.compile(r"O\[(.+)\]")


def bank_row(candidate: Mapping[str, Any], probe: str, arm: str, intervention: bool, detail: str = "") -> dict:
    """One row of the bank: ``candidate``'s :data:`~reachlens.records.CANDIDATE_COLUMNS` (a
    :func:`~reachlens.records.candidate_row`, or a row of a study's candidate table), then which probe and arm made
    it, whether an activation probe did and what varies per question."""
    return {**{c: candidate[c] for c in CANDIDATE_COLUMNS}, "probe": probe, "arm": arm, "intervention": intervention,
            "detail": detail}


def bank_rows(candidates: pd.DataFrame, probe: str, arm: str, intervention: bool,
              detail: Callable[[Mapping[str, Any]], str] | None = None) -> list[dict]:
    """The bank rows of a study's candidate table (an audit's samples, a routing search's evaluations), each
    :func:`bank_row` of its candidate columns; ``detail(row)`` says what varies per question (none by default)."""
    return [bank_row(row, probe, arm, intervention, "" if detail is None else detail(row))
            for row in candidates.to_dict("records")]


def bank_frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Bank rows (:func:`bank_row`) as a DataFrame of :data:`~reachlens.records.BANK_COLUMNS` with fixed dtypes
    (:func:`~reachlens.records.candidate_frame`; ``detail`` text too)."""
    df = candidate_frame(rows, BANK_COLUMNS)
    return df.astype({"intervention": "bool", "probe": "str", "arm": "str", "detail": "str"})


def question_ids(bank: pd.DataFrame) -> list[str]:
    """The bank's questions in their order (the greedy rows')."""
    return bank.loc[bank["probe"] == GREEDY, "question_id"].tolist()


def union_name(terms: Sequence[str]) -> str:
    """``["sampling", "graft"]`` -> ``"O[sampling+graft]"``.

    >>> union_name(["greedy", "graft"])
    'O[greedy+graft]'
    """
    return f"O[{'+'.join(terms)}]"


def union_terms(name: str) -> list[str]:
    """The names a union is made of: ``"O[sampling+graft]"`` -> ``["sampling", "graft"]``; a single name alone."""
    m = _UNION.fullmatch(name)
    return m.group(1).split("+") if m else [name]


def family_of(probe: str) -> str:
    """The family a probe label names (``placebo`` for a placebo graft, which a family name never pools).

    >>> family_of("graft:layer=3"), family_of("graft:layer=3:placebo=true")
    ('graft', 'placebo')
    """
    return "placebo" if ":placebo=true" in probe else probe.split(":", 1)[0]


def source_mask(bank: pd.DataFrame, source: str) -> pd.Series:
    """The bank rows a source names (see the module docstring).

    Raises:
        ReachlensError: a name that matches no probe, family or arm of the bank (naming those it has).
    """
    mask = pd.Series(False, index=bank.index)
    probes = bank["probe"]
    for term in union_terms(source):
        if term.startswith("arm:"):
            hit = bank["arm"] == term[4:]
        elif (probes == term).any():
            hit = probes == term
        else:
            hit = probes.map(family_of) == term
        if not hit.any():
            known = sorted(set(probes))
            raise ReachlensError(f"{term!r} (in {source!r}) names no probe, family or arm of this bank; probes: "
                                 f"{', '.join(known)} (a family name, or arm:NAME for one arm)")
        mask |= hit
    return mask


def source_is_intervention(bank: pd.DataFrame, source: str) -> bool:
    """Whether any candidate a source names came from an activation probe."""
    return bool(bank.loc[source_mask(bank, source), "intervention"].any())


def reach(bank: pd.DataFrame, source: str) -> pd.Series:
    """Per question (the bank's order), 1.0 if a candidate of ``source`` is correct, 0.0 if some were graded and
    none is, NaN if none could be graded.

    >>> from types import SimpleNamespace as NS
    >>> done = NS(text="", token_ids=(1, 2), finish_reason="stop", mean_logprob=-1.0)
    >>> cand = candidate_row("q0", 0, done, {"answer": "1", "correct": False, "scored": True})
    >>> bank = bank_frame([bank_row(cand, "greedy", "greedy", False)])
    >>> reach(bank, "greedy").tolist()
    [0.0]
    """
    rows = bank[source_mask(bank, source)]
    good = (rows["correct"] & rows["scored"]).groupby(rows["question_id"]).any()
    graded = rows["scored"].groupby(rows["question_id"]).any()
    out = pd.Series(np.where(good, 1.0, np.where(graded, 0.0, math.nan)), index=good.index)
    return out.reindex(question_ids(bank))


def solved_bank(bank: pd.DataFrame, valid: Sequence[bool]) -> pd.DataFrame:
    """``bank`` by verified solutions: ``correct`` kept only where the candidate's worked solution is valid
    (``valid``, one verdict a row: :func:`~reachlens.studies.trace_reach.solutions_valid`), so every table of it counts
    a candidate only when it *solves* its question; an invalid candidate's ``answer`` is dropped, so a majority vote
    of it is over the valid candidates alone (as an audit's ``maj_K_trace``)."""
    ok = np.asarray(valid, dtype=bool)
    out = bank.assign(correct=bank["correct"].astype(bool).to_numpy() & ok)
    return out.assign(answer=bank["answer"].where(ok, None)) if "answer" in bank else out


def realized(bank: pd.DataFrame) -> pd.Series:
    """Per question, the greedy deployment's grade (1.0 / 0.0; NaN when it could not be graded)."""
    return reach(bank, GREEDY)
