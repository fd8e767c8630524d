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

One module (about 490 lines) because the join, its summary and the tests of its deltas are one concept:
every function here reads the joined question table.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from reachlens.errors import ReachlensError, ReachlensWarning
from reachlens.power import ALPHA, POWER, detectable
from reachlens.protocol import Protocol, ProtocolMismatch
from reachlens.store import Run, RunDir, RunRecord, register_kind, run_differences
from reachlens.studies.auditing import AuditResult
from reachlens.studies.metrics import budget_grid, pass_at_k_matrix, sign_changes
from reachlens.studies.trace_compare import verified_delta
from reachlens.stats import (
    N_BOOT,
    holm,
    mcnemar_exact_p,
    paired_bootstrap_ci,
    paired_permutation_p,
    unreachability_bound,
    wilson_interval,
)

__all__ = ["Comparison", "compare", "crossovers", "delta_row", "majority_delta", "paired_deltas", "propensity_bins",
           "truncation_parity",
           "DEFAULT_BINS",
           "EXEC_FIELDS", "REALIZED_FATES", "REACH_FATES", "TRUNCATION_MARGIN"]

REALIZED_FATES = ("kept", "gained", "lost", "never")
REACH_FATES = ("kept", "entered", "left", "never")
DEFAULT_BINS = (0.0, 0.05, 0.15, 0.35, 1.0)
EXEC_FIELDS = ("dtype", "device")
"""Execution settings that change a result: two audits that differ in one are compared only when ``allow`` names it
(a bfloat16 audit differs from a float32 one in some deployed answers)."""
TRUNCATION_MARGIN = 0.02
"""Truncation parity: a comparison is flagged when the two audits' shares of outputs cut at
``max_new_tokens`` differ by more than this (2 points), samples or deployed outputs."""


def _fate(before: pd.Series, after: pd.Series, names: tuple[str, str, str, str]) -> pd.Series:
    kept, gained, lost, never = names
    out = np.where(before & after, kept, np.where(~before & after, gained, np.where(before & ~after, lost, never)))
    return pd.Series(out, index=before.index, dtype="str")


