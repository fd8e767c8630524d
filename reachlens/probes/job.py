"""The probe run as a job of the runner: :class:`ProbeJob` (what :func:`probe` runs), and its workers'
:class:`ProbeShard`.

A probe run is its units (:func:`~reachlens.probes.decode.plan_units`), each a list of fixed slices of the task's
questions; a slice of unit U at question S is the part ``(U, S)`` of the run's directory
(:class:`~reachlens.store.PartsDir`). So the run resumes from its parts after a kill, and its slices decode in this
process, a :class:`~reachlens.runner.ProcessPool` or on :class:`~reachlens.runner.RayExecutor` actors alike, the model
loaded as the run's :class:`~reachlens.execution.ExecConfig` says (device, dtype: recorded, checked on resume).

A part is whole when each of its questions has every candidate its unit decodes (the greedy row, each probe's full
budget): a part that is not is decoded again on resume, and the bank is checked again when it is assembled, so a
run is ``complete`` only with every question's every candidate.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.engine.memory import check_budget, check_rows
from reachlens.engine.tokens import encode_prompts
from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig
from reachlens.models import load_tokenizer
from reachlens.probes.activation import ArmProbe
from reachlens.probes.bank import BANK_COLUMNS, GREEDY, ORDER, bank_frame, family_of, union_terms
from reachlens.probes.decode import Decoder, check_whole, expected_rows, plan_units
from reachlens.probes.run import ProbeRun, check_bank
from reachlens.probes.spec import Probe, parse_probe
from reachlens.probes.summary import default_unions
from reachlens.protocol import Protocol
from reachlens.runner import (
    Executor,
    Opened,
    ResolvedModel,
    Slice,
    resolve_model,
    run_jobs,
)
from reachlens.runner.shard import ModelShard
from reachlens.store import PartKey, PartsDir, RunRecord
from reachlens.tasks import load_task
from reachlens.tasks.base import Task
from reachlens.tasks.chat import render_prompts

__all__ = ["ProbeJob", "ProbeShard", "probe"]

_REDO = "re-run the same probe command into this directory to decode its slice again"


@dataclass(frozen=True)
class ProbeShard(ModelShard):
    """What a worker needs to decode any slice of one probe run (sent once per run): the model, task and the
    deployment's greedy protocol (:class:`~reachlens.runner.shard.ModelShard`), and these."""

    probes: tuple[Probe, ...]
    exec_config: ExecConfig = field(default_factory=ExecConfig)

    @property
    def units(self) -> dict[int, Decoder]:
        return plan_units(self.probes)

    def check_model(self, model: Any) -> None:
        for p in self.probes:
            p.check(model, self.protocol)

    def decode(self, model: Any, part: Slice) -> dict[str, pd.DataFrame]:
        unit, start, stop = part
        return {"candidates": bank_frame(self.units[unit].decode(model, self.task, self.protocol, start, stop,
                                                                 self.exec_config))}


def _probes(probes: Sequence[str | Probe]) -> tuple[Probe, ...]:
    if not probes:
        raise ReachlensError("a probe run needs at least one probe, e.g. probes=['sampling:k=6']")
    made = [parse_probe(p) if isinstance(p, str) else p for p in probes]
    labels = [p.label for p in made]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ReachlensError(f"probe {twice[0]!r} is given twice; give each probe once")
    return tuple(made)


def _check_rows(probes: Sequence[Probe], task: Task, protocol: Protocol, max_batch_rows: int) -> None:
    """Refuse, by arithmetic alone (no candidate is made), a run whose slices hold more completions than memory
    takes (:func:`~reachlens.runner.check_rows`, the bound of the audit's ``k``): each unit's largest slice holds its
    questions times their candidates (the greedy row and each of its probes' budget)."""
    check_budget(dataclasses.replace(protocol, k=1), max_batch_rows)
    for unit in plan_units(probes).values():
        expected = unit.expected()
        per_question = sum(expected.values())
        questions = max((b - a for a, b in unit.slices(task, protocol, max_batch_rows)), default=0)
        own = [label for label in expected if label != GREEDY]
        fixed = per_question - sum(expected[label] for label in own)
        check_rows(questions * per_question, protocol.max_new_tokens,
                   f"probe {' and '.join(map(repr, own))}: {questions:,} question(s) decoded together, "
                   f"{per_question:,} candidates each:",
                   lambda fit: f"give it at most {max(fit // max(questions, 1) - fixed, 0):,} candidates per question "
                               "(its budget), or a shorter max_new_tokens")


