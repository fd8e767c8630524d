"""Cross-probe analysis of a candidate bank: pure functions, bank in, tables out.

* :func:`reach_table`: realized, and reachable under each source (probe, arm, named union) with its 95 %
  Wilson interval, its candidates and decoded tokens per question, and whether it is an intervention; given
  the task's golds, each source's lucky-guess null (:func:`null_columns`: its candidates scored against the
  gold of another question of the same kind, :mod:`reachlens.studies.lucky_null`).
* :func:`fix_sets` / :func:`jaccard_table`: the *fix-set* of a source is the questions it reaches that the
  greedy deployment gets wrong; two fix-sets' Jaccard index |A & B| / |A | B| with a bootstrap interval
  (questions resampled, :data:`~reachlens.stats.N_BOOT` times; undefined when both are empty).
* :func:`recovery_table`: on the *stratum* a source never solves (K samples: 0 of K correct), the share
  each other source reaches, with its Wilson interval, and its paired difference from the first source's.
* :func:`budget_matched`: mixtures of equal budget (6 samples; greedy + 5 grafts; 3 samples + 3 grafts),
  each averaged over *every* subset of its pools (or a seeded sample of them past ``max_subsets``): reach
  (any candidate correct) and the majority vote (:mod:`reachlens.selectors`, ties averaged), with bootstrap
  intervals and each mixture's paired difference from the first.
* :func:`placebo_table`: each placebo graft probe beside its real graft: reach, fix-set, the paired
  difference with its bootstrap interval and the exact McNemar p; recovery on the stratum likewise.

Every paired difference carries its minimum detectable effect (``*_mde``, :func:`reachlens.power.detectable`:
80 % power, two-sided 5 %, the exact McNemar test at the measured share of questions that differ): a difference
whose interval holds 0 rules out effects of that size, not smaller ones.

Bootstrap intervals resample questions with a fixed seed, so a table can be recomputed bit for bit; with a
few dozen questions they are wide, and the tables carry the counts beside the rates.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.probes.bank import GREEDY, question_ids, reach, realized, source_is_intervention, source_mask
from reachlens.power import detectable
from reachlens.stats import N_BOOT, mcnemar_exact_p, paired_bootstrap_ci, wilson_interval
from reachlens.studies.lucky_null import lucky_null

__all__ = [
    "NULL_COLUMNS", "budget_matched", "fix_sets", "jaccard_table", "kind_of", "null_columns", "placebo_pairs",
    "placebo_table", "reach_table", "recovery_table",
]


def kind_of(bank: pd.DataFrame, source: str) -> str:
    """``intervention`` when an activation probe made any of the source's candidates, else ``decoding``."""
    return "intervention" if source_is_intervention(bank, source) else "decoding"


def _rate(values: pd.Series) -> tuple[int, int, float, float, float]:
    """(successes, n defined, rate, Wilson lo, hi) of a 0/1/NaN series."""
    defined = values.dropna()
    n, x = len(defined), int(defined.sum())
    lo, hi = wilson_interval(x, n)
    return x, n, (x / n if n else math.nan), lo, hi


def reach_table(bank: pd.DataFrame, sources: Sequence[str], golds: pd.Series | None = None) -> pd.DataFrame:
    """One row per source: ``source``, ``kind`` (decoding or intervention), ``candidates`` and
    ``n_tokens`` per question (means), ``n`` (questions defined), ``reached``, ``O`` and its interval.
    ``greedy`` is the deployment: its ``O`` is ``D``. With ``golds`` (the task's, by question id), each source's
    lucky-guess null too (:func:`null_columns`)."""
    rows = []
    n_q = len(question_ids(bank))
    for source in sources:
        sub = bank[source_mask(bank, source)]
        x, n, rate, lo, hi = _rate(reach(bank, source))
        rows.append({"source": source, "kind": kind_of(bank, source), "candidates": len(sub) / n_q,
                     "n_tokens": sub["n_tokens"].sum() / n_q, "n": n, "reached": x, "O": rate,
                     "O_lo": lo, "O_hi": hi, **({} if golds is None else null_columns(bank, source, golds))})
    return pd.DataFrame(rows, columns=["source", "kind", "candidates", "n_tokens", "n", "reached", "O", "O_lo",
                                       "O_hi", *([] if golds is None else NULL_COLUMNS)])


NULL_COLUMNS = ["O_null", "O_null_p95", "O_minus_null", "O_minus_null_lo", "O_minus_null_hi"]
"""A reach row's lucky-guess null (:func:`null_columns`)."""


