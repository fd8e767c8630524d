"""The causal sweeps' runs and their measurement: what a sweep's condition is, how it is decoded and scored.

* :class:`CausalResult` (kinds ``silence``, ``steer``, ``units``): a sweep's table, its per-question outcomes and
  its record;
* :class:`Condition`: one intervention (a hook factory of :mod:`reachlens.interventions`) and the sets it runs on;
  :class:`ConditionSpec` says the same with data alone (a factory's name and arguments), so a condition travels to
  an executor's workers and is made there on the worker's own model;
* :func:`evaluate_conditions`: the greedy generation of the sets under every condition, each an arm of one decode
  (:func:`~reachlens.runner.deploy_arms_and_grade`), or each alone (:func:`evaluate_hooks`); :func:`outcome`: the
  repair and break rates of one condition.

The sweeps themselves are :mod:`reachlens.studies.causal`; they run on the runner through
:mod:`reachlens.studies.causal_job`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig
from reachlens.interventions import FwdHook, random_displacement, steering, unit_ablation, zero_ablation
from reachlens.records import CAUSAL_COLUMNS
from reachlens.runner import deploy_arms_and_grade
from reachlens.stats import wilson_interval
from reachlens.store import Run, RunDir, register_kind
from reachlens.studies.recognition import EvalSets, generate_and_grade, generation_protocol
from reachlens.tasks.base import Task

__all__ = ["CausalResult", "Condition", "ConditionSpec", "FACTORIES", "SWEEPS", "SilenceSweep", "SteerSweep",
           "UnitsSweep", "evaluate_conditions", "evaluate_hooks", "flip_rate", "outcome", "set_ids"]


@dataclass(frozen=True)
class CausalResult(Run):
    """A sweep's table (one row per condition), its per-question outcomes, and what made it: a run of kind
    ``silence``, ``steer`` or ``units`` (one subclass each). Its options (the record's) are the sweep's
    settings, ``meta``; its tables are ``KIND`` (the conditions), ``KIND_per_question`` and, for a units sweep,
    ``units_ranking``."""

    kind: ClassVar[str]
    record_fields: ClassVar[dict[str, tuple[type, ...]]] = {"options.sets": (dict, type(None))}
    extra_tables: ClassVar[tuple[str, ...]] = ()
    """Names of the further tables a sweep of this kind has (``ranking`` for units)."""

    table: pd.DataFrame = field(repr=False)
    per_question: pd.DataFrame = field(repr=False)
    extra: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)
    """Further tables by name (the unit ranking of a units sweep). Its record (always given): the greedy protocol
    of the sets, the sweep's options (``meta``), model, data."""

    @property
    def meta(self) -> dict[str, Any]:
        """The sweep's settings (its record's options)."""
        return self.record.options

    def summary(self) -> dict[str, Any]:
        """How many conditions were measured, on how many failure and healthy questions."""
        sets = self.meta.get("sets", {})
        return {"kind": self.kind, "n_conditions": len(self.table), "n_failure": sets.get("n_failure"),
                "n_healthy": sets.get("n_healthy"), "model": self.record.model.get("spec")}

    def tables(self) -> dict[str, pd.DataFrame]:
        return {self.kind: self.table, f"{self.kind}_per_question": self.per_question,
                **{f"{self.kind}_{name}": df for name, df in self.extra.items()}}

    def report_tables(self) -> dict[str, pd.DataFrame]:
        return {self.kind: self.table, **{f"{self.kind}_{name}": df for name, df in self.extra.items()}}

    @classmethod
    def read(cls, run: RunDir) -> CausalResult:
        return cls(run.read_table(cls.kind), run.read_table(f"{cls.kind}_per_question"),
                   {name: run.read_table(f"{cls.kind}_{name}") for name in cls.extra_tables}, record=run.record(),
                   location=run.path)


@register_kind
class SilenceSweep(CausalResult):
    """:func:`silence_sweep`'s run."""

    kind = "silence"


@register_kind
class SteerSweep(CausalResult):
    """:func:`steer_sweep`'s run."""

    kind = "steer"


@register_kind
class UnitsSweep(CausalResult):
    """:func:`units_sweep`'s run."""

    kind = "units"
    extra_tables = ("ranking",)


SWEEPS: dict[str, type[CausalResult]] = {cls.kind: cls for cls in (SilenceSweep, SteerSweep, UnitsSweep)}

"""Each kind of sweep's run class, by kind."""


# --- measurements --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Condition:
    """One condition of a sweep: its name in the tables, its intervention, and the questions it runs."""

    name: str
    hooks: Callable[..., list[FwdHook]] | None = None
    """The intervention's hook factory, called as ``hooks(arm=ARM)`` (the ``arm=`` of the factories in
    :mod:`reachlens.interventions`: None acts on every row, a key only on that arm's rows); None: the
    plain model."""
    which: str = "both"
    """``both``, ``failure`` or ``healthy``: the sets it runs on."""


FACTORIES: dict[str, Callable[..., list[FwdHook]]] = {
    "zero": zero_ablation, "displace": random_displacement, "steer": steering, "units": unit_ablation}
"""The hook factories a :class:`ConditionSpec` names: each called as ``factory(model, *args, **options, arm=ARM)``."""


@dataclass(frozen=True)
class ConditionSpec:
    """A :class:`Condition` as data (picklable): made on a worker's own model by :meth:`condition`."""

    name: str
    factory: str | None = None
    """A key of :data:`FACTORIES` (``zero``, ``steer``, ``units``); None: the plain model."""
    args: tuple[Any, ...] = ()
    """The factory's arguments after the model (layer, component; layer, vector, alpha, site; layer, units)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The factory's keyword arguments (a displacement's ``seed``)."""
    which: str = "both"

    def condition(self, model) -> Condition:
        hooks = None if self.factory is None else partial(FACTORIES[self.factory], model, *self.args, **self.options)
        return Condition(self.name, hooks, self.which)


def set_ids(sets: EvalSets, which: str) -> list[str]:
    if which not in ("both", "failure", "healthy"):
        raise ReachlensError(f"which={which!r} must be 'both', 'failure' or 'healthy'")
    return (list(sets.failure) if which != "healthy" else []) + (list(sets.healthy) if which != "failure" else [])


def _labelled(gen: pd.DataFrame, sets: EvalSets, condition: str) -> pd.DataFrame:
    """A deployment table as a condition's ``CAUSAL_COLUMNS`` (its set and condition added)."""
    if gen.empty:
        return pd.DataFrame(columns=CAUSAL_COLUMNS)
    failure = set(sets.failure)
    gen["set"] = ["failure" if q in failure else "healthy" for q in gen["question_id"]]
    gen["condition"] = condition
    return gen[CAUSAL_COLUMNS]


def evaluate_hooks(
    model, task: Task, sets: EvalSets, hooks: Sequence[FwdHook] = (), condition: str = "none",
    *, which: str = "both",
) -> pd.DataFrame:
    """Greedy generation of the failure set and/or healthy panel with ``hooks`` live; ``CAUSAL_COLUMNS``."""
    ids = set_ids(sets, which)
    if not ids:
        return pd.DataFrame(columns=CAUSAL_COLUMNS)
    with model.hooks(fwd_hooks=list(hooks)):
        gen = generate_and_grade(model, task, sets.protocol, ids, max_batch_rows=sets.config.max_batch_rows)
    return _labelled(gen, sets, condition)


def evaluate_conditions(
    model, task: Task, sets: EvalSets, conditions: Sequence[Condition], *, one_at_a_time: bool = False,
) -> list[pd.DataFrame]:
    """Per condition, the greedy generation of its questions under its intervention (``CAUSAL_COLUMNS``).

    Every condition is an arm of one decode (:func:`~reachlens.runner.deploy_arms_and_grade`): the
    per-arm hooks of all conditions are attached at once and each question's rows of every arm decode
    side by side, its prompt prefilled once per arm. ``one_at_a_time`` decodes each condition alone
    instead, its hooks acting on every row (:func:`evaluate_hooks`): the same tables, one decode each.
    """
    if one_at_a_time:
        return [evaluate_hooks(model, task, sets, c.hooks(arm=None) if c.hooks else (), c.name, which=c.which)
                for c in conditions]
    arms = [None if c.hooks is None else (c.name, i) for i, c in enumerate(conditions)]
    hooks = [h for c, arm in zip(conditions, arms) if c.hooks is not None for h in c.hooks(arm=arm)]
    plan = [(arm, set_ids(sets, c.which)) for c, arm in zip(conditions, arms)]
    if not any(ids for _, ids in plan):
        return [pd.DataFrame(columns=CAUSAL_COLUMNS) for _ in conditions]
    with model.hooks(fwd_hooks=hooks):
        gens = deploy_arms_and_grade(model, task, generation_protocol(task, sets.protocol), plan,
                                     ExecConfig(max_batch_rows=sets.config.max_batch_rows))
    return [_labelled(gen, sets, c.name) for gen, c in zip(gens, conditions)]


def outcome(per_question: pd.DataFrame) -> dict[str, Any]:
    """Repair and break rates (with counts and 95 % Wilson intervals) of one condition's per-question outcomes."""
    fail = per_question[per_question["set"] == "failure"]
    healthy = per_question[per_question["set"] == "healthy"]
    n_rep, n_brk = int(fail["realized"].sum()), int((~healthy["realized"].astype(bool)).sum())
    rep_lo, rep_hi = wilson_interval(n_rep, len(fail))
    brk_lo, brk_hi = wilson_interval(n_brk, len(healthy))
    return {
        "repair": n_rep / len(fail) if len(fail) else math.nan, "break": n_brk / len(healthy) if len(healthy) else math.nan,
        "n_repaired": n_rep, "n_failure": len(fail), "n_broken": n_brk, "n_healthy": len(healthy),
        "repair_lo": rep_lo, "repair_hi": rep_hi, "break_lo": brk_lo, "break_hi": brk_hi,
    }


def flip_rate(per_question: pd.DataFrame, reference: pd.DataFrame) -> float:
    """The share of questions whose deployed answer under a condition differs from ``reference``'s (the unhooked
    model's): how often the intervention merely changes the answer, right or wrong. NaN without common questions."""
    ref = dict(zip(reference["question_id"], reference["deployed_answer"].astype(str)))
    pairs = [(a, ref[q]) for q, a in zip(per_question["question_id"], per_question["deployed_answer"].astype(str))
             if q in ref]
    return sum(a != b for a, b in pairs) / len(pairs) if pairs else math.nan
