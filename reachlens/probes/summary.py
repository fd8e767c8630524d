"""Every table of a probe run, and its summary, computed from the bank alone.

:func:`probe_tables` names each table a report shows; :func:`probe_summary` is what the run's summary holds
(the same numbers as plain values). Which comparisons a run gets follows from its probes:

* reach: the deployment (``greedy``: D), each probe, each arm of a probe with several, each named union; given
  the task's golds, each beside its lucky-guess null (``O_null``, ``O_null_p95``, ``O_minus_null`` with its interval:
  :func:`~reachlens.probes.analysis.null_columns`);
* selectors: per probe, the answer-blind selectors of :mod:`reachlens.selectors` (``majority`` with ties
  averaged, ``logprob``) and the selection gap (O minus the best of them, with its interval);
* overlap: the pairwise Jaccard of the probes' fix-sets (questions a probe reaches that greedy misses);
* recovery (with a sampling probe): on the questions its K samples never solve, the share each other probe
  reaches, alone and with the greedy deployment;
* budget-matched (with a sampling probe of K samples and an activation probe): K samples against greedy +
  K - 1 candidates of the activation probe and against K/2 samples + K/2 of them, over every subset;
* placebo: each placebo graft beside its real graft;
* weight_noise (with a weight-noise probe): φ per sigma, the best draw's accuracy over the clean D
  (:func:`~reachlens.probes.weight_noise.phi_table`);
* on a task with a trace grader, ``reach_trace`` and ``weight_noise_trace``: reach and φ by verified solutions, and
  the recovery, budget-matched and placebo tables' ``*_trace`` columns: each by verified solutions, beside its own.

Every row says its ``kind``: ``intervention`` when an activation probe made any candidate it counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from reachlens.probes.analysis import (
    budget_matched,
    jaccard_table,
    kind_of,
    placebo_pairs,
    placebo_table,
    reach_table,
    recovery_table,
)
from reachlens.probes.bank import GREEDY, family_of, solved_bank, source_mask, union_name
from reachlens.probes.weight_noise import phi_table
from reachlens.selectors import selection_gap, selector_table

__all__ = ["SELECTORS", "default_unions", "matched_mixtures", "probe_summary", "probe_tables", "with_trace"]

SELECTORS = ("majority", "logprob")
"""The answer-blind selectors a probe run reports (the bank keeps answers and mean log-probabilities)."""


def default_unions(labels: Sequence[str]) -> list[str]:
    """Greedy with each family of ``labels`` (placebos apart), and every family together when there are two.

    >>> default_unions(["sampling:k=6", "graft:layer=3", "graft:layer=3:placebo=true"])
    ['O[greedy+sampling]', 'O[greedy+graft]', 'O[sampling+graft]']
    """
    families = list(dict.fromkeys(family_of(x) for x in labels if family_of(x) != "placebo"))
    unions = [union_name([GREEDY, f]) for f in families]
    if len(families) > 1:
        unions.append(union_name(families))
    return unions


def _arms(bank: pd.DataFrame, labels: Sequence[str]) -> list[str]:
    arms = []
    for label in labels:
        mine = list(dict.fromkeys(bank.loc[bank["probe"] == label, "arm"]))
        if len(mine) > 1:
            arms += [f"arm:{a}" for a in mine if f"arm:{a}" not in arms]
    return arms


def _selectors(bank: pd.DataFrame, labels: Sequence[str]) -> pd.DataFrame:
    rows = []
    for label in labels:
        sub = bank[bank["probe"] == label]
        table = selector_table(sub, SELECTORS).set_index("selector")
        gap = selection_gap(sub, SELECTORS)
        rows.append({"probe": label, "kind": kind_of(bank, label), "O": table.loc["O_K", "accuracy"],
                     **{s: table.loc[s, "accuracy"] for s in SELECTORS}, "best": gap.selector, "gap": gap.gap,
                     "gap_lo": gap.gap_ci[0], "gap_hi": gap.gap_ci[1]})
    return pd.DataFrame(rows, columns=["probe", "kind", "O", *SELECTORS, "best", "gap", "gap_lo", "gap_hi"])


def _sampling(labels: Sequence[str]) -> str | None:
    return next((x for x in labels if family_of(x) == "sampling"), None)


def matched_mixtures(bank: pd.DataFrame, labels: Sequence[str]) -> dict[str, dict[str, list[tuple[str, int]]]]:
    """Per activation probe that can match the first sampling probe's K: its budget-matched mixtures."""
    sampling = _sampling(labels)
    if sampling is None:
        return {}
    k = int(bank.loc[bank["probe"] == sampling].groupby("question_id").size().min())
    out = {}
    for label in labels:
        size = int(bank.loc[bank["probe"] == label].groupby("question_id").size().min())
        if family_of(label) in ("sampling", "routes", "placebo") or k < 2 or size < k - 1:
            continue
        half = k // 2
        mixtures = {f"{k} samples": [(sampling, k)], f"greedy + {k - 1} of {label}": [(GREEDY, 1), (label, k - 1)]}
        if size >= k - half:
            mixtures[f"{half} samples + {k - half} of {label}"] = [(sampling, half), (label, k - half)]
        out[label] = mixtures
    return out


