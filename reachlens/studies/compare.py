"""The training audit's join: two audits of one protocol, question by question.

A benchmark delta conflates "can now" with "now does". Joining a base and a trained audit on
``question_id`` separates them. Each question gets a *realized fate* (kept, gained, lost, never) and a
*reach fate* (kept, entered, left, never the K-sample reachable set). The summary counts how many
newly realized questions were already reachable by the base model: if all of them were, training
moved probability mass onto answers the base could already reach (it now *emits* them) rather than
teaching new ones. The base model's propensity (its per-question sample hit rate) on questions it
could reach but did not realize, binned, against the rate of realization after training shows which
questions training converts.

Audits are comparable only under one protocol (the model aside) and on the same data. :func:`compare`
refuses anything else, naming the differing fields: protocol fields, the data identity (the data
file's hash, or the generator and seed) and, question by question, the gold answers; a control that
deliberately differs in one field (the prompt format control) names it in ``allow``. An audit written
before reachlens recorded data identity is compared with a warning, on its golds alone. Budgets may differ only when both are cut to a common ``k``,
which is exact because sample j of a question depends on (seed, question, j) alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import warnings

from reachlens.errors import ReachlensError, ReachlensWarning
from reachlens.protocol import ProtocolMismatch
from reachlens.store import run_differences
from reachlens.studies.auditing import AuditResult
from reachlens.studies.metrics import budget_grid, paired_bootstrap_ci, pass_at_k_matrix, sign_changes

__all__ = ["Comparison", "compare", "crossovers", "propensity_bins", "DEFAULT_BINS", "REALIZED_FATES", "REACH_FATES"]

REALIZED_FATES = ("kept", "gained", "lost", "never")
REACH_FATES = ("kept", "entered", "left", "never")
DEFAULT_BINS = (0.0, 0.05, 0.15, 0.35, 1.0)


def _fate(before: pd.Series, after: pd.Series, names: tuple[str, str, str, str]) -> pd.Series:
    kept, gained, lost, never = names
    out = np.where(before & after, kept, np.where(~before & after, gained, np.where(before & ~after, lost, never)))
    return pd.Series(out, index=before.index, dtype="object")


@dataclass(frozen=True)
class Comparison:
    """The per-question join of two audits and its summary."""

    base: AuditResult = field(repr=False)
    trained: AuditResult = field(repr=False)
    questions: pd.DataFrame = field(repr=False)

    def summary(self) -> dict[str, Any]:
        """D and O_K on both sides, their deltas, the fate counts, and the protocol's hash."""
        q = self.questions
        gained = q["realized_fate"] == "gained"
        return {
            "base": self.base.model.get("spec"), "trained": self.trained.model.get("spec"),
            "n": len(q), "k": self.base.k,
            "D_base": float(q["base_realized"].mean()), "D_trained": float(q["trained_realized"].mean()),
            "delta_D": float(q["trained_realized"].mean() - q["base_realized"].mean()),
            "O_K_base": float(q["base_reachable"].mean()), "O_K_trained": float(q["trained_reachable"].mean()),
            "delta_O_K": float(q["trained_reachable"].mean() - q["base_reachable"].mean()),
            "gained": int(gained.sum()), "lost": int((q["realized_fate"] == "lost").sum()),
            "net": int(gained.sum() - (q["realized_fate"] == "lost").sum()),
            "gained_from_base_reachable": int((gained & q["base_reachable"]).sum()),
            "gained_outside_base_reachable": int((gained & ~q["base_reachable"]).sum()),
            "all_gains_base_reachable": bool((q.loc[gained, "base_reachable"]).all()),
            "entered": int((q["reach_fate"] == "entered").sum()), "left": int((q["reach_fate"] == "left").sum()),
            "protocol_hash": self.base.protocol.hash,
        }

    def propensity_bins(self, bins: tuple[float, ...] = DEFAULT_BINS) -> pd.DataFrame:
        return propensity_bins(self.questions, bins)

    def pass_at_k_curve(self, *, n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> pd.DataFrame:
        """Both checkpoints' pass@k at k = 1, 2, 4, ... K and their difference with a paired interval.

        Columns ``k, base, trained, delta`` (trained - base, each the mean over the questions defined at
        that k, as :meth:`AuditResult.pass_at_k_curve`) and ``delta_lo, delta_hi``: the ``level`` percentile
        interval of the mean per-question difference, resampling questions (``n_boot`` draws, ``seed``).
        """
        q = self.questions
        ks = budget_grid(self.base.k)
        b = pass_at_k_matrix(q["base_n_scored"], q["base_n_correct"], ks)
        t = pass_at_k_matrix(q["trained_n_scored"], q["trained_n_correct"], ks)
        rows = []
        for j, k in enumerate(ks):
            if np.isnan(b[:, j]).all() or np.isnan(t[:, j]).all():
                continue
            lo, hi = paired_bootstrap_ci(t[:, j] - b[:, j], n_boot=n_boot, level=level, seed=seed)
            base, trained = float(np.nanmean(b[:, j])), float(np.nanmean(t[:, j]))
            rows.append({"k": k, "base": base, "trained": trained, "delta": trained - base,
                         "delta_lo": lo, "delta_hi": hi})
        return pd.DataFrame(rows, columns=["k", "base", "trained", "delta", "delta_lo", "delta_hi"])

    def crossovers(self, *, outside_noise: bool = False, **interval) -> list[int]:
        """The ks at which trained - base pass@k changes sign (each the first k of the new sign).

        A trained model ahead at k=1 that the base overtakes at k=64 gives ``[64]``: from that budget on,
        the base reaches more questions than the trained model. With ``outside_noise=True`` only the
        crossovers whose new sign is significant at that k are kept (the paired interval of
        :meth:`pass_at_k_curve`, options passed on, lies wholly on the new side of 0).
        """
        return crossovers(self.pass_at_k_curve(**interval), outside_noise=outside_noise)

    def fate_counts(self) -> pd.DataFrame:
        """Counts of every (realized fate, reach fate) pair."""
        return self.questions.groupby(["realized_fate", "reach_fate"]).size().rename("n").reset_index()


def crossovers(curve: pd.DataFrame, *, outside_noise: bool = False) -> list[int]:
    """The crossovers of a :meth:`Comparison.pass_at_k_curve` table (see :meth:`Comparison.crossovers`)."""
    ks = sign_changes(curve["k"].tolist(), curve["base"].tolist(), curve["trained"].tolist())
    if not outside_noise:
        return ks
    at = curve.set_index("k")
    return [k for k in ks if at.loc[k, "delta_lo"] > 0 or at.loc[k, "delta_hi"] < 0]


def _as_result(a: AuditResult | str | Path) -> AuditResult:
    return a if isinstance(a, AuditResult) else AuditResult.load(a)


def compare(
    base: AuditResult | str | Path,
    trained: AuditResult | str | Path,
    *,
    k: int | None = None,
    allow: tuple[str, ...] = (),
) -> Comparison:
    """Join ``base`` and ``trained`` (audit results or directories) question by question.

    Args:
        k: cut both audits to their first ``k`` samples (required when their budgets differ).
        allow: protocol fields allowed to differ (e.g. ``("prompt_format",)`` for the format control).

    Raises:
        ProtocolMismatch: the protocols differ in a field not in ``allow``, the audits were made on
            different data (data identity or any question's gold), or the question sets differ.

    >>> cmp = compare("runs/base", "runs/grpo")  # doctest: +SKIP
    >>> cmp.summary()["gained_from_base_reachable"]  # doctest: +SKIP
    """
    b, t = _as_result(base), _as_result(trained)
    if k is not None:
        b, t = b.restrict_k(k), t.restrict_k(k)
    b.protocol.require_match(t.protocol, ignore=allow)
    _require_same_data(b, t)
    ids_b, ids_t = set(b.questions["question_id"]), set(t.questions["question_id"])
    if ids_b != ids_t:
        raise ProtocolMismatch(
            {"questions": (f"{len(ids_b)} questions", f"{len(ids_t)} questions ({len(ids_b ^ ids_t)} not shared)")},
            what="audits cover different question sets",
        )
    cols = ["question_id", "realized", "reachable", "propensity", "n_correct", "n_scored", "gold"]
    j = b.questions[cols].merge(t.questions[cols], on="question_id", suffixes=("_b", "_t"))
    differ = j[j["gold_b"].astype(str) != j["gold_t"].astype(str)]
    if len(differ):
        first = differ.iloc[0]
        raise ProtocolMismatch(
            {"gold": (f"{first['gold_b']!r} for {first['question_id']!r}", repr(first["gold_t"]))},
            what=f"the audits disagree on the gold answer of {len(differ)} of {len(j)} questions (they were "
                 "made on different data)",
            fix="compare audits of the same data file",
        )
    j = j.rename(columns={"gold_b": "gold"})
    q = pd.DataFrame({
        "question_id": j["question_id"],
        "base_realized": j["realized_b"].astype(bool), "trained_realized": j["realized_t"].astype(bool),
        "base_reachable": j["reachable_b"].astype(bool), "trained_reachable": j["reachable_t"].astype(bool),
        "base_propensity": j["propensity_b"], "trained_propensity": j["propensity_t"],
        "base_n_correct": j["n_correct_b"], "trained_n_correct": j["n_correct_t"],
        "base_n_scored": j["n_scored_b"], "trained_n_scored": j["n_scored_t"], "gold": j["gold"],
    })
    q["realized_fate"] = _fate(q["base_realized"], q["trained_realized"], ("kept", "gained", "lost", "never"))
    q["reach_fate"] = _fate(q["base_reachable"], q["trained_reachable"], ("kept", "entered", "left", "never"))
    return Comparison(b, t, q)


def _require_same_data(b: AuditResult, t: AuditResult) -> None:
    """Refuse audits of different data; warn when either side's data identity is unknown."""
    if not b.data or not t.data:
        which = " and ".join(n for n, r in (("base", b), ("trained", t)) if not r.data)
        warnings.warn(f"the {which} audit records no data identity (written before reachlens recorded it, or "
                      "of a hand-made task); the audits are matched on question ids and golds only",
                      ReachlensWarning, stacklevel=3)
        return
    diffs, _ = run_differences({"protocol": {}, "model": {}, "data": b.data}, None, None, t.data)
    if diffs:
        raise ProtocolMismatch(diffs, what="the audits were made on different data",
                               fix="compare audits of the same data file (and loader options)")


def propensity_bins(questions: pd.DataFrame, bins: tuple[float, ...] = DEFAULT_BINS) -> pd.DataFrame:
    """Among base-reachable, base-unrealized questions: realization after training per propensity bin.

    Columns: ``bin`` (e.g. ``[0.05, 0.15)``; the last bin is closed), ``n``, ``realized_after``
    (count), ``rate`` (NaN for an empty bin).
    """
    if list(bins) != sorted(bins) or bins[0] != 0.0 or bins[-1] != 1.0:
        raise ReachlensError(f"bins={bins!r} must increase from 0.0 to 1.0")
    pool = questions[questions["base_reachable"] & ~questions["base_realized"]]
    rows = []
    for i, (lo, hi) in enumerate(zip(bins[:-1], bins[1:])):
        last = i == len(bins) - 2
        inside = (pool["base_propensity"] >= lo) & ((pool["base_propensity"] <= hi) if last else (pool["base_propensity"] < hi))
        sel = pool[inside]
        n = len(sel)
        hit = int(sel["trained_realized"].sum())
        rows.append({"bin": f"[{lo:.2f}, {hi:.2f}{']' if last else ')'}", "lo": lo, "hi": hi, "n": n,
                     "realized_after": hit, "rate": hit / n if n else math.nan})
    return pd.DataFrame(rows)