@register_kind
@dataclass(frozen=True)
class Comparison(Run):
    """The per-question join of two audits and its summary: a run of kind ``comparison``.

    Saved (``save(DIR)``), it holds the join (``questions``), its summary and its two audits, its children: each
    where it is when that is inside the same tree of runs (a training study's audits, by a relative path), else
    saved inside it (``DIR/base``, ``DIR/trained``); so a comparison directory moved or copied elsewhere reads back
    with :func:`~reachlens.store.read_run`, its join as it was written.
    """

    kind: ClassVar[str] = "comparison"
    record_fields: ClassVar[dict[str, tuple[type, ...]]] = {
        "protocol": (dict,), "children.base": (str,), "children.trained": (str,),
        "options.k_cut": (int, type(None)), "options.allow": (list, type(None))}

    base: AuditResult = field(repr=False)
    trained: AuditResult = field(repr=False)
    questions: pd.DataFrame = field(repr=False)
    n_boot: int = N_BOOT
    """Bootstrap resamples behind every interval of this comparison."""
    seed: int = 0
    """Seed of the bootstrap and of the Monte Carlo permutation tests."""
    k_cut: int | None = None
    """The common budget both audits were cut to (None: their own)."""
    allow: tuple[str, ...] = ()
    """Protocol fields and execution settings allowed to differ (a control)."""

    def make_record(self) -> RunRecord:
        """Both audits' models, their protocol and data, and the comparison's options."""
        return RunRecord.new("comparison", self.base.protocol, {"base": self.base.model, "trained": self.trained.model},
                             self.base.data or None, {"k_cut": self.k_cut, "allow": list(self.allow)},
                             exec=_both_exec(self.base.record.exec, self.trained.record.exec))

    def children(self) -> dict[str, Run]:
        return {"base": self.base, "trained": self.trained}

    def tables(self) -> dict[str, pd.DataFrame]:
        return {"questions": self.questions}

    @classmethod
    def read(cls, run: RunDir) -> Comparison:
        """The join it wrote, beside its two audits (its children)."""
        record = run.record()
        o = record.options
        b, t = (Run.read_child(run, side) for side in ("base", "trained"))
        if o["k_cut"] is not None:
            b, t = _cut(b, o["k_cut"]), _cut(t, o["k_cut"])
        return cls(b, t, run.read_table("questions"), k_cut=o["k_cut"], allow=tuple(o["allow"] or ()),
                   record=record, location=run.path)

    def summary(self) -> dict[str, Any]:
        """Counts, rates and deltas of the join, each delta with its paired test and interval.

        Realized (``gained`` vs ``lost``) and reachable (``entered`` vs ``left``) changes carry the exact
        McNemar p-value of their discordant counts (``mcnemar_realized_p``, ``mcnemar_reachable_p``);
        ``delta_D_ci`` and ``delta_O_K_ci`` are paired bootstrap intervals over questions
        (``bootstrap_resamples`` draws, ``bootstrap_seed``, level ``ci_level``); each rate has its Wilson
        interval (``D_base_ci``, ...); ``delta_pass_at_k`` has every k's delta, interval, sign-flip
        p-value and that p Holm-adjusted over the ks of this pair. ``truncation`` compares the shares
        of outputs cut at ``max_new_tokens`` (flagged beyond ``TRUNCATION_MARGIN``); ``left_bound`` is
        the distribution of the trained model's unreachability bounds over the questions that left
        the reachable set. ``maj_K_*`` and ``delta_maj_K`` are majority over the K samples (ties averaged),
        tested as :func:`majority_delta` says. ``delta_D_mde``, ``delta_O_K_mde``, ``delta_maj_K_mde`` and each
        k's ``mde`` are the minimum detectable effects of those tests at this n
        (:func:`~reachlens.power.detectable`: power ``mde_power``, two-sided level ``mde_alpha``): a delta whose
        interval holds 0 rules out effects of that size, not smaller ones.
        """
        return dict(self._summary)

    @functools.cached_property
    def _summary(self) -> dict[str, Any]:
        q = self.questions
        curve = self.pass_at_k_curve()
        return {
            "base": self.base.model.get("spec"), "trained": self.trained.model.get("spec"), "n": len(q),
            "k": self.base.k,
            **paired_deltas(q, n_boot=self.n_boot, seed=self.seed),
            **majority_delta(q, n_boot=self.n_boot, seed=self.seed),
            "delta_pass_at_k": {int(r.k): {"delta": r.delta, "ci": [r.delta_lo, r.delta_hi], "mde": r.mde, "p": r.p,
                                           "p_holm": r.p_holm} for r in curve.itertuples()},
            "holm_family": f"the {len(curve)} ks of this pair's pass@k curve",
            "bootstrap_resamples": self.n_boot, "bootstrap_seed": self.seed, "ci_level": 0.95,
            "mde_power": POWER, "mde_alpha": ALPHA,
            "left_bound": self.left_bounds(),
            "truncation": truncation_parity(self.base, self.trained),
            "protocol_hash": self.base.protocol.hash,
            **verified_delta(self.base, self.trained, n_boot=self.n_boot, seed=self.seed),
        }

    def left_bounds(self) -> dict[str, Any]:
        """The trained model's unreachability bounds over the questions that left the reachable set.

        Each such question has 0 correct of its graded samples after training; its bound (the column
        ``trained_unreachable_bound``) is the one-sided 95 % upper limit on its per-sample success rate.
        ``{"n", "min", "median", "max"}`` of those bounds (NaN when none left): "lost from the ceiling"
        reads as "per-sample rate below ``max`` at this budget".
        """
        b = self.questions.loc[self.questions["reach_fate"] == "left", "trained_unreachable_bound"]
        if not len(b):
            return {"n": 0, "min": math.nan, "median": math.nan, "max": math.nan}
        return {"n": int(len(b)), "min": float(b.min()), "median": float(b.median()), "max": float(b.max())}

    def propensity_bins(self, bins: tuple[float, ...] = DEFAULT_BINS) -> pd.DataFrame:
        return propensity_bins(self.questions, bins)

    def pass_at_k_curve(self, *, n_boot: int | None = None, level: float = 0.95, seed: int | None = None) -> pd.DataFrame:
        """Both checkpoints' pass@k at k = 1, 2, 4, ... K and their difference, tested at every k.

        Columns ``k, base, trained, delta`` (trained - base, each the mean over the questions defined at
        that k, as :meth:`AuditResult.pass_at_k_curve`), ``delta_lo, delta_hi`` (the ``level`` percentile
        interval of the mean per-question difference, resampling questions: ``n_boot`` draws, ``seed``;
        the comparison's own by default), ``mde`` (the smallest mean difference that test detects at 80 %
        power, :func:`~reachlens.power.detectable`), ``p`` (two-sided sign-flip test of the mean per-question
        difference) and ``p_holm`` (``p`` Holm-adjusted over the ks of this table).
        """
        if n_boot is None and seed is None and level == 0.95:
            return self._curve.copy()
        return self._pass_at_k(self.n_boot if n_boot is None else n_boot, level, self.seed if seed is None else seed)

    @functools.cached_property
    def _curve(self) -> pd.DataFrame:
        return self._pass_at_k(self.n_boot, 0.95, self.seed)

    def _pass_at_k(self, n_boot: int, level: float, seed: int) -> pd.DataFrame:
        q = self.questions
        ks = budget_grid(self.base.k)
        b = pass_at_k_matrix(q["base_n_scored"], q["base_n_correct"], ks)
        t = pass_at_k_matrix(q["trained_n_scored"], q["trained_n_correct"], ks)
        rows = []
        for j, k in enumerate(ks):
            if np.isnan(b[:, j]).all() or np.isnan(t[:, j]).all():
                continue
            d = t[:, j] - b[:, j]
            lo, hi = paired_bootstrap_ci(d, n_boot=n_boot, level=level, seed=seed)
            base, trained = float(np.nanmean(b[:, j])), float(np.nanmean(t[:, j]))
            rows.append({"k": k, "base": base, "trained": trained, "delta": trained - base,
                         "delta_lo": lo, "delta_hi": hi, "mde": detectable(d, binary=False),
                         "p": paired_permutation_p(d, seed=seed)})
        out = pd.DataFrame(rows, columns=["k", "base", "trained", "delta", "delta_lo", "delta_hi", "mde", "p"])
        out["p_holm"] = holm(out["p"].tolist())
        return out

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