def _comparisons(bank: pd.DataFrame, labels: Sequence[str]) -> dict[str, pd.DataFrame]:
    """The tables a run's probes call for: ``recovery``, ``budget_matched``, ``placebo`` (empty when they do not)."""
    sampling = _sampling(labels)
    others = [x for x in labels if x != sampling]
    with_greedy = [union_name([GREEDY, x]) for x in others]
    matched = [budget_matched(bank, mixtures).assign(probe=label) for label, mixtures in
               matched_mixtures(bank, labels).items()]
    return {"recovery": recovery_table(bank, sampling, [GREEDY, *others, *with_greedy]) if sampling else pd.DataFrame(),
            "budget_matched": pd.concat(matched, ignore_index=True) if matched else pd.DataFrame(),
            "placebo": placebo_table(bank, placebo_pairs(list(labels)), stratum_of=sampling)}


_ROW_KEYS = {"recovery": (["source"], ("kind", "stratum_of")),
             "budget_matched": (["probe", "mixture"], ("kind", "budget", "subsets", "n")),
             "placebo": (["graft"], ("placebo", "kind"))}
"""Per comparison table: the columns naming a row, and those that read the same by answers and by verified solutions."""
_ENDS = ("_lo", "_hi", "_mde")


def with_trace(answers: pd.DataFrame, trace: pd.DataFrame, name: str) -> pd.DataFrame:
    """The comparison table ``name`` by answers with the same table by verified solutions beside it: each measured
    column ``c`` (its ``c_lo``, ``c_hi``, ``c_mde``) followed by ``c_trace`` (``c_trace_lo``, ...)."""
    if answers.empty:
        return answers
    keys, same = _ROW_KEYS[name]
    measured = [c for c in trace.columns if c not in (*keys, *same)]
    base = [c for c in measured if not (c.endswith(_ENDS) and c.rsplit("_", 1)[0] in measured)]

    def renamed(c: str) -> str:
        stem, _, end = c.rpartition("_")
        return f"{stem}_trace_{end}" if c not in base else f"{c}_trace"

    out = answers.merge(trace[keys + measured].rename(columns={c: renamed(c) for c in measured}), on=keys, how="left")
    order = [c for c in answers.columns if c not in measured]
    for b in base:
        order += [x for x in (b, *(b + e for e in _ENDS)) if x in answers.columns]
        order += [x for x in (f"{b}_trace", *(f"{b}_trace{e}" for e in _ENDS)) if x in out.columns]
    return out[order]


def probe_tables(bank: pd.DataFrame, labels: Sequence[str], unions: Sequence[str],
                 valid: Sequence[bool] | None = None, golds: pd.Series | None = None) -> dict[str, pd.DataFrame]:
    """Every table of a probe run by name: ``reach``, ``selectors``, ``overlap``, ``recovery``,
    ``budget_matched``, ``placebo``, ``weight_noise`` (the last four empty when the run's probes do not call for
    them); with ``valid`` (each candidate's worked solution valid:
    :func:`~reachlens.studies.trace_reach.solutions_valid`) also ``reach_trace``: the reach table with a candidate
    counted only when it *solves* its question (correct and valid, :func:`~reachlens.probes.bank.solved_bank`), so
    D^trace and O^trace per probe, arm and union; the recovery, budget-matched and placebo tables' ``*_trace``
    columns beside their own (the same table by verified solutions: the stratum the sampling probe never solves,
    the majority vote of the valid candidates); and (with weight noise) ``weight_noise_trace``: φ by verified
    solutions (clean D^trace, each draw's share of questions solved). With ``golds`` (the task's, by question id:
    :func:`~reachlens.studies.lucky_null.task_golds`), the reach table's null columns."""
    sources = [GREEDY, *labels, *_arms(bank, labels), *unions]
    tables = {"reach": reach_table(bank, sources, golds),
              "selectors": _selectors(bank, labels), "overlap": jaccard_table(bank, list(labels))}
    tables.update(_comparisons(bank, labels))
    tables["weight_noise"] = phi_table(bank, labels)
    if valid is not None:
        solved = solved_bank(bank, valid)
        tables["reach_trace"] = reach_table(solved, sources)
        for name, table in _comparisons(solved, labels).items():
            tables[name] = with_trace(tables[name], table, name)
        if len(tables["weight_noise"]):
            tables["weight_noise_trace"] = phi_table(solved, labels)
    return tables


