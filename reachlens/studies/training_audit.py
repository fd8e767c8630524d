"""The training audit as one run: audits of several checkpoints, their pairwise joins and the four controls.

:func:`run_training_audit` runs a :class:`~reachlens.studies.study_plan.StudyPlan` into one directory, a run of
kind ``training_audit`` (:class:`TrainingAudit`) made of runs (its layout, :class:`StudyLayout`)::

    DIR/run.json, its summary, *.parquet         the study: its plan (protocol + options), its tables
    DIR/audits/NAME/                              each checkpoint's audit
    DIR/audits/NAME--k=K2/                        the budget control (rerun at budget K2)
    DIR/audits/NAME--k=1--prompt_format=FMT/      the prompt-format control (its deployment in its native format)
    DIR/audits/NAME--max_new_tokens=N/            the length control's reruns (flagged pairs only)
    DIR/comparisons/PARENT--NAME/                 each pair's comparison
    DIR/controls/temperature/PARENT--NAME/        each pair's temperature control, holding its re-probes
    DIR/controls/length/PARENT--NAME/             each flagged pair's length control

It runs in two rounds of jobs on one executor (:func:`reachlens.studies.run_reruns`): every checkpoint's audit,
then every control's rerun (each needs the audits: which questions left, which pairs are flagged). A
checkpoint the budget control extends is decoded once in the first round, at the control's budget, and its
audit at K is the first K samples per question of that one (what the two share is decoded once). Everything
is resumable, and everything can be re-read without a model (:func:`~reachlens.store.read_run`);
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
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from reachlens.engine.progress import listening
from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig
from reachlens.runner import Executor, executor_for
from reachlens.store import Run, RunDir, RunRecord, register_kind, rerun_name, single_name
from reachlens.studies.audit_job import AuditJob
from reachlens.studies._progress import ProgressBoard
from reachlens.studies.auditing import AuditResult
from reachlens.studies.compare import compare, truncation_parity
from reachlens.studies.controls import LengthControl, TemperatureControl, left_reachable
from reachlens.studies.reruns import PlannedRerun, as_rerun, plan_rerun, run_reruns
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
    """Seconds the workers spent on each checkpoint's audits (over every call that ran part of it)."""

    def make_record(self) -> RunRecord:
        return RunRecord.new(self.kind, self.plan.protocol, dict(self.plan.models), None, _options(self.plan))

    def summary(self) -> dict[str, Any]:
        return {**StudyView.summary(self), "wall_seconds": dict(self.wall_seconds)}

    def tables(self) -> dict[str, pd.DataFrame]:
        return {name: getattr(self, name)() for name in _TABLES}

    def save(self, path):
        """A training study is written where it runs (:func:`run_training_audit`), its audits with it."""
        raise ReachlensError("a training study is written where it runs: run_training_audit(plan, out) (it resumes "
                             "a study directory; copy the directory to move it)")

    @classmethod
    def read(cls, run: RunDir) -> TrainingAudit:
        """The study in ``run``: every audit and control that finished."""
        record = run.record()
        plan = StudyPlan.from_dict({**record.options, "protocol": record.protocol.to_dict()})
        lay = StudyLayout(run.path)
        found = collections.defaultdict(dict)
        for name in plan.model_order:
            for group, change in (("audits", {}), ("extended", {"k": plan.extended_k}),
                                  ("formats", format_change(plan, name)),
                                  ("longer", {"max_new_tokens": plan.length_max_new_tokens})):
                if change is None or None in change.values():
                    continue
                if RunDir(lay.audit(name, **change)).is_complete():
                    found[group][name] = AuditResult.load(lay.audit(name, **change))
        for a, b in plan.pairs:
            if RunDir(lay.temperature(a, b)).exists():
                found["reprobes"][(a, b)] = TemperatureControl.reprobes_in(RunDir(lay.temperature(a, b)))
        found["reprobes"] = {pair: runs for pair, runs in found["reprobes"].items() if runs}
        walls = (run.summary() or {}).get("wall_seconds", {})
        return cls(plan, found["audits"], found["extended"], found["formats"], found["reprobes"], found["longer"],
                   walls, record=record, location=run.path)