def _check_distinct(probes: Sequence[Probe], protocol: Protocol) -> None:
    """Refuse two probes that decode the same candidates under two labels (one names the run's seed), and two
    probes that make an arm of one name (the reach of an arm is read by its name: never pool two)."""
    same: dict[str, str] = {}
    for p in probes:
        seed = getattr(p, "seed", None)
        key = dataclasses.replace(p, seed=None).label if seed is not None and seed == protocol.seed else p.label
        if same.setdefault(key, p.label) != p.label:
            raise ReachlensError(f"probes {same[key]!r} and {p.label!r} are the same probe (seed={seed} is the run's "
                                 f"seed): each candidate would be decoded twice under two labels; give it once")
    owner: dict[str, str] = {}
    for p in probes:
        for arm in p.arms() if isinstance(p, ArmProbe) else ():
            if owner.setdefault(arm, p.label) != p.label:
                raise ReachlensError(f"probes {owner[arm]!r} and {p.label!r} both make arm {arm!r}; merge them into "
                                     f"one probe, or give one its own seed (seed=N)")


def _unions(unions: Sequence[str] | None, probes: Sequence[Probe]) -> list[str]:
    """The named unions of a run (``O[A+B]``), each term checked against the run's probes before anything loads: a
    probe's label, a family of the run, ``greedy`` or ``arm:NAME`` of one of its arms."""
    labels = [p.label for p in probes]
    if unions is None:
        return default_unions(labels)
    names = list(dict.fromkeys([GREEDY, *map(family_of, labels), *labels]))
    arms = {arm for p in probes for arm in p.arms()}
    out = []
    for u in unions:
        out.append(u if u.startswith("O[") else f"O[{u}]")
        terms = union_terms(out[-1])
        if len(terms) < 2:
            raise ReachlensError(f"union {u!r} names one source; name two or more joined by +, e.g. 'sampling+graft'")
        for term in terms:
            if term not in names and not (term.startswith("arm:") and term[4:] in arms):
                near = difflib.get_close_matches(term, names, n=1)
                raise ReachlensError(f"union {u!r}: {term!r} names no probe, family or arm of this run"
                                     + (f" (did you mean {near[0]!r}?)" if near else "")
                                     + f"; it could be {', '.join(map(repr, names))}, or arm:NAME for one arm")
    return out


