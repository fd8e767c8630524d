"""Scoring a candidate pool: realized, reachable, the answer-blind selectors, and gap recovery.

Per question: ``realized`` is whether the deployment (the full model, greedy: the identity route) is
correct, ``reachable`` whether any of the K candidates is correct, and each selector whether its pick
is correct (:mod:`reachlens.selectors`). Per cell (a model x task x space x strategy, or an
audit), the means over questions give D, O_K and S, and

    gap recovery = (S - D) / (O_K - D),

the share of the reachable-but-not-realized gap that an answer-blind selector turns into accuracy.
It is undefined when O_K == D (no gap to recover): reported as NaN and printed as "undefined", never
as a number. Across cells the summary is the median of the defined recoveries, with the count of
undefined cells beside it.

The same functions score ordinary temperature samples: :func:`audit_selector_table` treats an
audit's K samples as the pool and its deployment as the deployment (majority@K against O_K).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from reachlens.records import ROUTE_QUESTION_COLUMNS
from reachlens.selectors import reachable, select
from reachlens.studies.metrics import budget_grid

__all__ = [
    "DEFAULT_SELECTORS", "question_table", "gap_recovery", "cell_summary", "median_recovery", "reach_curve",
    "format_recovery", "audit_selector_table",
]

DEFAULT_SELECTORS = ("majority", "logprob", "deepconf", "self_verify", "search")


def gap_recovery(selected: float, D: float, O_K: float) -> float:
    """``(selected - D) / (O_K - D)``; NaN (undefined) when O_K equals D (no gap to recover).

    >>> gap_recovery(0.6, 0.5, 0.9)
    0.25
    >>> gap_recovery(0.5, 0.5, 0.5)
    nan
    """
    if any(math.isnan(x) for x in (selected, D, O_K)):
        return math.nan
    if math.isclose(O_K, D, abs_tol=1e-12):
        return math.nan
    return (selected - D) / (O_K - D)


def format_recovery(value: float) -> str:
    """A gap recovery for a table: ``+0.25``, or ``undefined`` for NaN."""
    return "undefined" if value is None or math.isnan(value) else f"{value:+.2f}"


def question_table(
    candidates: pd.DataFrame,
    deployed: pd.DataFrame,
    selectors: Sequence[str] = DEFAULT_SELECTORS,
) -> pd.DataFrame:
    """One row per question: ``realized``, ``reachable``, each selector's correctness and answer
    (:data:`~reachlens.records.ROUTE_QUESTION_COLUMNS`, then ``<selector>``, ``<selector>_answer``).

    Args:
        candidates: the pool, one row per candidate, ordered within a question (``question_id``,
            ``answer``, ``correct``, ``scored`` and the columns the selectors read). With a ``route``
            column the selectors see each route once (its first evaluation): a route's greedy
            candidate is deterministic, so evaluating it again is budget spent, not another vote.
        deployed: ``question_id``, ``realized`` (the deployment graded correct), ``deployed_answer`` and
            ``deployed_scored`` (whether it could be graded) per question.
        selectors: registered selector names.
    """
    bank = candidates.sort_values("candidate_idx", kind="stable")
    distinct = bank.drop_duplicates(["question_id", "route"]) if "route" in bank else bank
    groups = bank.groupby("question_id", sort=False)
    table = deployed.set_index("question_id").loc[pd.unique(candidates["question_id"])][
        ["realized", "deployed_answer", "deployed_scored"]]
    table["realized"] = table["realized"].astype(bool)
    table["deployed_scored"] = table["deployed_scored"].astype(bool)
    table["reachable"] = reachable(bank)
    table["n_candidates"] = groups.size()
    table["n_unique"] = groups["route"].nunique() if "route" in bank else table["n_candidates"]
    table["n_answers"] = groups["answer"].nunique()
    for name in selectors:
        chosen = select(distinct, name).set_index("question_id")
        table[name] = chosen["correct"]
        table[f"{name}_answer"] = chosen["selected_answer"]
    columns = ROUTE_QUESTION_COLUMNS + [c for name in selectors for c in (name, f"{name}_answer")]
    return table.rename_axis("question_id").reset_index()[columns]


def cell_summary(questions: pd.DataFrame, selectors: Sequence[str] = DEFAULT_SELECTORS,
                 by: Sequence[str] = ()) -> pd.DataFrame:
    """Means per cell (``n``, ``D`` over the questions whose deployment was graded, ``O_K``, each selector) and
    ``recovery_<selector>``."""
    groups = questions.groupby(list(by), sort=False) if by else [((), questions)]
    rows = []
    for key, q in groups:
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        row["n"] = len(q)
        graded = q["deployed_scored"].astype(bool)
        row["D"] = float(q.loc[graded, "realized"].astype(float).mean()) if graded.any() else math.nan
        row["O_K"] = float(q["reachable"].mean())
        for name in selectors:
            row[name] = float(q[name].mean())
        for name in selectors:
            row[f"recovery_{name}"] = gap_recovery(row[name], row["D"], row["O_K"])
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
    """O_K at k = 1, 2, 4, ... K (column ``O_K``): the share of questions with a correct candidate
    among the first k evaluations (for an anytime strategy, exactly a run at budget k)."""
    k_max = int(candidates["candidate_idx"].max()) + 1 if len(candidates) else 0
    ks = budget_grid(k_max) if ks is None else list(ks)
    c = candidates.assign(_hit=candidates["correct"].astype(bool) & candidates["scored"].astype(bool))
    rows = []
    groups = c.groupby(list(by), sort=False) if by else [((), c)]
    for key, part in groups:
        key = key if isinstance(key, tuple) else (key,)
        n_q = part["question_id"].nunique()
        for k in ks:
            hit = part[part["candidate_idx"] < k].groupby("question_id")["_hit"].any()
            rows.append({**dict(zip(by, key)), "k": int(k), "O_K": float(hit.sum()) / n_q if n_q else math.nan})
    return pd.DataFrame(rows)


def audit_selector_table(
    result, selectors: Sequence[str] = ("majority", "logprob")
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The selectors on an audit's temperature samples: (per-question table, one-row cell summary).

    ``realized`` is the audit's deployment, the pool its K samples (:attr:`AuditResult.bank`). Audits store
    only the mean log-probability of a sample, so ``majority`` and ``logprob`` apply (not ``deepconf``).

    >>> q, summary = audit_selector_table(reachlens.audit(model, task, Protocol("arith", k=16)))  # doctest: +SKIP
    """
    qs = result.questions
    deployed = qs[["question_id", "realized", "deployed_answer", "deployed_scored"]]
    table = question_table(result.bank, deployed, selectors)
    return table, cell_summary(table, selectors)
