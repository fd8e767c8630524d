"""Plan a comparison from a pilot: how many questions a change needs, and what each n could detect.

``plan(pilot)`` reads a pilot audit (one checkpoint) or a pilot comparison (two) and answers, for the three
quantities a comparison tests, with the tests it runs (:mod:`reachlens.power`):

* the number of questions needed to detect a change of ``effect`` with ``power`` (two-sided ``alpha``) in D (the
  greedy deployment's accuracy), O_K (reachable with K samples) and pass@1 (the mean per-question sample hit rate);
* the effect detectable at each n of a short list (100, 300, 1000 and the task's full split);
* the budget question: at each k of the pilot's pass@k curve (1, 2, 4, ... K), O_k, its standard error over
  questions ``sqrt(O_k (1 - O_k) / n)`` and the part of it that the k draws themselves make (what drawing the k
  samples anew would move O_k by, on these questions), and the change in O_k detectable at the pilot's n, with
  the questions ``effect`` needs there. The draws' part comes from the curve alone: a question reached with
  probability ``pi(k) = 1 - (1 - p)^k`` has variance ``pi(k) (1 - pi(k)) = pi(2k) - pi(k)`` (since ``(1 -
  pi(k))^2 = 1 - pi(2k)``), so the draws' standard error of O_k is ``sqrt((O_2k - O_k) / n)``, unbiased from the
  unbiased pass@k and defined up to k = K/2. It shrinks toward 0 as k grows: every question's reach settles.

The spread each test needs comes from the pilot. A comparison measures it: the share of questions whose
outcome differs between the two checkpoints (D; O_k at each k: the mean over questions of ``pi_b (1 - pi_t) +
pi_t (1 - pi_b)``, which at k = K is the measured share that entered or left the reachable set) and the standard
deviation of the per-question pass@1 differences. One audit cannot: its plan assumes the two checkpoints'
outcomes uncorrelated (discordance ``2 p (1 - p)``, the sd of differences ``sqrt(2)`` times the sd of pass@1), an
upper bound when, as for a checkpoint and its descendant, they are positively correlated: its n are at most what
a comparison would need. Either way the spread is held fixed whatever the effect (:mod:`reachlens.power`).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.power import ALPHA, POWER, mcnemar_mde, mcnemar_sample_size, paired_mde, paired_sample_size
from reachlens.store import read_run
from reachlens.studies.auditing import AuditResult
from reachlens.studies.compare import Comparison
from reachlens.studies.metrics import budget_grid, pass_at_k_matrix
from reachlens.tasks import load_task, loader_name

__all__ = ["PowerPlan", "SIZES", "plan"]

SIZES = (100, 300, 1000)
"""The numbers of questions at which a plan gives the detectable effect (beside the task's full split)."""


@dataclass(frozen=True)
class PowerPlan:
    """A plan made from a pilot: :func:`plan` says how each number is computed."""

    pilot: str
    """The pilot: its directory, or what it is (``"base -> trained"``) when given in memory."""
    kind: str
    """``"audit"`` (one checkpoint) or ``"comparison"`` (two)."""
    models: tuple[str, ...]
    """The pilot's model specs."""
    task: str
    """The pilot's task and split, e.g. ``"arith_hard (test)"``."""
    n: int
    """The pilot's questions."""
    k_pilot: int
    """The pilot's K."""
    k: int
    """The budget of the O_K row (the pilot's K unless asked for less)."""
    effect: float
    """The change whose question count ``questions`` gives (a rate's change, e.g. 0.03 for 3 points)."""
    power: float
    alpha: float
    full_n: int | None
    """The task's full split (None: unknown; give it as ``full_n=``)."""
    quantities: pd.DataFrame = field(repr=False)
    """One row per quantity (``D``, ``O_K``, ``pass@1``): ``quantity, test, spread`` (``discordance`` or ``sd``),
    ``value``, ``measured`` (False: assumed uncorrelated), ``questions`` (to detect ``effect``; a change larger
    than the discordance planned as questions all moving one way; NaN: nothing varies), then ``n=N`` columns:
    the detectable effect at N."""
    budget: pd.DataFrame = field(repr=False)
    """One row per k of the pilot's pass@k curve: ``k, O_k, se, se_draws`` (NaN past K/2), ``discordance``,
    ``mde`` (the change in O_k detectable at the pilot's n) and ``questions`` (to detect ``effect`` in O_k)."""

    @property
    def sizes(self) -> list[int]:
        """The n of the ``n=N`` columns, increasing (the full split's among them when known)."""
        return [int(c[2:]) for c in self.quantities.columns if c.startswith("n=")]

    def to_dict(self) -> dict[str, Any]:
        """The plan as plain values (NaN as None): what ``reachlens plan --json`` prints."""
        head = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("quantities", "budget")}

        def rows(df: pd.DataFrame) -> list[dict[str, Any]]:
            return [{k: (None if isinstance(v, float) and math.isnan(v) else v.item() if isinstance(v, np.generic)
                         else v) for k, v in r.items()} for r in df.to_dict("records")]

        return {**head, "models": list(self.models), "sizes": self.sizes, "quantities": rows(self.quantities),
                "budget": rows(self.budget)}