def paired_deltas(q: pd.DataFrame, *, n_boot: int = N_BOOT, seed: int = 0) -> dict[str, Any]:
    """The realized and reachable halves of :meth:`Comparison.summary` from a join's rows (any subset of them: the
    viewer's filtered questions): ``n``, each side's D and O_K with its Wilson interval, ``delta_D`` and
    ``delta_O_K`` with their paired bootstrap intervals and minimum detectable effects, the McNemar counts and
    exact p of each (``gained``/``lost``, ``entered``/``left``), and how many gains the base could already reach."""
    n = len(q)
    gained = q["realized_fate"] == "gained"
    n_gained, n_lost = int(gained.sum()), int((q["realized_fate"] == "lost").sum())
    n_entered, n_left = int((q["reach_fate"] == "entered").sum()), int((q["reach_fate"] == "left").sum())
    counts = {col: int(q[col].sum()) for col in ("base_realized", "trained_realized", "base_reachable",
                                               "trained_reachable")}
    rate = {col: c / n if n else math.nan for col, c in counts.items()}
    ci = {col: list(wilson_interval(c, n)) for col, c in counts.items()}
    d_real = (q["trained_realized"].astype(float) - q["base_realized"].astype(float)).to_numpy()
    d_reach = (q["trained_reachable"].astype(float) - q["base_reachable"].astype(float)).to_numpy()
    return {
        "n": n,
        "D_base": rate["base_realized"], "D_base_ci": ci["base_realized"],
        "D_trained": rate["trained_realized"], "D_trained_ci": ci["trained_realized"],
        "delta_D": rate["trained_realized"] - rate["base_realized"],
        "delta_D_ci": list(paired_bootstrap_ci(d_real, n_boot=n_boot, seed=seed)),
        "delta_D_mde": detectable(d_real),
        "gained": n_gained, "lost": n_lost, "mcnemar_realized_p": mcnemar_exact_p(n_gained, n_lost),
        "net": n_gained - n_lost,
        "O_K_base": rate["base_reachable"], "O_K_base_ci": ci["base_reachable"],
        "O_K_trained": rate["trained_reachable"], "O_K_trained_ci": ci["trained_reachable"],
        "delta_O_K": rate["trained_reachable"] - rate["base_reachable"],
        "delta_O_K_ci": list(paired_bootstrap_ci(d_reach, n_boot=n_boot, seed=seed)),
        "delta_O_K_mde": detectable(d_reach),
        "entered": n_entered, "left": n_left, "mcnemar_reachable_p": mcnemar_exact_p(n_entered, n_left),
        "gained_from_base_reachable": int((gained & q["base_reachable"]).sum()),
        "gained_outside_base_reachable": int((gained & ~q["base_reachable"]).sum()),
        "all_gains_base_reachable": bool((q.loc[gained, "base_reachable"]).all()),
    }


