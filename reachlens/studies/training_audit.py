"""The training audit as one run: audits of several checkpoints, their pairwise joins and the four controls.

:func:`run_training_audit` runs a :class:`~reachlens.studies.study_plan.StudyPlan` into one directory, a run of
kind ``training_audit`` (:class:`TrainingAudit`) made of runs (its layout, :class:`StudyLayout`)::

    DIR/run.json, its summary, *.parquet         the study: its plan (protocol + options), its audits as children
                                                  by role (relative paths: audit:NAME, extended:NAME, ...), its tables
    DIR/audits/NAME/                              each checkpoint's audit
    DIR/audits/NAME--k=K2/                        the budget control (rerun at budget K2)
    DIR/audits/NAME--k=1--prompt_format=FMT/      the prompt-format control (its deployment in its native format)
    DIR/audits/NAME--max_new_tokens=N/            the length control's reruns (flagged pairs only)
    DIR/comparisons/PARENT--NAME/                 each pair's comparison
    DIR/controls/temperature/PARENT--NAME/        each pair's temperature control, holding its re-probes
    DIR/controls/length/PARENT--NAME/             each flagged pair's length control

It is a study (:func:`~reachlens.runner.study.run_study`) in two rounds of jobs on one executor: every checkpoint's
audit, then every control's rerun (each needs the audits: which questions left, which pairs are flagged). A
checkpoint the budget control extends is decoded once in the first round, at the control's budget, and its
audit at K is the first K samples per question of that one (what the two share is decoded once). Everything
is resumable (a re-run reads every finished audit and decodes only the rest), and everything can be re-read without a model (:func:`~reachlens.store.read_run`);
:mod:`reachlens.report` renders it.

Controls (each a :func:`~reachlens.studies.rerun` of a checkpoint's audit):

* **budget**: O_K and O_2K for both checkpoints of each pair. If training only concentrates mass, a
  larger budget shows the base reaching what training "gained" (base O_2K >= trained O_K).
* **prompt format**: the trained model audited under the base model's prompt (``shared``) and under
  its own (``native``); the share of the realization gain retained under the shared prompt is
  ``(D_trained,shared - D_base) / (D_trained,native - D_base)`` (undefined when the native gain is 0).
  Only D is read, so the rerun in the native format decodes the deployment and :data:`FORMAT_K` sample
  (:func:`format_change`).
* **temperature** (:mod:`reachlens.studies.controls`): each pair's questions that left the reachable set,
  re-probed with the descendant at other temperatures, same K and seed stream.
* **length**: per pair, the shares of outputs cut at ``max_new_tokens``; a pair whose shares differ by
  more than the plan's margin has both checkpoints audited again at a longer decode.

A **trajectory** (``StudyPlan.trajectory``: checkpoints of one training run by optimizer step, its parent
at step 0) is read as one path (:meth:`~reachlens.studies.study_view.StudyView.trajectory`).
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from reachlens.engine.progress import listening
from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig
from reachlens.runner import Executor
from reachlens.runner.study import Child, Study, run_study
from reachlens.store import Run, RunDir, RunRecord, register_kind, rerun_name, single_name
from reachlens.studies.audit_job import AuditJob
from reachlens.studies._progress import ProgressBoard
from reachlens.studies.auditing import AuditResult
from reachlens.studies.compare import compare, truncation_parity
from reachlens.studies.controls import LengthControl, TemperatureControl, left_reachable
from reachlens.studies.reruns import as_rerun, rerun_child
from reachlens.studies.study_plan import StudyPlan
from reachlens.studies.study_view import StudyView
from reachlens.tasks.base import Task

__all__ = ["FORMAT_K", "StudyLayout", "TrainingAudit", "run_training_audit"]

_TABLES = ("checkpoints", "headline", "pass_at_k_deltas", "pass_at_k_crossovers", "unreachability", "budget_control",
           "format_control", "temperature_control", "truncation_control", "length_control", "trajectory")

FORMAT_K = 1
"""Samples per question of the prompt-format control's rerun: its table reads D (the deployment) alone, so the
K samples of a full audit (two of the demo's sixteen audits) would be decoded for no table."""


def format_change(plan: StudyPlan, name: str) -> dict[str, Any] | None:
    """The rerun change that holds checkpoint ``name`` in its native prompt format, at ``k=FORMAT_K`` (None: it
    has no native format)."""
    fmt = plan.native_formats.get(name)
    if fmt is None:
        return None
    return {"prompt_format": fmt, **({"k": FORMAT_K} if plan.protocol.k > FORMAT_K else {})}


@dataclass(frozen=True)
class StudyLayout:
    """Where each run of a training study lives under its directory (the one place its paths are joined: each
    name a single folder name, :func:`~reachlens.store.single_name`, so no name in a plan leads outside it)."""

    root: Path

    @property
    def audits(self) -> Path:
        return self.root / "audits"

    def audit(self, name: str, **change: Any) -> Path:
        """A checkpoint's audit, or (with ``change``) its rerun: :func:`~reachlens.store.rerun_name`."""
        return self.audits / single_name(rerun_name(name, change) if change else name, "audit folder name")

    def comparison(self, a: str, b: str) -> Path:
        return self.root / "comparisons" / single_name(f"{a}--{b}", "comparison folder name")

    def temperature(self, a: str, b: str) -> Path:
        return self.root / "controls" / "temperature" / single_name(f"{a}--{b}", "control folder name")

    def length(self, a: str, b: str) -> Path:
        return self.root / "controls" / "length" / single_name(f"{a}--{b}", "control folder name")


@register_kind
@dataclass(frozen=True)
class TrainingAudit(StudyView, Run):
    """A training study (a run of kind ``training_audit``): its plan's audits and controls, read as a
    :class:`~reachlens.studies.study_view.StudyView`, with the time each checkpoint took."""

    kind: ClassVar[str] = "training_audit"
    record_fields: ClassVar[dict[str, tuple[type, ...]]] = {"protocol": (dict,)}  # the plan: StudyPlan.from_dict

    wall_seconds: dict[str, float] = field(default_factory=dict)
    """Seconds the workers spent on each checkpoint's audits, over every call that finished one (an audit stopped
    part-way counts from the call that finished it: :data:`reachlens.runner.study.WORKER_SECONDS`)."""

    def make_record(self) -> RunRecord:
        return RunRecord.new(self.kind, self.plan.protocol, dict(self.plan.models), None, _options(self.plan))

    def summary(self) -> dict[str, Any]:
        return {**StudyView.summary(self), "wall_seconds": dict(self.wall_seconds)}

    def tables(self) -> dict[str, pd.DataFrame]:
        return {name: getattr(self, name)() for name in _TABLES}

    def children(self) -> dict[str, Run]:
        """Every audit of the study by role: ``audit:NAME``, ``extended:NAME``, ``format:NAME``, ``longer:NAME`` and
        ``reprobe:PARENT--NAME:T`` (a temperature control's re-probe of NAME's questions that left PARENT's reach)."""
        kids: dict[str, Run] = {}
        for group, runs in (("audit", self.audits), ("extended", self.extended), ("format", self.formats),
                            ("longer", self.longer)):
            kids.update({f"{group}:{name}": r for name, r in runs.items()})
        for (a, b), runs in self.reprobes.items():
            kids.update({f"reprobe:{a}--{b}:{t:g}": r for t, r in runs.items()})
        return kids

    @classmethod
    def read(cls, run: RunDir) -> TrainingAudit:
        """The study in ``run``: every audit its record names (all of them once complete; those finished while it
        runs), by role."""
        record = run.record()
        plan = StudyPlan.from_dict({**record.options, "protocol": record.protocol.to_dict()})
        found: dict[str, dict[Any, Any]] = collections.defaultdict(dict)
        pairs = {f"{a}--{b}": (a, b) for a, b in plan.pairs}
        for role in record.children:
            group, _, rest = role.partition(":")
            mid = rest.rpartition(":")[0] if group == "reprobe" else rest
            if group not in _GROUPS or mid not in (pairs if group == "reprobe" else plan.models):
                raise ReachlensError(f"{str(run.header_path)!r} names a child {role!r}, not one of its plan's "
                                     "(audit:NAME, extended:NAME, ...); it was damaged or edited by hand")
            child = Run.read_child(run, role)
            if group == "reprobe":
                found[group].setdefault(pairs[mid], {})[float(child.protocol.temperature)] = child
            else:
                found[group][mid] = child
        ordered = {g: {n: found[g][n] for n in plan.model_order if n in found[g]} for g in _GROUPS[:4]}
        reprobes = {pair: {t: runs[t] for t in plan.control_temperatures if t in runs}
                    for pair in plan.pairs if (runs := found["reprobe"].get(pair))}
        walls = (run.summary() or {}).get("wall_seconds", {})
        return cls(plan, ordered["audit"], ordered["extended"], ordered["format"], reprobes, ordered["longer"], walls,
                   record=record, location=run.path)


_GROUPS = ("audit", "extended", "format", "longer", "reprobe")
"""The roles of a training study's children (``GROUP:NAME``, a re-probe ``reprobe:PARENT--NAME:T``)."""


def _options(plan: StudyPlan) -> dict[str, Any]:
    return {k: v for k, v in plan.to_dict().items() if k != "protocol"}


# --- running a study ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _TrainingStudy(Study):
    """A training study as a :class:`~reachlens.runner.study.Study`: its children every checkpoint's audit (roles
    ``audit:NAME``), then every control's rerun (``extended:NAME``, ``format:NAME``, ``longer:NAME``,
    ``reprobe:PARENT--NAME:T``), which need the audits (:meth:`TrainingAudit.children`)."""

    plan: StudyPlan
    out: Path
    exec_config: ExecConfig

    @functools.cached_property
    def lay(self) -> StudyLayout:
        return StudyLayout(self.out)

    @functools.cached_property
    def task(self) -> Task:
        from reachlens.tasks import load_task

        p = self.plan
        return load_task(p.protocol.task, p.data, split=p.protocol.split, n=p.n)

    def check(self) -> None:
        for name in self.plan.models:
            self.lay.audit(name)  # each name a folder name, refused before anything is written

    def root_record(self) -> RunRecord:
        return RunRecord.new("training_audit", self.plan.protocol, dict(self.plan.models), None, _options(self.plan),
                             exec=self.exec_config.recorded())

    @functools.cached_property
    def wide(self) -> frozenset[str]:
        """The checkpoints decoded once at the budget control's K2, their audit at K cut from it.

        All K2 samples of a question share one sample tree, so what the first K and the last K2 - K have in common
        is decoded once instead of twice (sample j depends on (seed, question, j) alone, so the cut holds the very
        samples an audit at K draws). A checkpoint whose audit at K a study begun before holds (complete or not)
        keeps it, and the budget control then extends it. Fixed when the study first asks (after its start).
        """
        if self.plan.extended_k is None:
            return frozenset()
        return frozenset(n for n in self.plan.paired_models if not RunDir(self.lay.audit(n)).exists())

    def children(self, done: Mapping[str, Any]) -> list[Child]:
        kids = [c for name in self.plan.model_order for c in self._audit(name, done)]
        main = {name: done[f"audit:{name}"] for name in self.plan.models if f"audit:{name}" in done}
        if len(main) < len(self.plan.models):
            return kids
        return kids + self._controls(main)

    def _audit(self, name: str, done: Mapping[str, Any]) -> list[Child]:
        from reachlens.models import ModelSource

        plan, lay, k, k2 = self.plan, self.lay, self.plan.protocol.k, self.plan.extended_k
        source = ModelSource.from_exec(plan.models[name], self.exec_config)
        log = (lambda r: f"{name:>10s}: D={r.D:.3f}  O_{r.k}={r.O_K:.3f}")
        if name not in self.wide:
            job = AuditJob(source, self.task, plan.protocol, lay.audit(name), self.exec_config)
            return [Child(f"audit:{name}", lay.audit(name), f"{name} K={k}", job, log=log)]
        job = AuditJob(source, self.task, plan.protocol.with_k(k2), lay.audit(name, k=k2), self.exec_config,
                       extra={"change": {"k": k2}, "cut_to_k": {str(k): str(lay.audit(name))}})
        wide = Child(f"extended:{name}", lay.audit(name, k=k2), f"{name} K={k2} (K={k} and the budget control)", job,
                     log=lambda r: f"{name:>10s}: O_{k2}={r.O_K:.3f} (budget control)")
        if wide.role not in done:
            return [wide]
        cut = Child(f"audit:{name}", lay.audit(name), make=lambda _: _cut(done[wide.role], k, lay.audit(name)), log=log)
        return [wide, cut]

    def _controls(self, main: dict[str, AuditResult]) -> list[Child]:
        """Every control's rerun, given the checkpoints' audits; each temperature control's directory is begun."""
        plan, lay, kids = self.plan, self.lay, []

        def add(role: str, name: str, label: str, log: Callable[[Any], str], into: Path, **change: Any) -> None:
            kids.append(rerun_child(main[name], role=f"{role}:{name}", label=label, log=log, task=self.task,
                                    into=into, name=name, exec_config=self.exec_config, **change))

        for name in plan.paired_models if plan.extended_k else ():
            if name not in self.wide:
                add("extended", name, f"{name} K={plan.extended_k} (budget control)",
                    lambda r, name=name: f"{name:>10s}: O_{plan.extended_k}={r.O_K:.3f}", lay.audits, k=plan.extended_k)
        for name, r in main.items():
            fmt = plan.native_formats.get(name)
            if fmt and fmt != r.protocol.prompt_format:
                add("format", name, f"{name} in its {fmt!r} prompt",
                    lambda f, name=name, fmt=fmt: f"{name:>10s}: D under its native prompt {fmt!r} = {f.D:.3f}",
                    lay.audits, **format_change(plan, name))
        longer: set[str] = set()
        for a, b in plan.pairs:
            c = compare(main[a], main[b])
            left = left_reachable(c) if plan.control_temperatures else []
            if left:
                RunDir(lay.temperature(a, b)).begin(TemperatureControl(c, plan.control_temperatures, name=b).record)
            for t in plan.control_temperatures if left else ():
                kids.append(rerun_child(
                    main[b], role=f"reprobe:{a}--{b}:{t:g}", label=f"{b} T={t:g} (left {a}'s reach)", task=self.task,
                    log=lambda r, a=a, b=b, t=t: f"{b:>10s}: T={t:g}: {int(r.questions['reachable'].sum())} of {r.n} "
                    f"questions that left {a}'s reach are reachable again", into=lay.temperature(a, b), name=b,
                    exec_config=self.exec_config, questions=left, temperature=t))
            if plan.length_max_new_tokens and truncation_parity(main[a], main[b], plan.truncation_margin)["flagged"]:
                longer |= {a, b}
        n_tok = plan.length_max_new_tokens
        for name in sorted(longer, key=plan.model_order.index):
            add("longer", name, f"{name} max_new_tokens={n_tok} (length control)",
                lambda r, name=name: f"{name:>10s}: at max_new_tokens={n_tok}: D={r.D:.3f}  O_{r.k}={r.O_K:.3f}",
                lay.audits, max_new_tokens=n_tok)
        return kids

    def compose(self, done: Mapping[str, Any], seconds: Mapping[str, float]) -> TrainingAudit:
        """The study from its children; each pair's comparison and control runs written beside them first."""
        groups: dict[str, dict[Any, Any]] = collections.defaultdict(dict)
        for name in self.plan.model_order:
            for group in ("audit", "extended", "format", "longer"):
                if f"{group}:{name}" in done:
                    groups[group][name] = done[f"{group}:{name}"]
        for a, b in self.plan.pairs:
            runs = {t: done[f"reprobe:{a}--{b}:{t:g}"] for t in self.plan.control_temperatures
                    if f"reprobe:{a}--{b}:{t:g}" in done}
            if runs:
                groups["reprobe"][(a, b)] = runs
        walls: dict[str, float] = {}
        for role, took in seconds.items():  # by checkpoint: the one each child decodes
            group, _, rest = role.partition(":")
            name = rest.rpartition(":")[0].partition("--")[2] if group == "reprobe" else rest
            walls[name] = walls.get(name, 0.0) + took
        study = TrainingAudit(self.plan, groups["audit"], groups["extended"], groups["format"], groups["reprobe"],
                              groups["longer"], walls, record=RunDir(self.out).record(), location=self.out)
        _finish_controls(self.plan, self.lay, study)
        return study


def _cut(wide: AuditResult, k: int, out: Path) -> AuditResult:
    """The audit at budget ``k`` that ``wide`` (a complete audit at a larger budget) holds, written to ``out``."""
    return as_rerun(wide.restrict_k(k), out, {"rerun_of": str(wide.location), "change": {"k": k}})


def _finish_controls(plan: StudyPlan, lay: StudyLayout, study: TrainingAudit) -> None:
    """Write each pair's comparison and control runs from the audits the study holds."""
    for (a, b), c in study.comparisons().items():
        c.save(lay.comparison(a, b))
        if (a, b) in study.reprobes:
            TemperatureControl(c, plan.control_temperatures, study.reprobes[(a, b)], name=b).save(lay.temperature(a, b))
        if a in study.longer and b in study.longer:
            LengthControl(c, compare(study.longer[a], study.longer[b])).save(lay.length(a, b))


def run_training_audit(
    plan: StudyPlan, out: str | Path, *, exec_config: ExecConfig | None = None, executor: Executor | None = None,
    log: Callable[[str], None] | None = None,
) -> TrainingAudit:
    """Run (or resume) every audit and control the plan needs into ``out`` (:func:`~reachlens.runner.study.run_study`);
    return the study.

    While it runs, each audit has one progress line with its ETA (:class:`ProgressBoard`, on stderr)
    and each finished audit logs its D and O_K (``log``, default: printed between the progress lines).

    Args:
        exec_config: how it runs: batch rows, where and in which precision each checkpoint loads, and who
            decodes (``workers > 1``: checkpoints audited side by side in a :class:`~reachlens.runner.ProcessPool`,
            each worker one process with one torch thread; ``ray``: Ray actors), for every round.
        executor: who decodes every round; None: the one ``exec_config`` asks for
            (:func:`~reachlens.runner.executor_for`).
    """
    board = ProgressBoard()
    try:
        with listening(board):  # the decodes' steps, this process' and its workers'
            return run_study(_TrainingStudy(plan, Path(out), exec_config or ExecConfig()), executor,
                             progress=board.update, log=log or board.write)
    finally:
        board.close()
