"""A probe run (kind ``probe``): one candidate bank of a model on a task under several probes.

    DIR/run.json            the run record: the greedy protocol of the deployment (decode length, prompt
                            format, seed, grader, stops), options (the probes' labels, the named unions),
                            model and data identity, exec
    DIR/parts/UU.SSSSS.parquet  one part per finished slice of each unit (:mod:`reachlens.probes.decode`)
    DIR/candidates.parquet  the bank (:data:`~reachlens.probes.bank.BANK_COLUMNS`), written when it completes
    DIR/(the summary)      D and O per probe, per arm and per named union (intervals), selectors and the
                            selection gap, the fix-set overlap, recovery, the budget-matched comparison, the
                            placebo comparison (:mod:`reachlens.probes.summary`)

Resumable: a slice is appended as a part when it is decoded, so a run killed at any moment resumes from its
last part; the slices are fixed, so the bank equals an uninterrupted run's. Deterministic: every candidate
depends on (seed, question, candidate index) only.

>>> run = probe(load_model("zoo:base"), load_task("arith", n=50),
...             ["sampling:k=6:temperature=0.7", "graft:kind=zero,noise:layer=3"], out="runs/probe")  # doctest: +SKIP
>>> run.summary()["probes"]["graft:kind=zero,noise:layer=3"]["O"]  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig, model_exec
from reachlens.models import identity_of, load_model
from reachlens.probes.activation import ArmProbe
from reachlens.probes.bank import BANK_COLUMNS, GREEDY, ORDER, union_terms
from reachlens.probes.decode import decode_slice, plan_units, unit_slices
from reachlens.probes.families import Sampling
from reachlens.probes.spec import Probe, parse_probe
from reachlens.probes.summary import default_unions, probe_summary, probe_tables
from reachlens.protocol import Protocol
from reachlens.runner.decode import check_budget, check_context
from reachlens.store import RecordedProtocol, Run, RunDir, RunRecord, register_kind
from reachlens.store.files import fsync_dir, write_parquet
from reachlens.tasks import load_task
from reachlens.tasks.base import Task
from reachlens.tasks.chat import bind_chat

__all__ = ["ProbeDir", "ProbeRun", "probe"]

_PART_RE = re.compile(r"(\d{2})\.(\d{5})\.parquet")


class ProbeDir(RunDir):
    """A probe run's directory: finished slices as parts until the bank is whole."""

    kind = "probe"

    def _temp_folders(self) -> list[Path]:
        return [self.path, self.path / "parts"]

    def parts(self) -> dict[tuple[int, int], Path]:
        """(unit, slice start) -> the part holding it."""
        folder = self.path / "parts"
        found = (_PART_RE.fullmatch(p.name) for p in folder.iterdir()) if folder.is_dir() else ()
        return {(int(m.group(1)), int(m.group(2))): folder / m.group(0) for m in found if m}

    def append(self, unit: int, start: int, rows: pd.DataFrame) -> None:
        """Record one decoded slice (durably)."""
        self._require_lock()
        (self.path / "parts").mkdir(exist_ok=True)
        write_parquet(self.path / "parts" / f"{unit:02d}.{start:05d}.parquet", rows)

    def finish(self, summary: dict[str, Any]) -> None:
        """Mark the run complete (its bank is written), then remove its parts."""
        super().finish(summary)
        for p in self.parts().values():
            p.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            (self.path / "parts").rmdir()  # only if empty
        fsync_dir(self.path)


@register_kind
@dataclass(frozen=True)
class ProbeRun(RecordedProtocol, Run):
    """A probe run: its record and its candidate bank; everything else is computed from the bank."""

    kind: ClassVar[str] = "probe"
    dir_class: ClassVar[type[RunDir]] = ProbeDir

    record: RunRecord
    candidates: pd.DataFrame = field(repr=False)
    location: Path | None = field(default=None, compare=False)

    @property
    def probes(self) -> list[str]:
        """The probes' labels, in run order."""
        return list(self.record.options["probes"])

    @property
    def unions(self) -> list[str]:
        """The named unions the summary reports."""
        return list(self.record.options["unions"])

    @functools.cached_property
    def analysis(self) -> dict[str, pd.DataFrame]:
        """Every table of the run (:func:`~reachlens.probes.summary.probe_tables`), computed once from the bank."""
        return probe_tables(self.candidates, self.probes, self.unions)

    def summary(self) -> dict[str, Any]:
        return probe_summary(self.candidates, self.probes, self.unions, tables=self.analysis,
                             model=self.record.model.get("spec"), task=self.protocol.task)

    def tables(self) -> dict[str, pd.DataFrame]:
        return {"candidates": self.candidates}

    @classmethod
    def read(cls, run: RunDir) -> ProbeRun:
        return cls(run.record(), run.read_table("candidates"), location=run.path)


def _probes(probes: Sequence[str | Probe]) -> list[Probe]:
    if not probes:
        raise ReachlensError("a probe run needs at least one probe, e.g. probes=['sampling:k=6']")
    made = [parse_probe(p) if isinstance(p, str) else p for p in probes]
    labels = [p.label for p in made]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ReachlensError(f"probe {twice[0]!r} is given twice; give each probe once")
    owner: dict[str, str] = {}
    for p in made:
        for arm in dict.fromkeys(c.arm for c in p.candidates("q", 1 << 20, 0)) if isinstance(p, ArmProbe) else ():
            if owner.setdefault(arm, p.label) != p.label:  # the reach of an arm is read by its name: never pool two
                raise ReachlensError(f"probes {owner[arm]!r} and {p.label!r} both make arm {arm!r}; merge them into "
                                     f"one probe, or give one its own seed (seed=N)")
    return made