def majority_delta(q: pd.DataFrame, *, n_boot: int = N_BOOT, seed: int = 0) -> dict[str, Any]:
    """maj_K on both sides and its delta with a paired interval and test, from a join's ``base_majority`` and
    ``trained_majority`` (each question's majority correctness over its K samples, ties averaged; NaN: no sample
    graded).

    ``maj_K_base``/``maj_K_trained`` are each side's mean over its defined questions with a Wilson interval;
    ``delta_maj_K`` the mean per-question difference over the questions defined on both sides (the difference
    of the two when every question is), with its paired bootstrap interval and ``delta_maj_K_mde``, the minimum
    detectable effect of its test (:func:`~reachlens.power.detectable`). ``majority_p`` is the exact
    McNemar p of the questions majority gained against those it lost when every majority is 0 or 1
    (``majority_test`` ``"mcnemar"``), else, with a tie's fractional correctness, the sign-flip test of the
    per-question differences (``"sign-flip"``).
    """
    b, t = q["base_majority"].to_numpy(dtype=float), q["trained_majority"].to_numpy(dtype=float)
    out: dict[str, Any] = {}
    for side, v in (("base", b), ("trained", t)):
        v = v[~np.isnan(v)]
        out[f"maj_K_{side}"] = float(v.mean()) if len(v) else math.nan
        out[f"maj_K_{side}_ci"] = list(wilson_interval(float(v.sum()), len(v)))
    both = ~np.isnan(b) & ~np.isnan(t)
    d = np.where(both, t - b, np.nan)
    out["delta_maj_K"] = float(d[both].mean()) if both.any() else math.nan
    out["delta_maj_K_ci"] = list(paired_bootstrap_ci(d, n_boot=n_boot, seed=seed))
    whole = bool(np.isin(b[both], (0.0, 1.0)).all() and np.isin(t[both], (0.0, 1.0)).all())
    out["delta_maj_K_mde"] = detectable(d, binary=whole)
    if whole:
        gained, lost = int(np.sum(d[both] > 0)), int(np.sum(d[both] < 0))
        out.update(majority_test="mcnemar", majority_p=mcnemar_exact_p(gained, lost))
    else:
        out.update(majority_test="sign-flip", majority_p=paired_permutation_p(d, seed=seed))
    return out