def _options(plan: StudyPlan) -> dict[str, Any]:
    return {k: v for k, v in plan.to_dict().items() if k != "protocol"}


# --- running a study ---------------------------------------------------------------------------------------
@dataclass
class _Step:
    """One job of a study's round: which checkpoint, its progress label and size, and what to log when done."""

    name: str
    label: str
    total: int
    log: Callable[[Any], str]
    planned: PlannedRerun


def _main_steps(plan: StudyPlan, task: Task, lay: StudyLayout, ex: ExecConfig) -> list[_Step]:
    """Every checkpoint's audit.

    A checkpoint the budget control extends is decoded once, at the control's budget K2 (into its folder
    ``NAME--k=K2``), and its audit at K is the first K samples per question of that one
    (:meth:`~reachlens.studies.auditing.AuditResult.restrict_k`: sample j depends on (seed, question, j) alone,
    so the cut holds the very samples an audit at K draws). All K2 samples of a question share one sample tree,
    so what the first K and the last K2 - K have in common is decoded once instead of twice. A checkpoint whose
    audit at K a study begun before holds (complete or not) keeps it, and the control then extends it.
    """
    from reachlens.models import ModelSource

    steps = []
    for name, spec in plan.models.items():
        source, k, k2 = ModelSource.from_exec(spec, ex), plan.protocol.k, plan.extended_k
        log = (lambda r, name=name: f"{name:>10s}: D={r.D:.3f}  O_{r.k}={r.O_K:.3f}")
        if k2 is not None and name in plan.paired_models and not RunDir(lay.audit(name)).exists():
            job = AuditJob(source, task, plan.protocol.with_k(k2), lay.audit(name, k=k2), ex,
                           extra={"change": {"k": k2}, "cut_to_k": {str(k): str(lay.audit(name))}})
            planned = PlannedRerun(job, lambda r, name=name: _cut(r, k, lay.audit(name)), lay.audit(name))
            both = (lambda r, name=name, log=log:
                    f"{log(r)}  O_{k2}={AuditResult.load(lay.audit(name, k=k2)).O_K:.3f} (budget control)")
            steps.append(_Step(name, f"{name} K={k2} (K={k} and the budget control)", len(task), both, planned))
        else:
            planned = PlannedRerun(AuditJob(source, task, plan.protocol, lay.audit(name), ex), lambda r: r,
                                   lay.audit(name))
            steps.append(_Step(name, f"{name} K={k}", len(task), log, planned))
    return steps


def _cut(wide: AuditResult, k: int, out: Path) -> AuditResult:
    """The audit at budget ``k`` that ``wide`` (a complete audit at a larger budget) holds, written to ``out``."""
    return as_rerun(wide.restrict_k(k), out, {"rerun_of": str(wide.location), "change": {"k": k}})