def _unions(unions: Sequence[str] | None, probes: Sequence[Probe]) -> list[str]:
    if unions is None:
        return default_unions([p.label for p in probes])
    out = []
    for u in unions:
        out.append(u if u.startswith("O[") else f"O[{u}]")
        if len(union_terms(out[-1])) < 2:
            raise ReachlensError(f"union {u!r} names one source; name two or more joined by +, e.g. 'sampling+graft'")
    return out


def _protocol(model, task: Task, protocol: Protocol | None) -> Protocol:
    protocol = protocol or Protocol.greedy(task.name.split(":")[0], max_new_tokens=task.max_new_tokens or 256)
    if not protocol.is_greedy:
        raise ReachlensError(f"a probe run's protocol is the deployment's, greedy (Protocol.greedy(...)); not "
                             f"k={protocol.k}, temperature={protocol.temperature}: name samples as a probe "
                             f"('sampling:k={protocol.k}:temperature={protocol.temperature:g}')")
    return bind_chat(protocol.resolved(task), getattr(model, "tokenizer", None), model=str(identity_of(model).get("spec")))


def _assemble(parts: dict[tuple[int, int], pd.DataFrame], task: Task, labels: Sequence[str]) -> pd.DataFrame:
    bank = pd.concat([parts[k] for k in sorted(parts)], ignore_index=True)
    order = {q.question_id: i for i, q in enumerate(task.questions)}
    rank = {GREEDY: -1, **{label: i for i, label in enumerate(labels)}}
    bank["question_order"] = bank["question_id"].map(order)
    bank["probe_order"] = bank["probe"].map(rank)
    return bank.sort_values(ORDER, kind="stable").reset_index(drop=True)[BANK_COLUMNS]


def _record(model, task: Task, probes: Sequence[Probe], protocol: Protocol, exec_config: ExecConfig,
            unions: Sequence[str] | None) -> RunRecord:
    """The run's record, after refusing (before anything is decoded) what its probes cannot do here."""
    for p in probes:
        p.check(model, protocol)
        if isinstance(p, Sampling):
            check_budget(p.protocol(protocol), exec_config.max_batch_rows)
    check_context(model, task, protocol)
    options = {"probes": [p.label for p in probes], "unions": _unions(unions, probes)}
    return RunRecord.new("probe", protocol, identity_of(model), task.data_identity, options,
                         exec=exec_config.recorded(model_exec(model)))


def probe(
    model, task: Task | str, probes: Sequence[str | Probe], *, out: str | os.PathLike | None = None,
    protocol: Protocol | None = None, exec_config: ExecConfig | None = None, unions: Sequence[str] | None = None,
    n: int | None = None, progress: Callable[[int, int], None] | None = None,
) -> ProbeRun:
    """Decode a candidate bank of ``model`` on ``task`` under ``probes`` and summarize it.

    Args:
        model: a TransformerBridge from :func:`reachlens.load_model`, or a spec (``"zoo:base"``).
        task: a task, or a registered task's name (with ``n``).
        probes: spec strings (``"sampling:k=6:temperature=0.7"``, ``"graft:kind=zero:layer=3"``) or probes.
        out: a run directory: slices are written as they finish, and a re-run resumes it.
        protocol: the deployment's protocol (greedy: decode length, prompt format, seed, grader, stops); None:
            ``Protocol.greedy`` with the task's decode length (256 when it has none).
        exec_config: batch rows and prefix sharing (``max_batch_rows`` fixes the slices).
        unions: named unions to report (``"sampling+graft"`` or ``"O[sampling+graft]"``); None: greedy with each
            family, and every family together.
        n: the first ``n`` questions of a task given by name.
        progress: called with (slices done, slices in all) after each slice.

    >>> run = probe("zoo:base", "arith", ["sampling:k=6", "graft:kind=zero:layer=3"], n=20)  # doctest: +SKIP
    """
    model = load_model(model) if isinstance(model, str) else model
    task = load_task(task, n=n) if isinstance(task, str) else task
    made = _probes(probes)
    exec_config = exec_config or ExecConfig()
    record = _record(model, task, made, _protocol(model, task, protocol), exec_config, unions)
    protocol, labels = record.protocol, [p.label for p in made]
    store = ProbeDir(out) if out is not None else None
    if store is not None:
        store.check_target()
        store.check_run(record)
        if store.is_complete():  # the same run, finished: read, not decoded again
            return ProbeRun.read(store)
    plan = [(u, s) for u in plan_units(made) for s in unit_slices(u, task, protocol, exec_config.max_batch_rows)]
    with store.writer() if store is not None else contextlib.nullcontext():
        if store is not None:
            store.start(record)
        parts = {k: pd.read_parquet(p) for k, p in store.parts().items()} if store is not None else {}
        for done, (unit, (start, stop)) in enumerate(plan):
            if (unit.index, start) not in parts:
                parts[unit.index, start] = decode_slice(model, task, protocol, unit, start, stop, exec_config)
                if store is not None:
                    store.append(unit.index, start, parts[unit.index, start])
            if progress is not None:
                progress(done + 1, len(plan))
        result = ProbeRun(record, _assemble(parts, task, labels))
        if store is None:
            return result
        store.write_table("candidates", result.candidates)
        store.finish(result.summary())
    done = dataclasses.replace(result, record=store.record(), location=store.path)
    done.__dict__["analysis"] = result.analysis  # the same bank: its tables, computed once
    return done