def delta_row(s: dict[str, Any]) -> dict[str, Any]:
    """A :meth:`Comparison.summary` as one flat row: both sides' D, O_K and maj_K, each delta with its paired
    interval, minimum detectable effect (``*_mde``) and test (McNemar p; for maj_K the test :func:`majority_delta`
    names), the fate counts. The one flattening every table of deltas uses (a study's headline, its
    trajectory, the length control)."""
    return {"D_base": s["D_base"], "D_trained": s["D_trained"], "delta_D": s["delta_D"],
            "delta_D_lo": s["delta_D_ci"][0], "delta_D_hi": s["delta_D_ci"][1], "delta_D_mde": s["delta_D_mde"],
            "gained": s["gained"], "lost": s["lost"],
            "p_realized": s["mcnemar_realized_p"], "O_K_base": s["O_K_base"], "O_K_trained": s["O_K_trained"],
            "delta_O_K": s["delta_O_K"], "delta_O_K_lo": s["delta_O_K_ci"][0], "delta_O_K_hi": s["delta_O_K_ci"][1],
            "delta_O_K_mde": s["delta_O_K_mde"],
            "entered": s["entered"], "left": s["left"], "p_reachable": s["mcnemar_reachable_p"],
            "maj_K_base": s["maj_K_base"], "maj_K_trained": s["maj_K_trained"], "delta_maj_K": s["delta_maj_K"],
            "delta_maj_K_lo": s["delta_maj_K_ci"][0], "delta_maj_K_hi": s["delta_maj_K_ci"][1],
            "delta_maj_K_mde": s["delta_maj_K_mde"],
            "p_majority": s["majority_p"], "majority_test": s["majority_test"],
            "gained_from_base_reachable": s["gained_from_base_reachable"]}


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
        allow: protocol fields or execution settings (``dtype``, ``device``) allowed to differ (e.g.
            ``("prompt_format",)`` for the format control); any other name is refused, listing them.

    Raises:
        ProtocolMismatch: the protocols differ in a field not in ``allow``, the audits ran in another precision
            or kind of device, were made on different data (data identity or any question's gold), or the
            question sets differ.

    >>> cmp = compare("runs/base", "runs/grpo")  # doctest: +SKIP
    >>> cmp.summary()["gained_from_base_reachable"]  # doctest: +SKIP
    """
    known = [f.name for f in dataclasses.fields(Protocol)] + list(EXEC_FIELDS)
    for name in allow:
        if name not in known:
            raise ReachlensError(f"allow={tuple(allow)!r}: {name!r} is not a protocol field or execution setting; "
                                 f"the fields that may differ are {', '.join(known)}")
    b, t = _as_result(base), _as_result(trained)
    if k is not None:
        b, t = _cut(b, k), _cut(t, k)
    _require_same_protocol(b, t, allow)
    _require_same_exec(b, t, allow)
    _require_same_data(b, t)
    ids_b, ids_t = set(b.questions["question_id"]), set(t.questions["question_id"])
    if ids_b != ids_t:
        raise ProtocolMismatch(
            {"questions": (f"{len(ids_b)} questions", f"{len(ids_t)} questions ({len(ids_b ^ ids_t)} not shared)")},
            what="audits cover different question sets",
        )
    cols = ["question_id", "realized", "reachable", "propensity", "n_correct", "n_scored", "gold"]
    j = b.questions[cols].merge(t.questions[cols], on="question_id", suffixes=("_b", "_t"))
    _require_same_golds(j)
    j = j.rename(columns={"gold_b": "gold"})
    q = pd.DataFrame({
        "question_id": j["question_id"],
        "base_realized": j["realized_b"].astype(bool), "trained_realized": j["realized_t"].astype(bool),
        "base_reachable": j["reachable_b"].astype(bool), "trained_reachable": j["reachable_t"].astype(bool),
        "base_propensity": j["propensity_b"], "trained_propensity": j["propensity_t"],
        "base_n_correct": j["n_correct_b"], "trained_n_correct": j["n_correct_t"],
        "base_n_scored": j["n_scored_b"], "trained_n_scored": j["n_scored_t"], "gold": j["gold"],
    })
    for side in ("base", "trained"):
        # the one-sided 95 % upper bound on the per-sample rate of a question with no correct sample
        q[f"{side}_unreachable_bound"] = np.where(q[f"{side}_n_correct"] == 0,
                                                  unreachability_bound(q[f"{side}_n_scored"].to_numpy()), np.nan)
    q["realized_fate"] = _fate(q["base_realized"], q["trained_realized"], ("kept", "gained", "lost", "never"))
    q["reach_fate"] = _fate(q["base_reachable"], q["trained_reachable"], ("kept", "entered", "left", "never"))
    for side, r in (("base", b), ("trained", t)):  # majority over the K samples, ties averaged (NaN: none graded)
        q[f"{side}_majority"] = q["question_id"].map(r.majority().set_index("question_id")["correct"]).astype(float)
    return Comparison(b, t, q, k_cut=k, allow=tuple(allow))


def _cut(result: AuditResult, k: int) -> AuditResult:
    """``result`` cut to its first k samples, still naming the directory it came from (a saved comparison names it
    and cuts it again when read)."""
    return dataclasses.replace(result.restrict_k(k), location=result.location)


def _require_same_golds(j: pd.DataFrame) -> None:
    """Refuse a join whose two sides give a question different gold answers (different data)."""
    differ = j[j["gold_b"].astype(str) != j["gold_t"].astype(str)]
    if len(differ):
        first = differ.iloc[0]
        raise ProtocolMismatch(
            {"gold": (f"{first['gold_b']!r} for {first['question_id']!r}", repr(first["gold_t"]))},
            what=f"the audits disagree on the gold answer of {len(differ)} of {len(j)} questions (they were "
                 "made on different data)",
            fix="compare audits of the same data file",
        )


def _require_same_protocol(b: AuditResult, t: AuditResult, allow: tuple[str, ...]) -> None:
    """Refuse audits under different protocols, unless ``allow`` names every field that differs."""
    differ = b.protocol.diff(t.protocol, allow)
    if differ:
        raise ProtocolMismatch(differ, fix=f"audit both under one protocol, or compare them as a control "
                                           f"({_allow_hint(differ)})")


def _require_same_exec(b: AuditResult, t: AuditResult, allow: tuple[str, ...]) -> None:
    """Refuse audits run in another precision or on another kind of device, unless ``allow`` names it."""
    eb, et = b.record.exec or {}, t.record.exec or {}
    diffs = {f: (eb[f], et[f]) for f in EXEC_FIELDS if f not in allow and f in eb and f in et
             and "unknown" not in (eb[f], et[f]) and eb[f] != et[f]}
    if diffs:
        raise ProtocolMismatch(diffs, what="the audits ran in different execution settings",
                               fix=f"audit both the same way, or compare them as a control ({_allow_hint(diffs)})")


def _allow_hint(names) -> str:
    """How to allow ``names`` to differ, in Python and on the command line."""
    flags = " ".join(f"--allow {n}" for n in names)
    return f"allow={tuple(names)!r} in Python, {flags} on the command line"


def _both_exec(base: dict | None, trained: dict | None) -> dict | None:
    """The execution settings of a comparison: each side's value, both named where they differ (an allowed
    difference: ``"float32 (base), bfloat16 (trained)"``)."""
    if base is None or trained is None:
        return base if trained is None else trained if base is None else None
    return {k: v if trained.get(k, v) == v else f"{v} (base), {trained[k]} (trained)" for k, v in base.items()}


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
    (count), ``rate`` (NaN for an empty bin) and its 95 % Wilson interval ``rate_lo, rate_hi``.
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
        r_lo, r_hi = wilson_interval(hit, n)
        rows.append({"bin": f"[{lo:.2f}, {hi:.2f}{']' if last else ')'}", "lo": lo, "hi": hi, "n": n,
                     "realized_after": hit, "rate": hit / n if n else math.nan, "rate_lo": r_lo, "rate_hi": r_hi})
    return pd.DataFrame(rows)


def truncation_parity(base: AuditResult, trained: AuditResult, margin: float = TRUNCATION_MARGIN) -> dict[str, Any]:
    """The shares of outputs cut at ``max_new_tokens`` on both sides, their gaps and the flag.

    ``samples_base``/``samples_trained``: share of the K samples that stopped at the length limit;
    ``deployed_base``/``deployed_trained``: the same for the greedy deployed outputs; ``*_gap``:
    trained - base; ``flagged``: either gap exceeds ``margin`` in size, so part of the comparison may be
    a decode-length effect (rerun both at a longer budget: ``reachlens control length``).
    """
    out: dict[str, Any] = {"max_new_tokens": base.protocol.max_new_tokens, "margin": margin}
    for what in ("samples", "deployed"):
        b, t = getattr(base, f"truncated_{what}"), getattr(trained, f"truncated_{what}")
        out.update({f"{what}_base": b, f"{what}_trained": t, f"{what}_gap": t - b})
    out["flagged"] = bool(abs(out["samples_gap"]) > margin or abs(out["deployed_gap"]) > margin)
    return out