def _control_steps(plan: StudyPlan, task: Task, lay: StudyLayout, ex: ExecConfig, main: dict[str, AuditResult]) -> list[_Step]:
    """Every control's rerun, given the checkpoints' audits; each temperature control's directory is begun."""
    steps = []

    def add(name: str, label: str, total: int, log: Callable[[Any], str], into: Path, **change: Any) -> None:
        steps.append(_Step(name, label, total, log, plan_rerun(main[name], task=task, into=into, name=name,
                                                                exec_config=ex, **change)))

    for name in plan.paired_models if plan.extended_k else ():
        add(name, f"{name} K={plan.extended_k} (budget control)", main[name].n,
            lambda r, name=name: f"{name:>10s}: O_{plan.extended_k}={r.O_K:.3f}", lay.audits, k=plan.extended_k)
    for name, r in main.items():
        fmt = plan.native_formats.get(name)
        if fmt and fmt != r.protocol.prompt_format:
            add(name, f"{name} in its {fmt!r} prompt", r.n,
                lambda f, name=name, fmt=fmt: f"{name:>10s}: D under its native prompt {fmt!r} = {f.D:.3f}",
                lay.audits, **format_change(plan, name))
    longer: set[str] = set()
    for a, b in plan.pairs:
        c = compare(main[a], main[b])
        left = left_reachable(c) if plan.control_temperatures else []
        if left:
            RunDir(lay.temperature(a, b)).begin(TemperatureControl(c, plan.control_temperatures, name=b).record)
        for t in plan.control_temperatures if left else ():
            add(b, f"{b} T={t:g} (left {a}'s reach)", len(left),
                lambda r, a=a, b=b, t=t: f"{b:>10s}: T={t:g}: {int(r.questions['reachable'].sum())} of {r.n} questions "
                f"that left {a}'s reach are reachable again", lay.temperature(a, b), questions=left, temperature=t)
        if plan.length_max_new_tokens and truncation_parity(main[a], main[b], plan.truncation_margin)["flagged"]:
            longer |= {a, b}
    n_tok = plan.length_max_new_tokens
    for name in sorted(longer, key=plan.model_order.index):
        add(name, f"{name} max_new_tokens={n_tok} (length control)", main[name].n,
            lambda r, name=name: f"{name:>10s}: at max_new_tokens={n_tok}: D={r.D:.3f}  O_{r.k}={r.O_K:.3f}",
            lay.audits, max_new_tokens=n_tok)
    return steps


def _run_steps(steps: list[_Step], executor: Executor, board: ProgressBoard, log: Callable[[str], None],
               walls: dict[str, float]) -> list[Any]:
    """Run a round of steps on ``executor``, with one progress line per step and its log line when done."""
    def progress(i: int, done: int, total: int) -> None:
        board.update(steps[i].label, done, total)

    def done(i: int, result, seconds: float) -> None:
        walls[steps[i].name] = walls.get(steps[i].name, 0.0) + seconds
        log(steps[i].log(result))

    return run_reruns([s.planned for s in steps], executor, progress=progress, on_done=done)


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
    """Run (or resume) every audit and control the plan needs into ``out``; return the study.

    While it runs, each audit has one progress line with its ETA (:class:`ProgressBoard`, on stderr)
    and each finished audit logs its D and O_K (``log``, default: printed between the progress lines).

    Args:
        exec_config: how it runs: batch rows, where and in which precision each checkpoint loads, and who
            decodes (``workers > 1``: checkpoints audited side by side in a :class:`~reachlens.runner.ProcessPool`,
            each worker one process with one torch thread; ``ray``: Ray actors), for every round.
        executor: who decodes every round; None: the one ``exec_config`` asks for
            (:func:`~reachlens.runner.executor_for`).
    """
    from reachlens.tasks import load_task

    ex = exec_config or ExecConfig()
    lay = StudyLayout(Path(out))
    for name in plan.models:
        lay.audit(name)  # each name a folder name, refused before anything is written
    root = RunDir(lay.root)
    with root.writer():
        record = RunRecord.new("training_audit", plan.protocol, dict(plan.models), None, _options(plan),
                               exec=ex.recorded())
        root.check_run(record, what=f"study directory {str(lay.root)!r} holds another plan")
        root.start(record)
    task = load_task(plan.protocol.task, plan.data, split=plan.protocol.split, n=plan.n)
    owned = executor is None
    executor = executor_for(ex) if owned else executor
    walls = dict((root.summary() or {}).get("wall_seconds", {}))
    board = ProgressBoard()
    log = log or board.write
    try:
        with listening(board):  # the decodes' steps, this process' and its workers'
            audits = _run_steps(_main_steps(plan, task, lay, ex), executor, board, log, walls)
            main = dict(zip(plan.models, audits))
            _run_steps(_control_steps(plan, task, lay, ex, main), executor, board, log, walls)
    finally:
        board.close()
        if owned:
            executor.close()
    study = TrainingAudit.read(root)
    _finish_controls(plan, lay, study)
    study = dataclasses.replace(TrainingAudit.read(root), wall_seconds=walls)
    with root.writer():
        root.start(study.record)
        Run.write_to(study, root)
        root.finish(study.summary())
    return dataclasses.replace(study, record=root.record())