def null_columns(bank: pd.DataFrame, source: str, golds: pd.Series) -> dict[str, float]:
    """A source's lucky-guess null (:func:`~reachlens.studies.lucky_null.lucky_null` over its own candidates, each
    question's scored against the gold of another question of the same kind): ``O_null``, its 95th percentile
    ``O_null_p95``, and ``O_minus_null`` (O minus it) with its paired bootstrap interval; NaN when a question of the
    bank has no gold in ``golds``."""
    ids = question_ids(bank)
    if not all(q in golds.index for q in ids):
        return dict.fromkeys(NULL_COLUMNS, math.nan)
    questions = pd.DataFrame({"question_id": ids, "gold": golds.loc[ids].to_numpy(),
                              "reachable": reach(bank, source).to_numpy()})
    null = lucky_null(questions, bank[source_mask(bank, source)])
    lo, hi = null.O_K_minus_null_ci
    return {"O_null": null.O_K_null, "O_null_p95": null.O_K_null_p95, "O_minus_null": null.O_K_minus_null,
            "O_minus_null_lo": lo, "O_minus_null_hi": hi}


def fix_sets(bank: pd.DataFrame, sources: Sequence[str]) -> dict[str, set[str]]:
    """Per source, the questions it reaches that the greedy deployment gets wrong (graded wrong, not undefined)."""
    wrong = realized(bank) == 0.0
    return {s: set(reach(bank, s).index[(reach(bank, s) == 1.0) & wrong]) for s in sources}