def plan(pilot: AuditResult | Comparison | str | os.PathLike, *, effect: float = 0.03, power: float = POWER,
         k: int | None = None, alpha: float = ALPHA, sizes: tuple[int, ...] = SIZES, full_n: int | None = None,
         data: str | os.PathLike | None = None) -> PowerPlan:
    """The questions a comparison needs, and the effect it can detect, from a pilot audit or comparison.

    Args:
        pilot: an audit or a comparison (or its directory).
        effect: the change to detect (a difference of rates, e.g. 0.03).
        power: the power of the tests.
        alpha: their two-sided level.
        k: the budget of the O_K row, at most the pilot's K (default: the pilot's K).
        sizes: the n at which to give the detectable effect; the task's full split is added.
        full_n: the task's full split; by default read from the task (a generated task, or a hub task in the
            local cache).
        data: the pilot's data file, for a task read from a file (its full split is counted from it).

    >>> p = plan("runs/cmp", effect=0.05)  # doctest: +SKIP
    >>> p.quantities.set_index("quantity").loc["D", "questions"]  # doctest: +SKIP
    """
    for name, value, example in (("effect", effect, "0.03 for 3 points"), ("power", power, "0.8"),
                                 ("alpha", alpha, "0.05")):
        if not 0 < value < 1:
            raise ReachlensError(f"{name}={value!r} must lie in (0, 1), e.g. {example}")
    run = read_run(pilot) if isinstance(pilot, (str, os.PathLike)) else pilot
    if not isinstance(run, (AuditResult, Comparison)):
        raise ReachlensError(f"the pilot {str(pilot)!r} is a {getattr(run, 'kind', type(run).__name__)} run; give an "
                             "audit or a comparison directory (reachlens audit / reachlens compare --out)")
    first = run if isinstance(run, AuditResult) else run.base
    k = first.k if k is None else k
    if not 1 <= k <= first.k:
        raise ReachlensError(f"k={k!r}: the pilot has K={first.k} samples per question; plan at k from 1 to {first.k}")
    full = full_n if full_n is not None else _full_split(first, data)
    shown = sorted(set(sizes) | ({full} if full is not None else set()))
    spread = _spread(run, sorted({*budget_grid(first.k), k}), first.k)
    n = spread["n"]
    rows = []
    for name, test, what, value in (("D", "exact McNemar", "discordance", spread["D"]),
                                    (f"O_{k}", "exact McNemar", "discordance", spread["O"][k][2]),
                                    ("pass@1", "z test", "sd", spread["pass@1"])):
        binary = what == "discordance"
        rows.append({"quantity": name, "test": test, "spread": what, "value": value,
                     "measured": isinstance(run, Comparison),
                     "questions": _needed(effect, value, binary, power, alpha),
                     **{f"n={m}": _mde(m, value, binary, power, alpha) for m in shown}})
    quantities = pd.DataFrame(rows)
    budget = pd.DataFrame([{"k": kk, "O_k": o, "se": math.sqrt(o * (1 - o) / m) if m else math.nan,
                            "se_draws": draws, "discordance": psi, "mde": _mde(n, psi, True, power, alpha),
                            "questions": _needed(effect, psi, True, power, alpha)}
                           for kk, (o, m, psi, draws) in spread["O"].items()])
    where = str(pilot) if isinstance(pilot, (str, os.PathLike)) else " -> ".join(_models(run))
    return PowerPlan(where, "audit" if isinstance(run, AuditResult) else "comparison", tuple(_models(run)),
                     f"{first.protocol.task} ({first.protocol.split})", n, first.k, k, effect, power, alpha, full,
                     quantities, budget)


