"""The training audit as one study: audits of several checkpoints, their pairwise joins and controls.

A study directory holds one audit directory per checkpoint (``audits/NAME``), the budget control's
extended audits (``audits/NAME-k{2K}``), the prompt-format control's audits
(``audits/NAME-fmt-{FORMAT}``) and ``study.json``, which names the pairs. Everything in it can be
re-read without a model, and :mod:`reachlens.report` renders it.

Controls:

* **budget**: O_K and O_2K for both checkpoints of each pair. If training only concentrates mass, a
  larger budget shows the base reaching what training "gained" (base O_2K >= trained O_K).
* **prompt format**: the trained model audited under the base model's prompt (``shared``) and under
  its own (``native``); the share of the realization gain retained under the shared prompt is
  ``(D_trained,shared - D_base) / (D_trained,native - D_base)`` (undefined when the native gain is 0).
* **temperature** (:mod:`reachlens.studies.controls`): each pair's questions that left the reachable set,
  re-probed with the descendant at other temperatures, same K and seed stream
  (``controls/temperature/PARENT--NAME/T{t}``).
* **length**: per pair, the shares of outputs cut at ``max_new_tokens``; a pair whose shares differ by
  more than the plan's margin has both checkpoints audited again at a longer decode
  (``audits/NAME-len{N}``).

A **trajectory** (``StudyPlan.trajectory``: checkpoints of one training run by optimizer step, its parent
at step 0) is read as one path: D, O_K, pass@1 and pass@8 at every step with their intervals, and each
step against the first (:meth:`TrainingAudit.trajectory`): realization and reachability over training.
Its checkpoints need not be in any pair; the budget control runs for the checkpoints of the pairs.

Every delta carries its test: the exact McNemar p of its discordant counts, a paired bootstrap
interval over questions, and, because a study tests several pairs at once, the p-value Holm-adjusted
over the study's pairs (:meth:`TrainingAudit.headline`).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.protocol import Protocol
from reachlens.store import RunDir, RunRecord, read_json, write_json
from reachlens.studies.auditing import AuditResult, audit
from reachlens.studies.budget import extend_budget
from reachlens.studies._progress import ProgressBoard
from reachlens.studies.compare import TRUNCATION_MARGIN, Comparison, compare, crossovers, truncation_parity
from reachlens.studies.controls import (
    left_reachable,
    length_table,
    reprobe_left,
    rerun_at_length,
    temperature_table,
)
from reachlens.studies.metrics import pass_at_k_matrix
from reachlens.studies.stats import N_BOOT, holm, paired_bootstrap_ci

__all__ = ["StudyDir", "StudyPlan", "TrainingAudit", "load_training_audit", "pairs_from_dirs", "run_training_audit",
           "single_audit"]


class StudyDir(RunDir):
    """A training audit's run directory: ``run.json``, ``study.json`` (the plan, wall times),
    ``audits/`` (one audit directory per checkpoint and control) and ``controls/`` (the temperature
    control's re-probes)."""

    kind = "training_audit"
    own_names = ("study.json", "audits", "controls")


@dataclass(frozen=True)
class StudyPlan:
    """What a training audit runs."""

    models: dict[str, str]
    """Checkpoint name -> model spec (``zoo:base``, a folder, a hub name)."""
    pairs: tuple[tuple[str, str], ...]
    """(parent, descendant) names to compare."""
    protocol: Protocol
    """The shared protocol (budget K); the budget control extends it to ``budget_k``."""
    n: int | None = None
    """First n questions of the task (all when None)."""
    data: str | None = None
    """Data file for file-based tasks."""
    budget_k: int | None = None
    """Budget of the budget control (typically 2K); None skips it."""
    native_formats: dict[str, str] = field(default_factory=dict)
    """Descendant name -> its native prompt format, for the prompt-format control (skipped when empty)."""
    control_temperatures: tuple[float, ...] = ()
    """Temperatures of the temperature control (each pair's left questions re-probed); () skips it."""
    length_max_new_tokens: int | None = None
    """Decode length of the length control, run for the pairs whose truncation shares differ by more
    than ``truncation_margin``; None skips it."""
    truncation_margin: float = TRUNCATION_MARGIN
    """Truncation parity: the largest gap in the shares of outputs cut at ``max_new_tokens`` left unflagged."""
    trajectory: dict[str, int] = field(default_factory=dict)
    """Checkpoint name -> optimizer step, for the checkpoints of one training run (its parent at step 0):
    the trajectory table and figure (empty: none). Every name must be among ``models``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "control_temperatures", tuple(float(t) for t in self.control_temperatures))
        if any(not t > 0 for t in self.control_temperatures):
            raise ReachlensError(f"control_temperatures={self.control_temperatures!r} must all be > 0")
        if self.length_max_new_tokens is not None and self.length_max_new_tokens <= self.protocol.max_new_tokens:
            raise ReachlensError(f"length_max_new_tokens={self.length_max_new_tokens!r} must exceed the protocol's "
                                 f"max_new_tokens={self.protocol.max_new_tokens}")
        for a, b in self.pairs:
            for name in (a, b):
                if name not in self.models:
                    raise ReachlensError(f"pair ({a!r}, {b!r}) names {name!r}, which is not among the models "
                                     f"{sorted(self.models)}")
        if self.budget_k is not None and self.budget_k <= self.protocol.k:
            raise ReachlensError(f"budget_k={self.budget_k!r} must exceed the protocol's k={self.protocol.k}")
        object.__setattr__(self, "trajectory", dict(self.trajectory))
        for name, step in self.trajectory.items():
            if name not in self.models:
                raise ReachlensError(f"trajectory names {name!r}, which is not among the models {sorted(self.models)}")
            if not isinstance(step, int) or isinstance(step, bool) or step < 0:
                raise ReachlensError(f"trajectory step of {name!r} is {step!r}; steps are integers >= 0")
        if len(set(self.trajectory.values())) < len(self.trajectory):
            raise ReachlensError(f"trajectory={self.trajectory!r} gives two checkpoints the same step")

    @property
    def model_order(self) -> list[str]:
        """Every checkpoint in reading order: those of the pairs as the pairs name them, then the trajectory's
        by step, then any other as ``models`` gives them. Tables, figures and a reloaded study follow it (a
        run record's JSON keeps no key order)."""
        order: list[str] = []
        for name in [*(n for pair in self.pairs for n in pair),
                     *sorted(self.trajectory, key=self.trajectory.__getitem__), *self.models]:
            if name not in order:
                order.append(name)
        return order

    @property
    def paired_models(self) -> list[str]:
        """The checkpoints of the pairs, in :attr:`model_order` (all of them in a study without pairs): those the
        budget control extends and the pass@k chart draws (a trajectory-only checkpoint has its own figure)."""
        paired = {n for pair in self.pairs for n in pair}
        return [n for n in self.model_order if n in paired or not self.pairs]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["protocol"] = self.protocol.to_dict()
        d["pairs"] = [list(p) for p in self.pairs]
        d["control_temperatures"] = list(self.control_temperatures)
        if not self.trajectory:  # studies without one keep the plan (and run record) they always had
            del d["trajectory"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StudyPlan:
        d = dict(d)
        d["protocol"] = Protocol.from_dict(d["protocol"])
        d["pairs"] = tuple(tuple(p) for p in d["pairs"])
        d["control_temperatures"] = tuple(d.get("control_temperatures", ()))
        d["trajectory"] = {name: int(step) for name, step in d.get("trajectory", {}).items()}
        return cls(**d)


@dataclass(frozen=True)
class TrainingAudit:
    """A finished (or partial) study, read back from its directory."""

    plan: StudyPlan
    path: Path
    audits: dict[str, AuditResult]
    extended: dict[str, AuditResult]
    formats: dict[str, AuditResult]
    wall_seconds: dict[str, float]
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
        """Each checkpoint's D and O_K with 95 % Wilson intervals (and O_2K of the budget control) and
        truncation shares; each pair's fate counts and deltas with their paired intervals, McNemar p and
        Holm p (over :attr:`holm_family`)."""
        audits = {name: {"D": r.D, "D_ci": list(r.D_ci), "O_K": r.O_K, "O_K_ci": list(r.O_K_ci), "k": r.k,
                         "truncated_samples": r.truncated_samples, "truncated_deployed": r.truncated_deployed,
                         **({"O_2K": self.extended[name].O_K} if name in self.extended else {})}
                  for name, r in self.audits.items()}
        head = self.headline()
        pairs = {row.pop("pair"): row for row in head.to_dict("records")}
        return {"audits": audits, "pairs": pairs, "holm_family": self.holm_family, "bootstrap_resamples": N_BOOT,
                "wall_seconds": dict(self.wall_seconds)}

    def headline(self) -> pd.DataFrame:
        """Per pair: D and O_K on both sides, each delta with its paired interval and tests.

        ``delta_D_lo, delta_D_hi`` (and ``delta_O_K_*``) are paired bootstrap 95 % intervals over
        questions; ``p_realized`` is the exact McNemar p of gained vs lost, ``p_reachable`` that of
        entered vs left; ``*_holm`` is that p Holm-adjusted over the pairs of this study (one family
        per column: see :attr:`holm_family`).
        """
        rows = []
        for (a, b), c in self.comparisons().items():
            s = c.summary()
            rows.append({"pair": f"{a} -> {b}", "D_base": s["D_base"], "D_trained": s["D_trained"],
                         "delta_D": s["delta_D"], "delta_D_lo": s["delta_D_ci"][0], "delta_D_hi": s["delta_D_ci"][1],
                         "gained": s["gained"], "lost": s["lost"], "p_realized": s["mcnemar_realized_p"],
                         "O_K_base": s["O_K_base"], "O_K_trained": s["O_K_trained"], "delta_O_K": s["delta_O_K"],
                         "delta_O_K_lo": s["delta_O_K_ci"][0], "delta_O_K_hi": s["delta_O_K_ci"][1],
                         "entered": s["entered"], "left": s["left"], "p_reachable": s["mcnemar_reachable_p"],
                         "gained_from_base_reachable": s["gained_from_base_reachable"]})
        df = pd.DataFrame(rows)
        if len(df):
            df.insert(df.columns.get_loc("p_realized") + 1, "p_realized_holm", holm(df["p_realized"].tolist()))
            df.insert(df.columns.get_loc("p_reachable") + 1, "p_reachable_holm", holm(df["p_reachable"].tolist()))
        return df

    @property
    def holm_family(self) -> str:
        """What the headline's Holm adjustment corrects over."""
        n = len(self.comparisons())
        return (f"the {n} pair{'s' if n != 1 else ''} of this study ({', '.join(f'{a} -> {b}' for a, b in self.comparisons())}), "
                "separately for the realized and the reachable test")

    def checkpoints(self) -> pd.DataFrame:
        """Per checkpoint: D and O_K with 95 % Wilson intervals, and the shares of samples and deployed
        outputs that stopped at ``max_new_tokens``."""
        rows = []
        for name, r in self.audits.items():
            (d_lo, d_hi), (o_lo, o_hi) = r.D_ci, r.O_K_ci
            rows.append({"model": name, "n": r.n, "D": r.D, "D_lo": d_lo, "D_hi": d_hi, "O_K": r.O_K,
                         "O_K_lo": o_lo, "O_K_hi": o_hi, "truncated_samples": r.truncated_samples,
                         "truncated_deployed": r.truncated_deployed})
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

        Columns ``step, model``; ``D, D_lo, D_hi`` and ``O_K, O_K_lo, O_K_hi`` (95 % Wilson intervals);
        ``pass@1``, ``pass@8`` (unbiased, mean over questions; ``pass@8`` when K >= 8) with ``_lo, _hi``
        (95 % question-bootstrap intervals); and against the first checkpoint (the run's parent):
        ``delta_D``, ``delta_O_K``, ``delta_pass@1`` with paired 95 % bootstrap intervals (``_lo, _hi``),
        ``p`` (exact McNemar for D and O_K, sign-flip for pass@1) and ``p_holm`` (Holm-adjusted over the
        run's later steps, one family per quantity). The first row's deltas are 0 with no test (NaN).
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
                   "O_K": r.O_K, "O_K_lo": r.O_K_ci[0], "O_K_hi": r.O_K_ci[1]}
            q = r.questions
            per_q = pass_at_k_matrix(q["n_scored"], q["n_correct"], ks)
            for j, k in enumerate(ks):
                row[f"pass@{k}"] = float(np.nanmean(per_q[:, j]))
                row[f"pass@{k}_lo"], row[f"pass@{k}_hi"] = paired_bootstrap_ci(per_q[:, j])
            if r is ref:
                for key in ("delta_D", "delta_O_K", "delta_pass@1"):
                    row.update({key: 0.0, f"{key}_lo": math.nan, f"{key}_hi": math.nan, f"{key}_p": math.nan})
            else:
                c = compare(ref, r)
                s, first = c.summary(), c.pass_at_k_curve().iloc[0]
                row.update({"delta_D": s["delta_D"], "delta_D_lo": s["delta_D_ci"][0], "delta_D_hi": s["delta_D_ci"][1],
                            "delta_D_p": s["mcnemar_realized_p"], "delta_O_K": s["delta_O_K"],
                            "delta_O_K_lo": s["delta_O_K_ci"][0], "delta_O_K_hi": s["delta_O_K_ci"][1],
                            "delta_O_K_p": s["mcnemar_reachable_p"], "delta_pass@1": float(first["delta"]),
                            "delta_pass@1_lo": float(first["delta_lo"]), "delta_pass@1_hi": float(first["delta_hi"]),
                            "delta_pass@1_p": float(first["p"])})
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


def run_training_audit(
    plan: StudyPlan,
    out: str | Path,
    *,
    load: Callable[[str], Any] | None = None,
    max_batch_rows: int = 1024,
    workers: int = 1,
    log: Callable[[str], None] | None = None,
    device: str = "cpu",
    dtype: Any = None,
    executor=None,
) -> TrainingAudit:
    """Run (or resume) every audit the plan needs into ``out``; return the study.

    While it runs, each audit has one progress line with its ETA (:class:`ProgressBoard`, on stderr)
    and each finished audit logs its D and O_K (``log``, default: printed between the progress lines).

    Args:
        load: model loader (default :func:`reachlens.load_model` on ``device`` in ``dtype``).
        max_batch_rows: most completions decoded together.
        device, dtype: where and in which precision the default loader puts each checkpoint
            (``cuda``, ``torch.bfloat16``; default CPU, float32).
        workers: checkpoints audited side by side, each in its own process with one torch thread
            (on a small CPU two single-thread processes outrun one two-thread process); 1 runs them
            here, in order. Needs the default loader.
        executor: a :class:`reachlens.scale.RayExecutor` (or any executor): the lineage's
            checkpoints x question slices go to its workers instead (``workers`` is then unused).
    """
    if workers < 1:
        raise ReachlensError(f"workers={workers!r} must be at least 1")
    if workers > 1 and load is not None:
        raise ReachlensError("workers > 1 audits in separate processes with reachlens.load_model; "
                         "pass load=None, or workers=1 to use a custom loader")
    root = Path(out)
    study_file = root / "study.json"
    run = StudyDir(root)
    with run.writer():
        if study_file.is_file():
            old = StudyPlan.from_dict(read_json(study_file, "study file")["plan"])
            if old != plan:
                raise ReachlensError(f"study directory {str(root)!r} holds another plan; use a new directory (out=) "
                                     "or delete it")
        plan_dict = plan.to_dict()
        options = {k: v for k, v in plan_dict.items() if k != "protocol"}
        run.start(RunRecord.new("training_audit", plan.protocol, dict(plan.models), None, options))
        (root / "audits").mkdir(exist_ok=True)
        write_json(study_file, {"plan": plan_dict})
    walls: dict[str, float] = {}
    board = ProgressBoard()
    log = log or board.write
    try:
        if executor is not None:  # checkpoints x question slices on one pool (reachlens.scale.lineage)
            from reachlens.scale.lineage import audit_lineage

            walls = audit_lineage(plan, root, executor, max_batch_rows=max_batch_rows, device=device, dtype=dtype,
                                  log=log, progress=board.update)
        elif workers == 1:
            for name in plan.models:
                walls[name] = _audit_checkpoint(plan, name, root, max_batch_rows, load, log, board.update, device, dtype)
        else:
            walls = _audit_in_workers(plan, root, max_batch_rows, workers, board, log, device, dtype)
        # the temperature and length controls need every main audit (which questions left, which pairs
        # are flagged), so they run once those are done; one unit per re-probe temperature or rerun, so
        # that workers share a checkpoint with many left questions
        units = _pending_controls(plan, root)
        if workers == 1 or len(units) < 2:
            more: dict[str, float] = {}
            for name in dict.fromkeys(u.name for u in units):
                mine = [u for u in units if u.name == name]
                more[name] = _run_controls(plan, name, root, max_batch_rows, load, log, board.update, device, dtype, mine)
        else:
            more = _audit_in_workers(plan, root, max_batch_rows, workers, board, log, device, dtype,
                                     job=_run_controls, calls=[(u.name, ([u],)) for u in units])
        for name, wall in more.items():
            walls[name] = walls.get(name, 0.0) + wall
    finally:
        board.close()
    old_walls = read_json(study_file, "study file").get("wall_seconds", {})
    write_json(study_file, {"plan": plan.to_dict(), "wall_seconds": {**old_walls, **walls}})
    study = load_training_audit(root)
    with run.writer():
        run.write_summary(study.summary())
    return study


def _audit_in_workers(
    plan: StudyPlan, root: Path, max_batch_rows: int, workers: int, board: ProgressBoard, log: Callable[[str], None],
    device: str = "cpu", dtype: Any = None, job: Callable[..., float] | None = None,
    calls: Sequence[tuple[str, tuple]] | None = None,
) -> dict[str, float]:
    """``job`` (default :func:`_audit_checkpoint`) in worker processes, once per ``(checkpoint name, extra
    arguments)`` of ``calls`` (default: every checkpoint, largest first, no extra arguments); their
    progress and log lines come back through a queue. Returns the seconds spent per checkpoint."""
    import concurrent.futures
    import multiprocessing
    import queue as queue_module

    from reachlens._verbosity import dependencies_quiet

    # by expected cost, largest first, so the last worker to finish is not the one with the most
    job = job or _audit_checkpoint
    calls = list(calls) if calls is not None else \
        [(n, ()) for n in sorted(plan.models, key=lambda n: -(1 + bool(plan.budget_k) + bool(plan.native_formats.get(n))))]
    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue()
    walls: dict[str, float] = {}

    def handle(event: tuple) -> None:
        if event[0] == "progress":
            board.update(*event[1:])
        else:
            log(event[1])

    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init,
                                                initargs=(events, dependencies_quiet())) as pool:
        futures = {pool.submit(job, plan, name, root, max_batch_rows, None, None, None, device, dtype, *extra): name
                   for name, extra in calls}
        pending = set(futures)
        while pending:
            try:
                handle(events.get(timeout=0.2))
            except queue_module.Empty:
                pass
            for fut in [f for f in pending if f.done()]:
                pending.discard(fut)
                walls[futures[fut]] = walls.get(futures[fut], 0.0) + fut.result()
        while True:  # what the last worker sent before it returned
            try:
                handle(events.get(timeout=0.2))
            except queue_module.Empty:
                break
    return walls


_EVENTS: Any = None
"""In a worker process: the queue its progress and log lines go to."""
_QUIET: Any = None
"""In a worker process of a CLI command: the entered :func:`quiet_dependencies` (held for the worker's life)."""


def _worker_init(events: Any, quiet: bool) -> None:
    import torch

    global _EVENTS, _QUIET
    torch.set_num_threads(1)
    _EVENTS = events
    if quiet:  # the parent runs a CLI command: keep the libraries quiet here too
        from reachlens._verbosity import quiet_dependencies

        _QUIET = quiet_dependencies()
        _QUIET.__enter__()


def _audit_checkpoint(
    plan: StudyPlan,
    name: str,
    root: Path,
    max_batch_rows: int,
    load: Callable[[str], Any] | None = None,
    log: Callable[[str], None] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    device: str = "cpu",
    dtype: Any = None,
) -> float:
    """Every audit of one checkpoint (the plan's, the budget control's, the format control's), resumable."""
    import dataclasses

    import torch

    from reachlens.models import load_model
    from reachlens.tasks import load_task

    if _EVENTS is not None:  # in a worker: report to the parent
        log = log or (lambda text: _EVENTS.put(("log", text)))
        progress = progress or (lambda label, done, total: _EVENTS.put(("progress", label, done, total)))
    log = log or print

    def bar(label: str, total: int) -> Callable[[int], None] | None:
        """The progress callback of one audit; its line starts now (so its clock and ETA count from here)."""
        if progress is None:
            return None
        progress(label, 0, total)
        return lambda done: progress(label, done, total)

    t0 = time.perf_counter()
    task = load_task(plan.protocol.task, plan.data, split=plan.protocol.split, n=plan.n)
    if load is None:
        model = load_model(plan.models[name], device=device, dtype=dtype or torch.float32)
    else:
        model = load(plan.models[name])
    r = audit(model, task, plan.protocol, out=root / "audits" / name, max_batch_rows=max_batch_rows,
              progress=bar(f"{name} K={plan.protocol.k}", len(task)))
    log(f"{name:>10s}: D={r.D:.3f}  O_{r.k}={r.O_K:.3f}")
    if plan.budget_k and name in plan.paired_models:
        ext_dir = root / "audits" / f"{name}-k{plan.budget_k}"
        if not (ext_dir / "summary.json").is_file():
            e = extend_budget(model, task, r, plan.budget_k, out=ext_dir, max_batch_rows=max_batch_rows,
                              progress=bar(f"{name} K={plan.budget_k} (budget control)", r.n))
            log(f"{name:>10s}: O_{plan.budget_k}={e.O_K:.3f}")
    fmt = plan.native_formats.get(name)
    if fmt and fmt != r.protocol.prompt_format:
        f = audit(model, task, dataclasses.replace(plan.protocol, prompt_format=fmt),
                  out=root / "audits" / f"{name}-fmt-{fmt}", max_batch_rows=max_batch_rows,
                  progress=bar(f"{name} in its {fmt!r} prompt", len(task)))
        log(f"{name:>10s}: D under its native prompt {fmt!r} = {f.D:.3f}")
    return time.perf_counter() - t0


def _temperature_dir(root: Path, parent: str, name: str) -> Path:
    return root / "controls" / "temperature" / f"{parent}--{name}"


def _length_dir(root: Path, plan: StudyPlan, name: str) -> Path:
    return root / "audits" / f"{name}-len{plan.length_max_new_tokens}"


def _done(path: Path) -> bool:
    return (path / "summary.json").is_file()


@dataclass(frozen=True)
class _ControlUnit:
    """One control run: a re-probe of ``name`` at ``temperature`` of the questions that left ``parent``'s
    reachable set, or (``temperature`` None) ``name``'s audit again at the plan's longer decode."""

    name: str
    parent: str | None = None
    temperature: float | None = None
    cost: int = 0
    """Questions it decodes (the units run largest first)."""


def _pending_controls(plan: StudyPlan, root: Path) -> list[_ControlUnit]:
    """The control units still to run (those without a finished directory), largest first."""
    if not plan.control_temperatures and not plan.length_max_new_tokens:
        return []
    audits = {n: AuditResult.load(root / "audits" / n) for n in plan.models if _done(root / "audits" / n)}
    units: dict[tuple, _ControlUnit] = {}
    for a, b in plan.pairs:
        if a not in audits or b not in audits:
            continue
        left = left_reachable(compare(audits[a], audits[b])) if plan.control_temperatures else []
        for t in plan.control_temperatures if left else ():
            if not _done(_temperature_dir(root, a, b) / f"T{t:g}"):
                units[(b, a, t)] = _ControlUnit(b, a, t, len(left))
        if plan.length_max_new_tokens and truncation_parity(audits[a], audits[b], plan.truncation_margin)["flagged"]:
            for n in (a, b):
                if not _done(_length_dir(root, plan, n)):
                    units[(n, None, None)] = _ControlUnit(n, cost=audits[n].n)
    # higher temperatures decode longer and share fewer prefixes: among equal sizes, they go first
    return sorted(units.values(), key=lambda u: (-u.cost, -(u.temperature or 0.0)))


def _run_controls(
    plan: StudyPlan,
    name: str,
    root: Path,
    max_batch_rows: int,
    load: Callable[[str], Any] | None = None,
    log: Callable[[str], None] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    device: str = "cpu",
    dtype: Any = None,
    units: Sequence[_ControlUnit] = (),
) -> float:
    """Run the control ``units`` of checkpoint ``name`` (resumable; see :func:`_pending_controls`), with
    the same loader, logging and progress as :func:`_audit_checkpoint`. Returns the seconds spent."""
    import torch

    from reachlens.models import load_model
    from reachlens.tasks import load_task

    if not units:
        return 0.0
    if _EVENTS is not None:  # in a worker: report to the parent
        log = log or (lambda text: _EVENTS.put(("log", text)))
        progress = progress or (lambda label, done, total: _EVENTS.put(("progress", label, done, total)))
    log = log or print
    t0 = time.perf_counter()
    task = load_task(plan.protocol.task, plan.data, split=plan.protocol.split, n=plan.n)
    model = load_model(plan.models[name], device=device, dtype=dtype or torch.float32) if load is None \
        else load(plan.models[name])
    mine = AuditResult.load(root / "audits" / name)
    for unit in units:
        if unit.temperature is not None:
            def bar(t: float, done: int, total: int, parent=unit.parent) -> None:
                if progress is not None:
                    progress(f"{name} T={t:g} (left {parent}'s reach)", done, total)

            runs = reprobe_left(model, task, root / "audits" / unit.parent, mine, [unit.temperature],
                                out=_temperature_dir(root, unit.parent, name), max_batch_rows=max_batch_rows,
                                progress=bar)
            for t, r in runs.items():
                log(f"{name:>10s}: T={t:g}: {int(r.questions['reachable'].sum())} of {r.n} questions that left "
                    f"{unit.parent}'s reach are reachable again")
        else:
            n_tok = plan.length_max_new_tokens
            label = f"{name} max_new_tokens={n_tok} (length control)"
            if progress is not None:
                progress(label, 0, mine.n)
            r = rerun_at_length(model, task, mine, n_tok, out=_length_dir(root, plan, name),
                                max_batch_rows=max_batch_rows,
                                progress=None if progress is None else (lambda done: progress(label, done, mine.n)))
            log(f"{name:>10s}: at max_new_tokens={n_tok}: D={r.D:.3f}  O_{r.k}={r.O_K:.3f}")
    return time.perf_counter() - t0


def load_training_audit(path: str | Path) -> TrainingAudit:
    """Read a study directory written by :func:`run_training_audit`."""
    root = Path(path)
    meta = read_json(root / "study.json", "study file")
    plan = StudyPlan.from_dict(meta["plan"])
    audits, extended, formats, longer, reprobes = {}, {}, {}, {}, {}
    for name in plan.model_order:
        d = root / "audits" / name
        if (d / "summary.json").is_file():
            audits[name] = AuditResult.load(d)
        if plan.budget_k and (root / "audits" / f"{name}-k{plan.budget_k}" / "summary.json").is_file():
            extended[name] = AuditResult.load(root / "audits" / f"{name}-k{plan.budget_k}")
        fmt = plan.native_formats.get(name)
        if fmt and (root / "audits" / f"{name}-fmt-{fmt}" / "summary.json").is_file():
            formats[name] = AuditResult.load(root / "audits" / f"{name}-fmt-{fmt}")
        if plan.length_max_new_tokens and _done(_length_dir(root, plan, name)):
            longer[name] = AuditResult.load(_length_dir(root, plan, name))
    for a, b in plan.pairs:
        runs = {t: AuditResult.load(_temperature_dir(root, a, b) / f"T{t:g}") for t in plan.control_temperatures
                if _done(_temperature_dir(root, a, b) / f"T{t:g}")}
        if runs:
            reprobes[(a, b)] = runs
    return TrainingAudit(plan, root, audits, extended, formats, meta.get("wall_seconds", {}), reprobes, longer)


def pairs_from_dirs(dirs: Sequence[str | Path], *, k: int | None = None) -> TrainingAudit:
    """A study view over plain audit directories: the first is the base, each other one a descendant.

    Each is named by its folder's name (its path where two names coincide); ``k`` cuts every audit to its
    first k samples."""
    if len(dirs) < 2:
        raise ReachlensError(f"need at least two audit directories (a base and a descendant), got {len(dirs)}")
    names = [Path(d).name for d in dirs]
    if len(set(names)) < len(names):
        names = [str(d) for d in dirs]
    results = {name: AuditResult.load(d) for name, d in zip(names, dirs)}
    if k is not None:
        results = {name: r.restrict_k(k) for name, r in results.items()}
    names = list(results)
    first = results[names[0]]
    plan = StudyPlan({n: r.model.get("spec", n) for n, r in results.items()},
                     tuple((names[0], n) for n in names[1:]), first.protocol)
    return TrainingAudit(plan, Path(dirs[0]).parent, results, {}, {}, {})


def single_audit(path: str | Path) -> TrainingAudit:
    """A study view over one audit directory (no pairs): its D, O_K, pass@k and budget table."""
    result = AuditResult.load(path)
    name = Path(path).name or str(path)
    plan = StudyPlan({name: result.model.get("spec", name)}, (), result.protocol)
    return TrainingAudit(plan, Path(path), {name: result}, {}, {}, {})
