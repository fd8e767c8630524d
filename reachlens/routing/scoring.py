"""Scoring a candidate pool: greedy, oracle@K, the answer-blind selectors, and gap recovery.

Per question: ``greedy`` is the full model's greedy answer (the identity route), ``oracle`` whether
any of the K candidates is correct, and each selector whether its pick is correct
(:mod:`reachlens.routing.selectors`). Per cell (a model x task x space x strategy, or an audit), the
means over questions give G, O and S, and

    gap recovery = (S - G) / (O - G),

the share of the reachable-but-not-realized gap that an answer-blind selector turns into accuracy.
It is undefined when O == G (no gap to recover): reported as NaN and printed as "undefined", never
as a number. Across cells the summary is the median of the defined recoveries, with the count of
undefined cells beside it.

The same functions score ordinary temperature samples: :func:`audit_selector_table` treats an
audit's K samples as the pool and its deployment as greedy (majority@K against oracle@K).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from reachlens.routing.selectors import oracle, select
from reachlens.studies.metrics import budget_grid

__all__ = [
    "DEFAULT_SELECTORS", "question_table", "gap_recovery", "cell_summary", "median_recovery", "reach_curve",
    "format_recovery", "audit_selector_table",
]

DEFAULT_SELECTORS = ("majority", "confidence", "lowest_window", "self_verify", "search")


def gap_recovery(selected: float, greedy: float, oracle_value: float) -> float:
    """``(selected - greedy) / (oracle - greedy)``; NaN (undefined) when the oracle equals greedy.

    >>> gap_recovery(0.6, 0.5, 0.9)
    0.25
    >>> gap_recovery(0.5, 0.5, 0.5)
    nan
    """
    if any(math.isnan(x) for x in (selected, greedy, oracle_value)):
        return math.nan
    if math.isclose(oracle_value, greedy, abs_tol=1e-12):
        return math.nan
    return (selected - greedy) / (oracle_value - greedy)


def format_recovery(value: float) -> str:
    """A gap recovery for a table: ``+0.25``, or ``undefined`` for NaN."""
    return "undefined" if value is None or math.isnan(value) else f"{value:+.2f}"


def question_table(
    candidates: pd.DataFrame,
    greedy: pd.DataFrame,
    selectors: Sequence[str] = DEFAULT_SELECTORS,
) -> pd.DataFrame:
    """One row per question: ``greedy``, ``oracle``, each selector's correctness and answer.

    Args:
        candidates: the pool, one row per candidate, ordered within a question (``question_id``,
            ``answer``, ``correct``, ``scored`` and the columns the selectors read). With a ``route``
            column the selectors see each route once (its first evaluation): a route's greedy
            candidate is deterministic, so evaluating it again is budget spent, not another vote.
        greedy: ``question_id``, ``greedy_correct`` (1/0/NaN) and ``greedy_answer`` per question.
        selectors: registered selector names.
    """
    g = greedy.set_index("question_id")
    rows = []
    for qid, pool in candidates.groupby("question_id", sort=False):
        pool = pool.reset_index(drop=True)
        row = {
            "question_id": qid, "greedy": float(g.loc[qid, "greedy_correct"]),
            "greedy_answer": g.loc[qid, "greedy_answer"],
            "oracle": oracle(pool), "n_candidates": len(pool),
            "n_unique": int(pool["route"].nunique()) if "route" in pool else len(pool),
            "n_answers": int(pool["answer"].nunique()),
        }
        distinct = pool.drop_duplicates("route").reset_index(drop=True) if "route" in pool else pool
        for name in selectors:
            s = select(distinct, name)
            row[name] = s.correct
            row[f"{name}_answer"] = s.answer
        rows.append(row)
    return pd.DataFrame(rows)


def cell_summary(questions: pd.DataFrame, selectors: Sequence[str] = DEFAULT_SELECTORS,
                 by: Sequence[str] = ()) -> pd.DataFrame:
    """Means per cell (``n``, ``greedy``, ``oracle``, each selector) and ``recovery_<selector>``."""
    groups = questions.groupby(list(by), sort=False) if by else [((), questions)]
    rows = []
    for key, q in groups:
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        row["n"] = len(q)
        row["greedy"] = float(q["greedy"].mean())
        row["oracle"] = float(q["oracle"].mean())
        for name in selectors:
            row[name] = float(q[name].mean())
        for name in selectors:
            row[f"recovery_{name}"] = gap_recovery(row[name], row["greedy"], row["oracle"])
        rows.append(row)
    return pd.DataFrame(rows)


def median_recovery(summary: pd.DataFrame, selectors: Sequence[str] = DEFAULT_SELECTORS) -> pd.DataFrame:
    """Per selector: the median gap recovery over the cells where it is defined, and how many are not."""
    rows = []
    for name in selectors:
        vals = summary[f"recovery_{name}"].astype(float)
        defined = vals.dropna()
        rows.append({"selector": name, "median_recovery": float(np.median(defined)) if len(defined) else math.nan,
                     "cells_defined": len(defined), "cells_undefined": int(vals.isna().sum())})
    return pd.DataFrame(rows)


def reach_curve(candidates: pd.DataFrame, ks: Sequence[int] | None = None, by: Sequence[str] = ()) -> pd.DataFrame:
    """oracle@k for k = 1, 2, 4, ... K: the share of questions with a correct candidate among the first
    k evaluations (for an anytime strategy, exactly a run at budget k)."""
    k_max = int(candidates["eval_idx"].max()) + 1 if len(candidates) else 0
    ks = budget_grid(k_max) if ks is None else list(ks)
    c = candidates.assign(_hit=candidates["correct"].astype(bool) & candidates["scored"].astype(bool))
    rows = []
    groups = c.groupby(list(by), sort=False) if by else [((), c)]
    for key, part in groups:
        key = key if isinstance(key, tuple) else (key,)
        n_q = part["question_id"].nunique()
        for k in ks:
            hit = part[part["eval_idx"] < k].groupby("question_id")["_hit"].any()
            rows.append({**dict(zip(by, key)), "k": int(k), "oracle_at_k": float(hit.sum()) / n_q if n_q else math.nan})
    return pd.DataFrame(rows)


def audit_selector_table(
    result, selectors: Sequence[str] = ("majority", "confidence")
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The selectors on an audit's temperature samples: (per-question table, one-row cell summary).

    ``greedy`` is the audit's deployment (``realized``), the pool its K samples. Audits store only the
    mean log-probability of a sample, so ``majority`` and ``confidence`` apply (not ``lowest_window``).

    >>> q, summary = audit_selector_table(reachlens.audit(model, task, Protocol("arith", k=16)))  # doctest: +SKIP
    """
    qs = result.questions
    greedy = pd.DataFrame({
        "question_id": qs["question_id"],
        "greedy_correct": np.where(qs["deployed_scored"].astype(bool), qs["realized"].astype(float), np.nan),
        "greedy_answer": qs["deployed_answer"],
    })
    table = question_table(result.samples, greedy, selectors)
    return table, cell_summary(table, selectors)