def _models(run: AuditResult | Comparison) -> list[str]:
    sides = [run] if isinstance(run, AuditResult) else [run.base, run.trained]
    return [str(r.model.get("spec")) for r in sides]


def _needed(effect: float, value: float, binary: bool, power: float, alpha: float) -> float:
    """Questions to detect ``effect`` (NaN: the spread is undefined, or, for a mean, 0)."""
    if math.isnan(value) or (not binary and value == 0):
        return math.nan
    if binary:
        return float(mcnemar_sample_size(effect, value, power=power, alpha=alpha))
    return float(paired_sample_size(effect, value, power=power, alpha=alpha))


def _mde(n: int, value: float, binary: bool, power: float, alpha: float) -> float:
    if math.isnan(value):
        return math.nan
    return (mcnemar_mde if binary else paired_mde)(n, value, power=power, alpha=alpha)


def _spread(run: AuditResult | Comparison, ks: list[int], k_max: int) -> dict[str, Any]:
    """``n``; D's discordance; per k, (O_k of the first side, the questions defined there, O_k's discordance,
    the draws' standard error of O_k); pass@1's sd of differences. A comparison measures the spreads; one audit's
    are those of uncorrelated checkpoints."""
    q = run.questions
    grid = sorted({*ks, *(2 * k for k in ks if 2 * k <= k_max)})
    single = isinstance(run, AuditResult)
    if single:
        first = other = pass_at_k_matrix(q["n_scored"], q["n_correct"], grid)
        d = float(np.mean(q["realized"].astype(bool)))
        out: dict[str, Any] = {"D": 2 * d * (1 - d), "pass@1": math.sqrt(2) * float(np.nanstd(first[:, 0], ddof=1))}
    else:
        first = pass_at_k_matrix(q["base_n_scored"], q["base_n_correct"], grid)
        other = pass_at_k_matrix(q["trained_n_scored"], q["trained_n_correct"], grid)
        out = {"D": float(np.mean(q["base_realized"].astype(bool) != q["trained_realized"].astype(bool))),
               "pass@1": float(np.nanstd(other[:, 0] - first[:, 0], ddof=1))}
    out["n"], out["O"] = len(q), {}
    for k in ks:
        p, t = first[:, grid.index(k)], other[:, grid.index(k)]
        defined, both = ~np.isnan(p), ~np.isnan(p) & ~np.isnan(t)
        o = float(p[defined].mean()) if defined.any() else math.nan
        if single:
            psi = 2 * o * (1 - o)  # uncorrelated outcomes: an upper bound for positively correlated checkpoints
        else:  # each question's chance that the two sides' reach differs, drawing the k samples anew on each
            psi = float(np.mean(p[both] * (1 - t[both]) + t[both] * (1 - p[both]))) if both.any() else math.nan
        draws = math.nan
        if 2 * k <= k_max:  # pi(k) (1 - pi(k)) = pi(2k) - pi(k), question by question
            var = first[:, grid.index(2 * k)] - p
            draws = math.sqrt(max(0.0, float(np.nanmean(var))) / int(np.sum(~np.isnan(var))))
        out["O"][k] = (o, int(defined.sum()), psi, draws)
    return out


def _full_split(audit: AuditResult, data: str | os.PathLike | None) -> int | None:
    """The number of questions in the pilot's task split: read again from ``data``, or from the generator the
    pilot's data identity names (a hub task from the local cache); None when it cannot be read."""
    ident = audit.data or {}
    name = ident.get("generator") or loader_name(audit.protocol.task)
    if data is None and "generator" not in ident:
        return None  # a task read from a file the record names only by its hash: data=PATH reads it
    try:
        task = load_task(name, None if data is None else Path(data), split=audit.protocol.split,
                         seed=int(ident.get("seed", 0)), **dict(ident.get("options") or {}))
    except ReachlensError:
        return None
    return len(task)