@dataclass(frozen=True)
class ProbeJob:
    """One probe run for the runner (:class:`~reachlens.runner.Job`): what :func:`probe` takes."""

    model: Any
    """A spec (loaded as :attr:`exec_config` says), a :class:`~reachlens.models.ModelSource` or a loaded model."""
    task: Task
    probes: tuple[Probe, ...]
    protocol: Protocol
    """The deployment's protocol: greedy (decode length, prompt format, seed, grader, stops)."""
    out: str | Path | None = None
    exec_config: ExecConfig = field(default_factory=ExecConfig)
    unions: tuple[str, ...] | None = None

    def check(self) -> None:
        """Everything that needs no model, in order: the greedy protocol, the rows each slice holds (counted), two
        probes that are one, each probe on the task (:meth:`~reachlens.probes.spec.Probe.check_task`), the unions'
        names."""
        if not self.protocol.is_greedy:
            p = self.protocol
            raise ReachlensError(f"a probe run's protocol is the deployment's, greedy (Protocol.greedy(...)); not "
                                 f"k={p.k}, temperature={p.temperature}: name samples as a probe "
                                 f"('sampling:k={p.k}:temperature={p.temperature:g}')")
        _check_rows(self.probes, self.task, self.protocol, self.exec_config.max_batch_rows)
        _check_distinct(self.probes, self.protocol)
        for p in self.probes:
            p.check_task(self.task, self.protocol)
        _unions(self.unions, self.probes)

    def resolve(self, in_process: bool) -> tuple[ProbeShard, RunRecord]:
        """The shard and record of the run: each probe's inputs read once (their SHA-256 in the record's options), the
        shortest prompt checked against every activation probe (with the tokenizer alone), the unions beside the
        identity (derived from the bank: a resume may name others)."""
        read = [p.read_inputs() for p in self.probes]
        probes = tuple(p for p, _ in read)
        inputs = {path: sha for _, found in read for path, sha in found.items()}
        r = resolve_model(self.model, self.task, self.protocol, self.exec_config, in_process)
        _check_prompts(probes, self.task, r)
        shard = ProbeShard(probes, self.exec_config, source=r.source, task=self.task, protocol=r.protocol,
                           model_id=r.model_id, model=r.model)
        options = {"probes": [p.label for p in probes], **({"inputs": inputs} if inputs else {})}
        extra = {"task_source": self.task.source, "n_questions": len(self.task), "unions": _unions(self.unions, probes)}
        return shard, RunRecord.new("probe", r.protocol, r.model_id, self.task.data_identity, options, extra, r.exec)

    def plan(self, shard: ProbeShard) -> list[Slice]:
        mbr = self.exec_config.max_batch_rows
        return [(u, a, b) for u, unit in shard.units.items() for a, b in unit.slices(self.task, shard.protocol, mbr)]

    def _missing(self, shard: ProbeShard, part: Slice, tables: dict[str, pd.DataFrame] | None) -> str | None:
        """What the part of slice ``part`` lacks (None: it is whole)."""
        if tables is None or "candidates" not in tables:
            return "it was never written"
        unit, start, stop = part
        ids = [q.question_id for q in self.task.questions[start:stop]]
        return check_whole(tables["candidates"], ids, shard.units[unit].expected())

    def todo(self, shard: ProbeShard, store: PartsDir | None) -> list[Slice]:
        """Every slice whose part is not whole (a damaged or cut part is decoded again)."""
        if store is None:
            return self.plan(shard)
        if (store.path / "candidates.parquet").is_file():  # the run completed once: its bank, whole, or all again
            bank = store.read_table("candidates")
            whole = check_whole(bank, [q.question_id for q in self.task.questions], expected_rows(shard.units))
            return [] if whole is None else self.plan(shard)
        parts = store.parts(_REDO)
        return [s for s in self.plan(shard) if self._missing(shard, s, parts.get(s[:2])) is not None]

    def finish(self, o: Opened) -> ProbeRun:
        """The bank, from every planned part (each checked whole), in task, probe and candidate order."""
        if o.was_complete:  # the same run, finished: read, not assembled again
            done = ProbeRun.read(o.store)
            o.store.finish(done.summary())
            return done  # its tables, computed once: the caller's summary() does not compute them again
        parts = o.store.parts(_REDO) if o.store is not None else o.parts
        for s in self.plan(o.shard):
            missing = self._missing(o.shard, s, parts.get(s[:2]))
            if missing:
                raise ReachlensError(f"probe run {str(o.store.path if o.store else 'in memory')!r}: the part of unit "
                                     f"{s[0]} at question {s[1]} is not whole ({missing}); {_REDO}")
        bank = _assemble({s[:2]: parts[s[:2]]["candidates"] for s in self.plan(o.shard)}, self.task,
                         [p.label for p in self.probes])
        check_bank(bank, [p.label for p in self.probes], [q.question_id for q in self.task.questions],
                   "the assembled bank", _REDO)
        result = ProbeRun(bank, record=o.store.record() if o.store is not None else o.record)
        if o.store is None:
            return result
        o.store.write_table("candidates", result.candidates)
        o.store.finish(result.summary())
        done = dataclasses.replace(result, record=o.store.record(), location=o.store.path)
        done.__dict__["analysis"] = result.analysis  # the same bank: its tables, computed once
        return done