def _jaccard(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Jaccard of 0/1 indicator rows (last axis: questions); NaN where both are empty."""
    inter, union = (a & b).sum(-1), (a | b).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / np.maximum(union, 1), np.nan)


def jaccard_table(bank: pd.DataFrame, sources: Sequence[str], *, n_boot: int = N_BOOT, seed: int = 0) -> pd.DataFrame:
    """Pairwise Jaccard of the sources' fix-sets: ``a``, ``b``, the sizes, the intersection, ``jaccard`` and
    its bootstrap interval (questions resampled; NaN when both fix-sets are empty)."""
    ids = question_ids(bank)
    sets = fix_sets(bank, sources)
    ind = {s: np.array([q in sets[s] for q in ids]) for s in sources}
    draws = np.random.default_rng(seed).integers(0, len(ids), size=(n_boot, len(ids))) if ids else None
    rows = []
    for a, b in itertools.combinations(sources, 2):
        j = float(_jaccard(ind[a], ind[b]))
        boot = _jaccard(ind[a][draws], ind[b][draws]) if draws is not None else np.array([np.nan])
        boot = boot[~np.isnan(boot)]
        lo, hi = (float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))) if len(boot) else (math.nan,) * 2
        rows.append({"a": a, "b": b, "kind": "intervention" if "intervention" in (kind_of(bank, a), kind_of(bank, b))
                     else "decoding", "fix_a": len(sets[a]), "fix_b": len(sets[b]), "both": len(sets[a] & sets[b]),
                     "jaccard": j, "jaccard_lo": lo, "jaccard_hi": hi})
    return pd.DataFrame(rows, columns=["a", "b", "kind", "fix_a", "fix_b", "both", "jaccard", "jaccard_lo", "jaccard_hi"])


def recovery_table(bank: pd.DataFrame, stratum_of: str, sources: Sequence[str], *, n_boot: int = N_BOOT,
                   seed: int = 0) -> pd.DataFrame:
    """On the questions ``stratum_of`` never solves (graded, none correct), the share each source reaches:
    ``source``, ``kind``, ``stratum`` (its size), ``recovered``, ``rate`` and its Wilson interval; ``drate``, the
    paired difference from the first source's rate on the same questions, with its bootstrap interval and its
    minimum detectable effect ``drate_mde`` (NaN on the first row, the reference)."""
    base = reach(bank, stratum_of)
    stratum = base.index[base == 0.0]
    first = reach(bank, sources[0]).loc[stratum] if len(sources) else None
    rows = []
    for i, source in enumerate(sources):
        got = reach(bank, source).loc[stratum]
        x, n, rate, lo, hi = _rate(got)
        rows.append({"source": source, "kind": kind_of(bank, source), "stratum_of": stratum_of, "stratum": len(stratum),
                     "n": n, "recovered": x, "rate": rate, "rate_lo": lo, "rate_hi": hi,
                     **_paired("drate", (got - first).to_numpy(float) if i else None, n_boot, seed)})
    return pd.DataFrame(rows, columns=["source", "kind", "stratum_of", "stratum", "n", "recovered", "rate", "rate_lo",
                                       "rate_hi", "drate", "drate_lo", "drate_hi", "drate_mde"])


def _paired(name: str, diff: np.ndarray | None, n_boot: int, seed: int) -> dict[str, float]:
    """``name`` (the mean of the paired 0/1 differences ``diff``, NaN left out), its bootstrap interval and its
    minimum detectable effect; all NaN when ``diff`` is None (a reference row)."""
    if diff is None:
        return {name: math.nan, f"{name}_lo": math.nan, f"{name}_hi": math.nan, f"{name}_mde": math.nan}
    lo, hi = paired_bootstrap_ci(diff, n_boot=n_boot, seed=seed)
    return {name: float(np.nanmean(diff)) if np.isfinite(diff).any() else math.nan, f"{name}_lo": lo, f"{name}_hi": hi,
            f"{name}_mde": detectable(diff)}


# --- budget-matched mixtures ----------------------------------------------------------------------------
def _subsets(sizes: Sequence[int], takes: Sequence[int], max_subsets: int, rng: random.Random) -> list[tuple]:
    """Every choice of ``takes[i]`` of ``sizes[i]`` candidates per pool (a seeded sample past ``max_subsets``)."""
    total = math.prod(math.comb(n, t) for n, t in zip(sizes, takes))
    if total <= max_subsets:
        return list(itertools.product(*(itertools.combinations(range(n), t) for n, t in zip(sizes, takes))))
    return [tuple(tuple(sorted(rng.sample(range(n), t))) for n, t in zip(sizes, takes)) for _ in range(max_subsets)]


def _subset_positions(per: Sequence[np.ndarray], choices: list[tuple]) -> np.ndarray:
    """Bank positions of every subset (one row each): each pool's chosen candidates, pool after pool."""
    return np.hstack([rows[np.array([c[p] for c in choices], dtype=np.int64).reshape(len(choices), -1)]
                      for p, rows in enumerate(per)])


def _subset_scores(idx: np.ndarray, codes: np.ndarray, correct: np.ndarray, scored: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per subset (a row of bank positions ``idx``): reach (a graded candidate correct; NaN when none is graded)
    and the majority vote with ties averaged: among the graded candidates with an answer (``codes`` >= 0), the
    answers with the most votes, each by its first candidate, their grades' mean (0 when no candidate has a graded
    answer; NaN when none is graded). The rule of :func:`reachlens.selectors.select` ``"majority"``, on arrays."""
    a, ok, right = codes[idx], scored[idx], correct[idx]
    graded = ok.any(1)
    o = np.where(graded, (right & ok).any(1), np.nan)
    vote = ok & (a >= 0)  # eligible: graded, with an answer
    same = (a[:, :, None] == a[:, None, :]) & vote[:, :, None] & vote[:, None, :]
    votes = same.sum(2)  # per candidate, the votes for its answer (0 when not eligible)
    earlier = np.tril(np.ones(idx.shape[1:] * 2, dtype=bool), k=-1)  # [j, i]: i before j
    first = vote & ~(same & earlier).any(2)
    tied = first & (votes == votes.max(1, keepdims=True))
    n_tied = tied.sum(1)
    maj = np.where(n_tied > 0, (tied & right).sum(1) / np.maximum(n_tied, 1), np.where(graded, 0.0, np.nan))
    return o, maj


def _per_question(bank: pd.DataFrame, parts: Sequence[tuple[str, int]], max_subsets: int, seed: int
                  ) -> tuple[pd.Series, pd.Series]:
    """Per question (``question_ids`` order), the mean over its subsets of reach and of the majority vote."""
    qids = bank["question_id"].to_numpy()
    codes = pd.factorize(bank["answer"], use_na_sentinel=True)[0]  # None and NaN: -1 (no answer)
    correct, scored = bank["correct"].to_numpy(bool), bank["scored"].to_numpy(bool)
    pools = [np.flatnonzero(source_mask(bank, s).to_numpy()) for s, _ in parts]
    groups = [pd.Series(pool).groupby(qids[pool]).indices for pool in pools]  # question -> positions in the pool
    ids = question_ids(bank)
    o_mean, maj_mean = [], []
    for qid in ids:
        per = [pool[g[qid]] if qid in g else pool[:0] for pool, g in zip(pools, groups)]
        for (source, take), rows in zip(parts, per):
            if len(rows) < take:
                raise ReachlensError(f"a budget-matched mixture takes {take} candidates of {source!r}, which has "
                                     f"{len(rows)} on question {qid!r}; take at most {len(rows)}")
        rng = random.Random(f"budget-matched/{seed}/{qid}")
        choices = _subsets([len(r) for r in per], [t for _, t in parts], max_subsets, rng)
        o, maj = _subset_scores(_subset_positions(per, choices), codes, correct, scored)
        o_mean.append(_nanmean(o))
        maj_mean.append(_nanmean(maj))
    return pd.Series(o_mean, index=ids, dtype=float), pd.Series(maj_mean, index=ids, dtype=float)


def _nanmean(x: np.ndarray) -> float:
    defined = x[~np.isnan(x)]
    return float(defined.mean()) if len(defined) else math.nan


def budget_matched(bank: pd.DataFrame, mixtures: Mapping[str, Sequence[tuple[str, int]]], *,
                   max_subsets: int = 2000, n_boot: int = N_BOOT, seed: int = 0) -> pd.DataFrame:
    """Mixtures of candidates at a matched budget, each averaged over every subset of its pools.

    Args:
        bank: a candidate bank.
        mixtures: name -> parts ``(source, how many)``, e.g. ``{"6 samples": [("sampling", 6)],
            "greedy + 5 grafts": [("greedy", 1), ("graft", 5)]}``. The first is the reference of the differences.
        max_subsets: past this many subsets per question, a seeded uniform sample of this many.

    Returns:
        One row per mixture: ``mixture``, ``kind``, ``budget`` (candidates), ``subsets`` (per question, before
        any sampling), ``n`` (the questions where every mixture is defined: all are measured on these), ``O`` and
        ``majority`` with bootstrap intervals, and ``dO`` / ``dmajority`` (minus the first mixture's) with
        paired bootstrap intervals.
    """
    ids = question_ids(bank)
    per = {}
    for name, parts in mixtures.items():
        per[name] = _per_question(bank, parts, max_subsets, seed)
    common = pd.Series(True, index=ids)
    for o, maj in per.values():
        common &= o.notna() & maj.notna()
    ref = next(iter(per.values()), None)
    rows = []
    for name, parts in mixtures.items():
        row = {"mixture": name, "kind": "intervention" if any(source_is_intervention(bank, s) for s, _ in parts)
               else "decoding", "budget": sum(t for _, t in parts),
               "subsets": math.prod(math.comb(int(bank[source_mask(bank, s)].groupby("question_id").size().min()), t)
                                    for s, t in parts), "n": int(common.sum())}
        for label, values, base in (("O", per[name][0], ref[0]), ("majority", per[name][1], ref[1])):
            v, d = values[common].to_numpy(float), (values - base)[common].to_numpy(float)
            row[label] = float(v.mean()) if len(v) else math.nan
            row[f"{label}_lo"], row[f"{label}_hi"] = paired_bootstrap_ci(v, n_boot=n_boot, seed=seed)
            row[f"d{label}"] = float(d.mean()) if len(d) else math.nan
            row[f"d{label}_lo"], row[f"d{label}_hi"] = paired_bootstrap_ci(d, n_boot=n_boot, seed=seed)
        rows.append(row)
    return pd.DataFrame(rows)


# --- placebo ---------------------------------------------------------------------------------------------
def placebo_pairs(probes: Sequence[str]) -> list[tuple[str, str]]:
    """(real graft, its placebo) for each placebo graft probe whose real graft is in ``probes``.

    >>> placebo_pairs(["graft:layer=3", "graft:layer=3:placebo=true", "graft:layer=4:placebo=true"])
    [('graft:layer=3', 'graft:layer=3:placebo=true')]
    """
    pairs = []
    for p in probes:
        if p.startswith("graft:") and ":placebo=true" in p:
            real = p.replace(":placebo=true", "")
            if real in probes:
                pairs.append((real, p))
    return pairs


def placebo_table(bank: pd.DataFrame, pairs: Sequence[tuple[str, str]], *, stratum_of: str | None = None,
                  n_boot: int = N_BOOT, seed: int = 0) -> pd.DataFrame:
    """Each graft beside its placebo: ``O`` of both, fix-set sizes, ``dO`` (graft - placebo) with its paired
    bootstrap interval, minimum detectable effect ``dO_mde`` and exact McNemar p; with ``stratum_of``, the
    recovery of both on its stratum and ``drecovery`` (graft - placebo there) with its interval and MDE."""
    rows = []
    fixes = fix_sets(bank, [s for pair in pairs for s in pair])
    for real, placebo in pairs:
        a, b = reach(bank, real), reach(bank, placebo)
        row = {"graft": real, "placebo": placebo, "kind": "intervention", "O_graft": float(a.mean()),
               "O_placebo": float(b.mean()), "fix_graft": len(fixes[real]), "fix_placebo": len(fixes[placebo]),
               **_paired("dO", (a - b).to_numpy(float), n_boot, seed),
               "mcnemar_p": mcnemar_exact_p(int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum()))}
        if stratum_of is not None:
            rec = recovery_table(bank, stratum_of, [placebo, real], n_boot=n_boot, seed=seed).set_index("source")
            row.update(recovery_graft=float(rec.loc[real, "rate"]), recovery_placebo=float(rec.loc[placebo, "rate"]),
                       **{f"drecovery{end}": rec.loc[real, f"drate{end}"] for end in ("", "_lo", "_hi", "_mde")})
        rows.append(row)
    return pd.DataFrame(rows)