def _native(value: Any) -> Any:
    """``value`` with numpy scalars as Python's and NaN as None, through lists and dicts (for JSON)."""
    if isinstance(value, dict):
        return {k: _native(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_native(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    return None if isinstance(value, float) and math.isnan(value) else value


def _null(row: pd.Series, name: str) -> dict[str, Any]:
    """A reach row's lucky-guess null as summary entries named after ``name`` (``O_null``, ``O_null_p95``,
    ``O_minus_null`` and ``O_minus_null_ci``; ``D_...`` for the deployment); none when the table has no null."""
    if "O_null" not in row.index:
        return {}
    return {f"{name}_null": row["O_null"], f"{name}_null_p95": row["O_null_p95"],
            f"{name}_minus_null": row["O_minus_null"],
            f"{name}_minus_null_ci": [row["O_minus_null_lo"], row["O_minus_null_hi"]]}


def probe_summary(bank: pd.DataFrame, labels: Sequence[str], unions: Sequence[str], *,
                  tables: dict[str, pd.DataFrame] | None = None, **about: Any) -> dict[str, Any]:
    """The summary of a probe run: D, and per probe, arm and union its O with its interval (and, when the tables
    hold ``reach_trace``, D_trace and each O_trace: reach by verified solutions; when the reach table has the
    lucky-guess null, ``D_null`` ... and each ``O_null``, ``O_null_p95``, ``O_minus_null`` with ``_ci``), then the
    other tables of :func:`probe_tables` (``tables`` when computed already) as lists of rows. ``about``: names
    to record beside (model, task)."""
    tables = tables if tables is not None else probe_tables(bank, labels, unions)
    reach = tables["reach"].set_index("source")
    sel = tables["selectors"].set_index("probe")

    traced = tables["reach_trace"].set_index("source") if "reach_trace" in tables else None

    def entry(source: str) -> dict[str, Any]:
        r = reach.loc[source]
        verified = {} if traced is None else {"O_trace": traced.loc[source, "O"],
                                              "O_trace_ci": [traced.loc[source, "O_lo"], traced.loc[source, "O_hi"]]}
        return {"kind": r["kind"], "O": r["O"], "O_ci": [r["O_lo"], r["O_hi"]], **_null(r, "O"), **verified,
                "n": int(r["n"]), "candidates": r["candidates"], "n_tokens": r["n_tokens"]}

    probes = {}
    for label in labels:
        arms = sorted(set(bank.loc[source_mask(bank, label), "arm"]))
        probes[label] = {**entry(label), "family": family_of(label),
                         "arms": {a: entry(f"arm:{a}") for a in arms if f"arm:{a}" in reach.index},
                         "selectors": {s: sel.loc[label, s] for s in ("majority", "logprob")},
                         "selection_gap": sel.loc[label, "gap"],
                         "selection_gap_ci": [sel.loc[label, "gap_lo"], sel.loc[label, "gap_hi"]]}
    g = reach.loc[GREEDY]
    verified = {} if traced is None else {"D_trace": traced.loc[GREEDY, "O"],
                                          "D_trace_ci": [traced.loc[GREEDY, "O_lo"], traced.loc[GREEDY, "O_hi"]]}
    return _native({**about, "n": int(g["n"]), "D": g["O"], "D_ci": [g["O_lo"], g["O_hi"]], **_null(g, "D"), **verified,
                    "probes": probes,
                    "unions": {u: entry(u) for u in unions},
                    **{name: tables[name].to_dict("records") for name in ("overlap", "recovery", "budget_matched",
                                                                           "placebo", "weight_noise",
                                                                           "weight_noise_trace") if name in tables}})
