"""The temperature and length controls: would a lost answer come back, were long traces cut off?

Both rerun part of a comparison's audits under a protocol that differs in one field
(:func:`reachlens.studies.rerun`, which first checks that the model and data are those the audit was made
with), and each is a run of its own kind, holding its reruns:

* **Temperature** (:func:`temperature_control`, kind ``temperature_control``): the questions that *left* the
  reachable set (reachable by the base, unreachable by the trained model at the protocol's temperature) are
  re-probed with the trained model at other temperatures, with the same K and the same seed stream (sample j
  of question q still draws from seed (seed, q, j)). Per temperature: how many are reachable again, the share
  and its Wilson interval. A share near 0 at every temperature says the answer is gone, not merely cooled
  out of the sampler's reach.
* **Length** (:func:`length_control`, kind ``length_control``): both audits of a pair rerun with a larger
  ``max_new_tokens``. When the trained model's outputs hit the length limit more often than the base's
  (truncation parity, :func:`~reachlens.studies.compare.truncation_parity`), part of its loss can be
  outputs cut before the answer; the deltas at the longer budget say how much.

The budget and prompt-format controls are reruns too (``k=``, ``prompt_format=``); a training study runs all
four (:mod:`reachlens.studies.training_audit`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig
from reachlens.runner import Executor
from reachlens.runner.study import Child, Progress, Study, run_children, run_study
from reachlens.store import Run, RunDir, RunRecord, register_kind, rerun_name, single_name
from reachlens.studies.auditing import AuditResult
from reachlens.studies.compare import Comparison, compare, delta_row
from reachlens.studies.reruns import rerun_child
from reachlens.stats import wilson_interval
from reachlens.tasks.base import Task

__all__ = ["LengthControl", "TemperatureControl", "left_reachable", "length_control", "length_table",
           "reprobe_left", "temperature_control", "temperature_table"]

TEMPERATURE_COLUMNS = ["temperature", "source", "n_reprobed", "n_reachable", "share", "share_lo", "share_hi"]
_LENGTH_CHILDREN = ("base", "trained", "longer_base", "longer_trained")
LENGTH_COLUMNS = ["max_new_tokens", "truncated_samples_base", "truncated_samples_trained", "D_base", "D_trained",
                  "delta_D", "delta_D_lo", "delta_D_hi", "mcnemar_realized_p", "O_K_base", "O_K_trained",
                  "delta_O_K", "delta_O_K_lo", "delta_O_K_hi", "mcnemar_reachable_p"]


def _result(a: AuditResult | str | Path) -> AuditResult:
    return a if isinstance(a, AuditResult) else AuditResult.load(a)


def _check_temperatures(temperatures: Sequence[float]) -> tuple[float, ...]:
    temps = tuple(float(t) for t in temperatures)
    if not temps:
        raise ReachlensError("temperatures=() is empty; give at least one, e.g. (0.6, 1.0, 1.2)")
    bad = [t for t in temps if not t > 0]
    if bad:
        raise ReachlensError(f"temperature {bad[0]!r} must be > 0 (a K-sample probe at temperature 0 repeats "
                             "the greedy answer)")
    return temps


def left_reachable(comparison: Comparison) -> list[str]:
    """The question ids that left the reachable set (base-reachable, trained-unreachable), in order."""
    q = comparison.questions
    return q.loc[q["reach_fate"] == "left", "question_id"].tolist()


def _name_of(result: AuditResult, default: str) -> str:
    return result.location.name if result.location is not None else default


# --- temperature --------------------------------------------------------------------------------------
def temperature_table(comparison: Comparison, reprobes: Mapping[float, AuditResult]) -> pd.DataFrame:
    """Temperature x (n re-probed, n reachable again, share, its 95 % Wilson interval).

    The first row is the audit itself (``source="audit"``): at the protocol's temperature none of the
    left questions is reachable by definition. Each re-probe counts only the questions that left.
    """
    left = left_reachable(comparison)
    rows = [{"temperature": comparison.trained.protocol.temperature, "source": "audit", "n_reprobed": len(left),
             "n_reachable": 0}]
    for temp in sorted(reprobes):
        q = reprobes[temp].questions
        q = q[q["question_id"].isin(left)]
        rows.append({"temperature": temp, "source": "re-probe", "n_reprobed": len(q),
                     "n_reachable": int(q["reachable"].sum())})
    df = pd.DataFrame(rows, columns=TEMPERATURE_COLUMNS[:4])
    n, hit = df["n_reprobed"].to_numpy(), df["n_reachable"].to_numpy()
    df["share"] = [h / m if m else float("nan") for h, m in zip(hit, n)]
    df["share_lo"], df["share_hi"] = wilson_interval(hit, n)
    return df[TEMPERATURE_COLUMNS]


@register_kind
@dataclass(frozen=True)
class TemperatureControl(Run):
    """The temperature control of one pair: its comparison, and the trained model's re-probes of the questions
    that left the reachable set, by temperature (each an audit run, in a sub-directory named by
    :func:`~reachlens.store.rerun_name`, listed in its record's ``reruns`` before they run). The comparison's two
    audits are its children (:meth:`~reachlens.store.Run.save`)."""

    kind: ClassVar[str] = "temperature_control"
    record_fields: ClassVar[dict[str, tuple[type, ...]]] = {
        "children.base": (str,), "children.trained": (str,), "options.temperatures": (list,),
        "reruns": (dict, type(None))}

    comparison: Comparison = field(repr=False)
    temperatures: tuple[float, ...]
    reprobes: dict[float, AuditResult] = field(default_factory=dict, repr=False)
    name: str = "trained"
    """The trained checkpoint's name in its reruns' directory names."""

    def make_record(self) -> RunRecord:
        b, t = self.comparison.base, self.comparison.trained
        left = left_reachable(self.comparison)
        reruns = {f"{x:g}": rerun_name(self.name, {"questions": left, "temperature": x}) for x in self.temperatures}
        return RunRecord.new(self.kind, t.protocol, {"base": b.model, "trained": t.model}, t.data or None,
                             {"temperatures": list(self.temperatures)}, extra={"reruns": reruns if left else {}},
                             exec=t.record.exec)

    def children(self) -> dict[str, Run]:
        return {"base": self.comparison.base, "trained": self.comparison.trained}

    def table(self) -> pd.DataFrame:
        return temperature_table(self.comparison, self.reprobes)

    def tables(self) -> dict[str, pd.DataFrame]:
        return {self.kind: self.table()}

    def summary(self) -> dict[str, Any]:
        table = self.table()
        return {"left": int(table["n_reprobed"].iloc[0]),
                "temperatures": {f"{r.temperature:g}": {"n_reprobed": r.n_reprobed, "n_reachable": r.n_reachable,
                                                        "share": r.share, "share_ci": [r.share_lo, r.share_hi]}
                                 for r in table[table["source"] == "re-probe"].itertuples()}}

    @staticmethod
    def reprobes_in(run: RunDir) -> dict[float, AuditResult]:
        """The finished re-probes a temperature control's directory holds, by temperature."""
        reruns = run.record().extra.get("reruns", {})
        found = {}
        for t, name in reruns.items():
            folder = run.path / single_name(name, "re-probe folder name")  # never a path out of the control
            if RunDir(folder).is_complete():
                found[_temperature(t, run)] = AuditResult.load(folder)
        return found

    @classmethod
    def read(cls, run: RunDir) -> TemperatureControl:
        record = run.record()
        comparison = compare(Run.read_child(run, "base"), Run.read_child(run, "trained"))
        return cls(comparison, tuple(record.options["temperatures"]), cls.reprobes_in(run), record=record,
                   location=run.path)


def _temperature(t: str, run: RunDir) -> float:
    try:
        return float(t)
    except ValueError:
        raise ReachlensError(f"{str(run.header_path)!r} names a re-probe at temperature {t!r}, not a number; it was "
                             "damaged or edited by hand") from None


@dataclass(frozen=True)
class _TemperatureStudy(Study):
    """The temperature control as a study: its children the trained model's re-probes, one per temperature."""

    model: Any
    task: Task
    comparison: Comparison
    temperatures: tuple[float, ...]
    out: Path | None
    exec_config: ExecConfig
    name: str

    @functools.cached_property
    def control(self) -> TemperatureControl:
        return TemperatureControl(self.comparison, self.temperatures, name=self.name)

    def root_record(self) -> RunRecord:
        return self.control.record

    @functools.cached_property
    def reprobes(self) -> list[Child]:
        left, t = left_reachable(self.comparison), self.comparison.trained
        spec = t.model.get("spec", self.name)
        return [rerun_child(t, role=f"{temp:g}", label=f"re-probe {spec} T={temp:g}", model=self.model,
                            task=self.task, into=self.out, name=self.name, exec_config=self.exec_config,
                            questions=left, temperature=temp) for temp in self.temperatures] if left else []

    def children(self, done: Mapping[str, Any]) -> list[Child]:
        return self.reprobes

    def compose(self, done: Mapping[str, Any], seconds: Mapping[str, float]) -> TemperatureControl:
        runs = {temp: done[f"{temp:g}"] for temp in self.temperatures if f"{temp:g}" in done}
        return dataclasses.replace(self.control, reprobes=runs, record=self.control.record)


def _temperature_study(model, task: Task, base, trained, temperatures: Sequence[float], out: str | Path | None,
                       exec_config: ExecConfig | None, name: str | None = None) -> _TemperatureStudy:
    temps = _check_temperatures(temperatures)
    b, t = _result(base), _result(trained)  # read each audit directory once
    return _TemperatureStudy(model, task, compare(b, t), temps, None if out is None else Path(out),
                             exec_config or ExecConfig(), name or _name_of(t, "trained"))


def reprobe_left(
    model, task: Task, base: AuditResult | str | Path, trained: AuditResult | str | Path,
    temperatures: Sequence[float], *, into: str | Path | None = None, name: str | None = None,
    exec_config: ExecConfig | None = None, executor: Executor | None = None, progress: Progress | None = None,
) -> dict[float, AuditResult]:
    """Audit ``model`` (the trained checkpoint) on the questions that left the reachable set, at each
    temperature (:func:`~reachlens.studies.rerun` with ``questions=`` and ``temperature=``); written into the
    folder ``into`` (resumable) when given.

    ``progress(label, done, total)`` after each batch. No question left: nothing runs, ``{}``.
    """
    study = _temperature_study(model, task, base, trained, temperatures, into, exec_config, name)
    done = run_children(study.reprobes, executor, progress=progress)
    return study.compose(done, {}).reprobes


def temperature_control(
    model, task: Task, base: AuditResult | str | Path, trained: AuditResult | str | Path,
    temperatures: Sequence[float] = (0.6, 1.0, 1.2), *, out: str | Path | None = None,
    exec_config: ExecConfig | None = None, executor: Executor | None = None, progress: Progress | None = None,
) -> TemperatureControl:
    """Re-probe the questions that left the reachable set at each temperature (:func:`reprobe_left`); the control
    run (its table: :meth:`TemperatureControl.table`), written to ``out`` with its re-probes when given
    (:func:`~reachlens.runner.study.run_study`: a re-run resumes). ``model`` is the trained checkpoint.

    >>> temperature_control(load_model("zoo:dapo"), load_task("arith", n=300), "runs/base", "runs/dapo").table()  # doctest: +SKIP
    """
    study = _temperature_study(model, task, base, trained, temperatures, out, exec_config)
    return run_study(study, executor, progress=progress)


# --- length -------------------------------------------------------------------------------------------
def length_table(before: Comparison, after: Comparison) -> pd.DataFrame:
    """One row per decode length (the audits', then the longer rerun's): truncation shares, D and O_K on
    both sides and their deltas with paired intervals and McNemar p-values."""
    rows = []
    for c in (before, after):
        s = c.summary()
        d = delta_row(s)
        rows.append({**d, "max_new_tokens": c.base.protocol.max_new_tokens,
                     "truncated_samples_base": s["truncation"]["samples_base"],
                     "truncated_samples_trained": s["truncation"]["samples_trained"],
                     "mcnemar_realized_p": d["p_realized"], "mcnemar_reachable_p": d["p_reachable"]})
    return pd.DataFrame(rows, columns=LENGTH_COLUMNS)


@register_kind
@dataclass(frozen=True)
class LengthControl(Run):
    """The length control of one pair: its comparison at the audits' decode length and at a longer one (both
    checkpoints rerun with ``max_new_tokens``). Its children are the four audits: ``base`` and ``trained``, and
    their reruns ``longer_base`` and ``longer_trained`` (:meth:`~reachlens.store.Run.save`)."""

    kind: ClassVar[str] = "length_control"
    record_fields: ClassVar[dict[str, tuple[type, ...]]] = {
        "options.max_new_tokens": (int,), **{f"children.{name}": (str,) for name in _LENGTH_CHILDREN}}

    before: Comparison = field(repr=False)
    after: Comparison = field(repr=False)

    def make_record(self) -> RunRecord:
        return self.record_of(self.before, self.after.base.protocol.max_new_tokens)

    @classmethod
    def record_of(cls, before: Comparison, max_new_tokens: int) -> RunRecord:
        """The record of the length control of ``before`` at ``max_new_tokens``."""
        b, t = before.base, before.trained
        return RunRecord.new(cls.kind, t.protocol, {"base": b.model, "trained": t.model}, t.data or None,
                             {"max_new_tokens": max_new_tokens}, exec=t.record.exec)

    def children(self) -> dict[str, Run]:
        runs = (self.before.base, self.before.trained, self.after.base, self.after.trained)
        return dict(zip(_LENGTH_CHILDREN, runs))

    def table(self) -> pd.DataFrame:
        return length_table(self.before, self.after)

    def tables(self) -> dict[str, pd.DataFrame]:
        return {self.kind: self.table()}

    def summary(self) -> dict[str, Any]:
        return {"truncation": self.before.summary()["truncation"], "lengths": self.table().to_dict("records")}

    @classmethod
    def read(cls, run: RunDir) -> LengthControl:
        b, t, longer_b, longer_t = (Run.read_child(run, name) for name in _LENGTH_CHILDREN)
        return cls(compare(b, t), compare(longer_b, longer_t), record=run.record(), location=run.path)


@dataclass(frozen=True)
class _LengthStudy(Study):
    """The length control as a study: its children both audits' reruns at the longer decode."""

    before: Comparison
    max_new_tokens: int
    models: tuple[Any, Any]
    task: Task | None
    into: Path | None
    names: tuple[str, str]
    out: Path | None
    exec_config: ExecConfig

    def check(self) -> None:
        if self.max_new_tokens <= self.before.base.protocol.max_new_tokens:
            raise ReachlensError(f"max_new_tokens={self.max_new_tokens!r} must exceed the audit's "
                                 f"{self.before.base.protocol.max_new_tokens} to test for truncation")

    def root_record(self) -> RunRecord:
        return LengthControl.record_of(self.before, self.max_new_tokens)

    @functools.cached_property
    def reruns(self) -> list[Child]:
        runs = (self.before.base, self.before.trained)
        return [rerun_child(r, role=role, label=f"{r.model.get('spec', n)} max_new_tokens={self.max_new_tokens}",
                            model=m, task=self.task, into=self.into, name=n, exec_config=self.exec_config,
                            max_new_tokens=self.max_new_tokens)
                for role, r, m, n in zip(_LENGTH_CHILDREN[2:], runs, self.models, self.names)]

    def children(self, done: Mapping[str, Any]) -> list[Child]:
        return self.reruns

    def compose(self, done: Mapping[str, Any], seconds: Mapping[str, float]) -> LengthControl:
        return LengthControl(self.before, compare(done["longer_base"], done["longer_trained"]))


def length_control(
    base: AuditResult | str | Path, trained: AuditResult | str | Path, max_new_tokens: int, *,
    models: tuple[Any, Any] = (None, None), task: Task | None = None, into: str | Path | None = None,
    names: tuple[str, str] = ("base", "trained"), out: str | Path | None = None,
    exec_config: ExecConfig | None = None, executor: Executor | None = None, progress: Progress | None = None,
) -> LengthControl:
    """Both audits rerun at ``max_new_tokens`` (above their own; :func:`~reachlens.studies.rerun`), into the folder
    ``into`` (default ``out``), as ``names`` (the reruns' directory names start with them); the control run,
    written to ``out`` when given (:func:`~reachlens.runner.study.run_study`: a re-run resumes). ``models`` are the
    checkpoints (default: the specs the audits recorded).

    >>> length_control("runs/base", "runs/sft", 256, out="runs/length").table()  # doctest: +SKIP
    """
    before = compare(_result(base), _result(trained))  # refuses unlike audits before any model loads
    into = into if into is not None else out
    study = _LengthStudy(before, max_new_tokens, tuple(models), task, None if into is None else Path(into),
                         tuple(names), None if out is None else Path(out), exec_config or ExecConfig())
    return run_study(study, executor, progress=progress)
