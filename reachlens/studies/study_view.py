"""A study's view model: audits read as one study, and every table of its report.

:class:`StudyView` joins the pairs of a plan question by question (:func:`~reachlens.studies.compare.compare`)
and derives every table the report shows: the headline (each pair's deltas with paired intervals, McNemar
and Holm p), the checkpoints, pass@k differences and crossovers, the trajectory over training, and the
controls (budget, prompt format, temperature, truncation, length). It schedules nothing and reads nothing
from disk: a training study is one (:class:`~reachlens.studies.training_audit.TrainingAudit`), and so are one
audit, a comparison, or audit directories given by hand (:meth:`StudyView.of_audit`,
:meth:`StudyView.of_comparison`, :meth:`StudyView.of_audits`).

Every delta carries its test: the exact McNemar p of its discordant counts, a paired bootstrap interval
over questions, and, because a study tests several pairs at once, the p-value Holm-adjusted over the
study's pairs (:meth:`StudyView.headline`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.studies.auditing import AuditResult
from reachlens.studies.trace_compare import VERIFIED_DELTAS, verified_row
from reachlens.studies.trace_reach import trace_figures
from reachlens.studies.compare import Comparison, compare, crossovers, delta_row, truncation_parity
from reachlens.studies.controls import left_reachable, length_table, temperature_table
from reachlens.studies.metrics import pass_at_k_matrix
from reachlens.stats import N_BOOT, holm, paired_bootstrap_ci
from reachlens.studies.study_plan import StudyPlan

__all__ = ["StudyView"]


def _selection_columns(r: AuditResult) -> dict[str, float]:
    """An audit's maj_K with its Wilson interval and its selection gap with its paired bootstrap interval."""
    gap = r.selection_gap()
    return {"maj_K": r.maj_K, "maj_K_lo": r.maj_K_ci[0], "maj_K_hi": r.maj_K_ci[1],
            "selection_gap": gap.gap, "selection_gap_lo": gap.gap_ci[0], "selection_gap_hi": gap.gap_ci[1]}


def _verified_columns(r: AuditResult) -> dict[str, float]:
    """An audit's lucky-guess null of O_K and, once trace-graded, its D^trace, O_K^trace, maj_K^trace (else NaN)."""
    null = r.lucky_null()
    t = trace_figures(r.questions, r.samples, r.trace, r.k)
    return {"O_K_null": null.O_K_null, "O_K_null_p95": null.O_K_null_p95,
            **{key: t.get(key, math.nan) for key in ("D_trace", "O_K_trace", "maj_K_trace", "checkable_share",
                                                     "O_K_minus_O_K_trace")}, "trace_grader": t.get("trace_grader")}