def _check_prompts(probes: Sequence[Probe], task: Task, r: ResolvedModel) -> None:
    """Refuse an activation probe that cannot act on the task's shortest prompt (a graft position outside it), with
    the model's tokenizer alone: before the weights load."""
    arm_probes = [p for p in probes if isinstance(p, ArmProbe)]
    if not arm_probes or not len(task):
        return
    tokenizer = getattr(r.model, "tokenizer", None) if r.model is not None else None
    if tokenizer is None:
        spec = r.source.spec if r.source is not None else None
        tokenizer = load_tokenizer(spec, trust_remote_code=r.source.trust_remote_code) if spec else None
    if tokenizer is None:
        return
    lengths = [len(ids) for ids in encode_prompts(tokenizer, render_prompts(task, r.protocol, task.questions, tokenizer))]
    shortest = min(range(len(lengths)), key=lengths.__getitem__)
    for p in arm_probes:
        p.check_prompt(task.questions[shortest].question_id, lengths[shortest])


def _assemble(parts: dict[PartKey, pd.DataFrame], task: Task, labels: Sequence[str]) -> pd.DataFrame:
    bank = pd.concat([parts[k] for k in sorted(parts)], ignore_index=True)
    order = {q.question_id: i for i, q in enumerate(task.questions)}
    rank = {GREEDY: -1, **{label: i for i, label in enumerate(labels)}}
    bank["question_order"] = bank["question_id"].map(order)
    bank["probe_order"] = bank["probe"].map(rank)
    return bank.sort_values(ORDER, kind="stable").reset_index(drop=True)[BANK_COLUMNS]


def probe(
    model, task: Task | str, probes: Sequence[str | Probe], *, out: str | os.PathLike | None = None,
    protocol: Protocol | None = None, exec_config: ExecConfig | None = None, unions: Sequence[str] | None = None,
    n: int | None = None, progress: Callable[[int, int], None] | None = None, executor: Executor | None = None,
) -> ProbeRun:
    """Decode a candidate bank of ``model`` on ``task`` under ``probes`` and summarize it.

    Args:
        model: a TransformerBridge from :func:`reachlens.load_model` (hooks the caller attached stay live), or a
            spec (``"zoo:base"``, a :class:`~reachlens.models.ModelSource`), loaded where and in which precision
            ``exec_config`` says (by this process, or with workers by each of them).
        task: a task, or a registered task's name (with ``n``).
        probes: spec strings (``"sampling:k=6:temperature=0.7"``, ``"graft:kind=zero:layer=3"``) or probes.
        out: a run directory: slices are written as they finish, and a re-run resumes it.
        protocol: the deployment's protocol (greedy: decode length, prompt format, seed, grader, stops); None:
            :meth:`Protocol.deployment` of the task.
        exec_config: batch rows (they fix the slices), prefix sharing, device and dtype, and who decodes
            (``workers``, ``ray``: :func:`~reachlens.runner.executor_for`).
        unions: named unions to report (``"sampling+graft"`` or ``"O[sampling+graft]"``); None: greedy with each
            family, and every family together.
        n: the first ``n`` questions of a task given by name.
        progress: called with (questions done, questions in all) over every unit after each slice.
        executor: who decodes; None: the one ``exec_config`` asks for.

    >>> run = probe("zoo:base", "arith", ["sampling:k=6", "graft:kind=zero:layer=3"], n=20)  # doctest: +SKIP
    """
    task = load_task(task, n=n) if isinstance(task, str) else task
    job = ProbeJob(model, task, _probes(probes), protocol or Protocol.deployment(task), out,
                   exec_config or ExecConfig(), None if unions is None else tuple(unions))
    return run_jobs([job], executor, progress=None if progress is None else (lambda i, done, total: progress(done, total)))[0]