@dataclass(frozen=True)
class StudyView:
    """Audits read as one study: their pairs' joins, every table of the report, the controls.

    Made from any run the report renders: a training study (:class:`~reachlens.studies.training_audit.TrainingAudit`
    is one), one audit (:meth:`of_audit`), a comparison (:meth:`of_comparison`) or audit directories
    (:meth:`of_audits`, the first the base of every other).
    """

    plan: StudyPlan
    """Which checkpoints, pairs and controls (names, order, margins)."""
    audits: dict[str, AuditResult]
    """The main audit of each checkpoint, by name."""
    extended: dict[str, AuditResult] = field(default_factory=dict)
    """The budget control's audits at ``plan.extended_k``, by checkpoint."""
    formats: dict[str, AuditResult] = field(default_factory=dict)
    """The prompt-format control's audits in each checkpoint's native format, by checkpoint."""
    reprobes: dict[tuple[str, str], dict[float, AuditResult]] = field(default_factory=dict)
    """Per pair, the temperature control's re-probes of its left questions, by temperature."""
    longer: dict[str, AuditResult] = field(default_factory=dict)
    """The length control's audits at ``plan.length_max_new_tokens``, by checkpoint."""

    @property
    def protocol(self) -> Protocol:
        """The protocol every main audit ran under, resolved against the task (explicit prompt format,
        stop strings and grader), as stored in the audit directories; the plan's when none is done yet."""
        return next((r.protocol for r in self.audits.values()), self.plan.protocol)

    def comparisons(self) -> dict[tuple[str, str], Comparison]:
        """Each pair's question-by-question join (made once per study object; every table reads it)."""
        return dict(self._comparisons)

    @functools.cached_property
    def _comparisons(self) -> dict[tuple[str, str], Comparison]:
        return {(a, b): compare(self.audits[a], self.audits[b]) for a, b in self.plan.pairs
                if a in self.audits and b in self.audits}

    def summary(self) -> dict[str, Any]:
        """Each checkpoint's D, O_K and maj_K with 95 % Wilson intervals (and O_2K of the budget control), its
        selection gap (O_K - maj_K, paired bootstrap interval), truncation shares, lucky-guess null of O_K
        (``O_K_null``, ``O_K_null_p95``, ``O_K_minus_null`` with its interval) and verified figures (``D_trace``,
        ``O_K_trace``, ...; NaN when not trace-graded); each pair's fate counts and deltas with their paired
        intervals, McNemar p and Holm p (over :attr:`holm_family`), by answers and by verified solutions
        (:meth:`verified_headline`)."""
        audits = {name: {"D": r.D, "D_ci": list(r.D_ci), "O_K": r.O_K, "O_K_ci": list(r.O_K_ci), "k": r.k,
                         "maj_K": r.maj_K, "maj_K_ci": list(r.maj_K_ci), "selection_gap": r.selection_gap().gap,
                         "selection_gap_ci": list(r.selection_gap().gap_ci),
                         "truncated_samples": r.truncated_samples, "truncated_deployed": r.truncated_deployed,
                         **_verified_columns(r), "O_K_minus_null": r.lucky_null().O_K_minus_null,
                         "O_K_minus_null_ci": list(r.lucky_null().O_K_minus_null_ci),
                         **({"O_2K": self.extended[name].O_K} if name in self.extended else {})}
                  for name, r in self.audits.items()}
        verified = {row.pop("pair"): row for row in self.verified_headline().to_dict("records")}
        pairs = {}
        for row in self.headline().to_dict("records"):
            name = row.pop("pair")
            pairs[name] = {**row, **verified.get(name, {})}
        return {"audits": audits, "pairs": pairs, "holm_family": self.holm_family, "bootstrap_resamples": N_BOOT}

    def headline(self) -> pd.DataFrame:
        """Per pair: D and O_K on both sides, each delta with its paired interval and tests.

        ``delta_D_lo, delta_D_hi`` (and ``delta_O_K_*``, ``delta_maj_K_*``) are paired bootstrap 95 % intervals
        over questions, ``delta_D_mde`` (and ``delta_O_K_mde``, ``delta_maj_K_mde``) the minimum detectable effect
        of its test at 80 % power (:func:`~reachlens.power.detectable`); ``p_realized`` is the exact
        McNemar p of gained vs lost, ``p_reachable`` that of entered vs left, ``p_majority`` that of majority's
        test (``majority_test``); ``*_holm`` is that p Holm-adjusted over the pairs of this study (one family per
        column: see :attr:`holm_family`).
        """
        df = pd.DataFrame([{"pair": f"{a} -> {b}", **delta_row(c.summary())} for (a, b), c in self.comparisons().items()])
        if len(df):
            df.insert(df.columns.get_loc("p_realized") + 1, "p_realized_holm", holm(df["p_realized"].tolist()))
            df.insert(df.columns.get_loc("p_reachable") + 1, "p_reachable_holm", holm(df["p_reachable"].tolist()))
            df.insert(df.columns.get_loc("p_majority") + 1, "p_majority_holm", holm(df["p_majority"].tolist()))
        return df

    def verified_headline(self) -> pd.DataFrame:
        """Per pair: the verified figures (:func:`verified_row`: D^trace and O_K^trace on both sides, each delta with
        its paired interval, MDE and exact McNemar p, both lucky-guess nulls); ``p_*_holm`` Holm-adjusted over the
        pairs as in :meth:`headline` (NaN for a pair that is not trace-graded, left out of the family)."""
        df = pd.DataFrame([{"pair": f"{a} -> {b}", **verified_row(c.summary())} for (a, b), c in self.comparisons().items()])
        for key, _, _ in VERIFIED_DELTAS if len(df) else ():
            p = df[f"p_{key}"].astype(float)
            adjusted = pd.Series(math.nan, index=df.index)
            if p.notna().any():
                adjusted[p.notna()] = holm(p[p.notna()].tolist())
            df.insert(df.columns.get_loc(f"p_{key}") + 1, f"p_{key}_holm", adjusted)
        return df

    @property
    def holm_family(self) -> str:
        """What the headline's Holm adjustment corrects over."""
        n = len(self.comparisons())
        return (f"the {n} pair{'s' if n != 1 else ''} of this study ({', '.join(f'{a} -> {b}' for a, b in self.comparisons())}), "
                "separately for the realized, the reachable and the majority test")

    def checkpoints(self) -> pd.DataFrame:
        """Per checkpoint: D, O_K and maj_K (majority over the K samples, ties averaged) with 95 % Wilson
        intervals, the selection gap O_K - maj_K with its paired 95 % bootstrap interval, and the shares of
        samples and deployed outputs that stopped at ``max_new_tokens``."""
        rows = []
        for name, r in self.audits.items():
            (d_lo, d_hi), (o_lo, o_hi) = r.D_ci, r.O_K_ci
            rows.append({"model": name, "n": r.n, "D": r.D, "D_lo": d_lo, "D_hi": d_hi, "O_K": r.O_K,
                         "O_K_lo": o_lo, "O_K_hi": o_hi, **_selection_columns(r), **_verified_columns(r),
                         "truncated_samples": r.truncated_samples, "truncated_deployed": r.truncated_deployed})
        return pd.DataFrame(rows)

    def pass_at_k_deltas(self) -> pd.DataFrame:
        """Per pair and k: pass@k on both sides, the difference with its paired 95 % bootstrap interval,
        the sign-flip p and that p Holm-adjusted over the ks of the pair."""
        frames = [c.pass_at_k_curve().assign(pair=f"{a} -> {b}") for (a, b), c in self.comparisons().items()]
        if not frames:
            return pd.DataFrame(columns=["pair", "k", "base", "trained", "delta", "delta_lo", "delta_hi", "p", "p_holm"])
        df = pd.concat(frames, ignore_index=True)
        return df[["pair"] + [c for c in df.columns if c != "pair"]]

    def unreachability(self) -> pd.DataFrame:
        """Per pair: the questions that left the reachable set and the distribution of their
        unreachability bounds (the one-sided 95 % upper limit on the descendant's per-sample rate)."""
        rows = []
        for (a, b), c in self.comparisons().items():
            lb = c.left_bounds()
            rows.append({"pair": f"{a} -> {b}", "left": lb["n"], "K": c.base.k, "bound_min": lb["min"],
                         "bound_median": lb["median"], "bound_max": lb["max"]})
        return pd.DataFrame(rows)

    def pass_at_k_crossovers(self) -> pd.DataFrame:
        """Per pair: pass@1 and pass@K on both sides, the ks where the curves cross (``none``: they do not),
        and those of them whose new order is outside noise (the paired 95 % bootstrap interval of the
        difference at that k excludes 0)."""
        rows = []
        for (a, b), c in self.comparisons().items():
            curve = c.pass_at_k_curve()
            first, last = curve.iloc[0], curve.iloc[-1]
            rows.append({"pair": f"{a} -> {b}", "pass@1_base": first["base"], "pass@1_trained": first["trained"],
                         "K": int(last["k"]), "pass@K_base": last["base"], "pass@K_trained": last["trained"],
                         "crossover_k": ", ".join(map(str, crossovers(curve))) or "none",
                         "outside_noise": ", ".join(map(str, crossovers(curve, outside_noise=True))) or "none"})
        return pd.DataFrame(rows)

    def budget_control(self) -> pd.DataFrame:
        """O_K and O_2K per checkpoint of the pairs (from the same seed stream)."""
        rows = []
        for name, r in self.audits.items():
            if name not in self.plan.paired_models:
                continue
            e = self.extended.get(name)
            rows.append({"model": name, "K": r.k, "O_K": r.O_K, "K2": e.k if e else None,
                         "O_2K": e.O_K if e else math.nan, "D": r.D})
        return pd.DataFrame(rows)

    def format_control(self) -> pd.DataFrame:
        """Per pair with a native format: D under the shared and the native prompt, gain retained.

        ``D_base_in_native`` is the parent under the descendant's native format when the study audited
        it so (a parent trained in that format itself), else NaN: for such a pair the like-for-like
        comparison is ``D_base_in_native`` against ``D_trained_native``.
        """
        rows = []
        for a, b in self.plan.pairs:
            fmt = self.plan.native_formats.get(b)
            if fmt is None or a not in self.audits or b not in self.audits:
                continue
            native = self.formats.get(b) if fmt != self.audits[b].protocol.prompt_format else self.audits[b]
            if native is None:
                continue
            d_base, d_shared, d_native = self.audits[a].D, self.audits[b].D, native.D
            gain_native = d_native - d_base
            parent_native = self.formats.get(a)
            rows.append({"pair": f"{a} -> {b}", "shared_format": self.audits[b].protocol.prompt_format,
                         "native_format": fmt, "D_base": d_base, "D_trained_shared": d_shared,
                         "D_trained_native": d_native,
                         "gain_retained": (d_shared - d_base) / gain_native if gain_native else math.nan,
                         "D_base_in_native": parent_native.D if parent_native is not None
                         and parent_native.protocol.prompt_format == fmt else math.nan})
        return pd.DataFrame(rows)

    def temperature_control(self) -> pd.DataFrame:
        """Per pair with questions that left the reachable set: temperature x (n re-probed, n reachable
        again, share, 95 % Wilson interval); the first row of each pair is the audit's own temperature."""
        frames = []
        for (a, b), c in self.comparisons().items():
            runs = self.reprobes.get((a, b))
            if runs or (self.plan.control_temperatures and left_reachable(c)):
                frames.append(temperature_table(c, runs or {}).assign(pair=f"{a} -> {b}"))
        if not frames:
            return pd.DataFrame()
        df = pd.concat(frames, ignore_index=True)
        return df[["pair"] + [c for c in df.columns if c != "pair"]]

    def truncation_control(self) -> pd.DataFrame:
        """Per pair: the shares of samples and of deployed outputs cut at ``max_new_tokens``, the gaps
        (descendant - parent) and whether either exceeds the plan's margin."""
        rows = []
        for (a, b), c in self.comparisons().items():
            t = truncation_parity(c.base, c.trained, self.plan.truncation_margin)
            rows.append({"pair": f"{a} -> {b}", "max_new_tokens": t["max_new_tokens"],
                         "samples_base": t["samples_base"], "samples_trained": t["samples_trained"],
                         "samples_gap": t["samples_gap"], "deployed_base": t["deployed_base"],
                         "deployed_trained": t["deployed_trained"], "deployed_gap": t["deployed_gap"],
                         "flagged": t["flagged"]})
        return pd.DataFrame(rows)

    def trajectory(self) -> pd.DataFrame:
        """Realization and reachability over training: one row per audited checkpoint of the plan's
        trajectory, by step.

        Columns ``step, model``; ``D, D_lo, D_hi``, ``O_K, O_K_lo, O_K_hi`` and ``maj_K, maj_K_lo, maj_K_hi``
        (95 % Wilson intervals); ``selection_gap, selection_gap_lo, selection_gap_hi`` (O_K - maj_K, paired 95 %
        bootstrap interval);
        ``pass@1``, ``pass@8`` (unbiased, mean over questions; ``pass@8`` when K >= 8) with ``_lo, _hi``
        (95 % question-bootstrap intervals); and against the first checkpoint (the run's parent):
        ``delta_D``, ``delta_O_K``, ``delta_pass@1`` with paired 95 % bootstrap intervals (``_lo, _hi``),
        ``p`` (exact McNemar for D and O_K, sign-flip for pass@1), ``p_holm`` (Holm-adjusted over the
        run's later steps, one family per quantity) and ``mde`` (the minimum detectable effect of that test at
        80 % power, :func:`~reachlens.power.detectable`). The first row's deltas are 0 with no test (NaN).
        """
        return self._trajectory.copy()

    @functools.cached_property
    def _trajectory(self) -> pd.DataFrame:
        points = sorted((step, name) for name, step in self.plan.trajectory.items() if name in self.audits)
        if not points:
            return pd.DataFrame(columns=["step", "model"])
        ref = self.audits[points[0][1]]
        ks = [k for k in (1, 8) if k <= ref.k]
        rows = []
        for step, name in points:
            r = self.audits[name]
            row = {"step": step, "model": name, "D": r.D, "D_lo": r.D_ci[0], "D_hi": r.D_ci[1],
                   "O_K": r.O_K, "O_K_lo": r.O_K_ci[0], "O_K_hi": r.O_K_ci[1], **_selection_columns(r)}
            q = r.questions
            per_q = pass_at_k_matrix(q["n_scored"], q["n_correct"], ks)
            for j, k in enumerate(ks):
                row[f"pass@{k}"] = float(np.nanmean(per_q[:, j]))
                row[f"pass@{k}_lo"], row[f"pass@{k}_hi"] = paired_bootstrap_ci(per_q[:, j])
            if r is ref:
                for key in ("delta_D", "delta_O_K", "delta_pass@1"):
                    row.update({key: 0.0, f"{key}_lo": math.nan, f"{key}_hi": math.nan, f"{key}_p": math.nan,
                                f"{key}_mde": math.nan})
            else:
                c = compare(ref, r)
                d, first = delta_row(c.summary()), c.pass_at_k_curve().iloc[0]
                for key, p in (("delta_D", "p_realized"), ("delta_O_K", "p_reachable")):
                    row.update({key: d[key], f"{key}_lo": d[f"{key}_lo"], f"{key}_hi": d[f"{key}_hi"], f"{key}_p": d[p],
                                f"{key}_mde": d[f"{key}_mde"]})
                row.update({"delta_pass@1": float(first["delta"]), "delta_pass@1_lo": float(first["delta_lo"]),
                            "delta_pass@1_hi": float(first["delta_hi"]), "delta_pass@1_p": float(first["p"]),
                            "delta_pass@1_mde": float(first["mde"])})
            rows.append(row)
        df = pd.DataFrame(rows)
        for key in ("delta_D", "delta_O_K", "delta_pass@1"):
            later = df[f"{key}_p"].iloc[1:].tolist()
            df[f"{key}_p_holm"] = [math.nan] + (holm(later) if later else [])
        return df

    def length_control(self) -> pd.DataFrame:
        """Per pair rerun at the longer decode: :func:`~reachlens.studies.controls.length_table` rows
        (the audits' length, then the longer one)."""
        frames = []
        for (a, b), c in self.comparisons().items():
            if a in self.longer and b in self.longer:
                frames.append(length_table(c, compare(self.longer[a], self.longer[b])).assign(pair=f"{a} -> {b}"))
        if not frames:
            return pd.DataFrame()
        df = pd.concat(frames, ignore_index=True)
        return df[["pair"] + [c for c in df.columns if c != "pair"]]

    # --- views of other runs ---------------------------------------------------------------------------
    @classmethod
    def of_audit(cls, result: AuditResult, name: str | None = None) -> StudyView:
        """One audit (no pairs): its D, O_K, pass@k and selection gap, the checkpoint named by its model spec."""
        name = name or result.model.get("spec") or (result.location.name if result.location is not None else "audit")
        return cls(StudyPlan({name: result.model.get("spec", name)}, (), result.protocol), {name: result})

    @classmethod
    def of_comparison(cls, comparison: Comparison) -> StudyView:
        """A comparison's two audits as one pair (cut to the comparison's common k)."""
        if comparison.allow:
            raise ReachlensError(f"the comparison lets protocol fields {list(comparison.allow)} differ; the report "
                                 "renders audits under one protocol (see `reachlens compare` for the join itself)")
        return cls.of_results([comparison.base, comparison.trained])

    @classmethod
    def of_audits(cls, dirs: Sequence[str | Path], *, k: int | None = None) -> StudyView:
        """Audit directories as a study: the first is the base, each other one a descendant; ``k`` cuts every
        audit to its first k samples."""
        if len(dirs) < 2:
            raise ReachlensError(f"need at least two audit directories (a base and a descendant), got {len(dirs)}")
        results = [AuditResult.load(d) for d in dirs]
        return cls.of_results([r.restrict_k(k) if k is not None else r for r in results], [Path(d) for d in dirs])

    @classmethod
    def of_results(cls, results: Sequence[AuditResult], paths: Sequence[Path] | None = None) -> StudyView:
        """Audits as a study: the first the base, each other one a descendant; each named by its folder's name
        (its path where two names coincide)."""
        paths = list(paths) if paths is not None else [r.location or Path(r.model.get("spec", f"audit{i}"))
                                                       for i, r in enumerate(results)]
        names = [p.name for p in paths]
        if len(set(names)) < len(names):
            names = [str(p) for p in paths]
        audits = dict(zip(names, results))
        plan = StudyPlan({n: r.model.get("spec", n) for n, r in audits.items()},
                         tuple((names[0], n) for n in names[1:]), results[0].protocol)
        return cls(plan, audits)
