"""Decode a probe run's candidates, unit by unit and slice by slice, through the runner's one path.

A run is split into *units*, each decoded in fixed slices of questions (counted from the task's first
question whatever is done already, so a resumed run decodes exactly the batches an uninterrupted one does):

* the ``arms`` unit: the greedy deployment of every question and every candidate of every activation probe,
  rows with arms in one engine call per slice (:func:`reachlens.runner.decode.decode_rows`, prefix sharing
  on), ``max_batch_rows // (1 + arms per question)`` questions a slice;
* one unit per ``sampling`` probe: :func:`reachlens.runner.decode.audit_slice` over the audit's own slices
  (:func:`~reachlens.runner.decode.batch_slices`) of the probe's protocol: its candidates are that audit's
  samples (its deployment, decoded again there, is left out: the bank's is the ``arms`` unit's);
* one unit per ``routes`` probe: one slice of every question, :func:`reachlens.routing.run_search` on a
  :class:`~reachlens.routing.RouteEvaluator` (the search runs all questions in lockstep).

Each slice becomes bank rows (:data:`~reachlens.probes.bank.BANK_COLUMNS`) graded by
:func:`~reachlens.runner.decode.grade_completion`, the one grading of every study.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from reachlens.engine import Completion, encode
from reachlens.execution import ExecConfig
from reachlens.grading import question_grader
from reachlens.probes.activation import ArmProbe, arm_hooks
from reachlens.probes.bank import GREEDY, candidate_frame
from reachlens.probes.families import Routes, Sampling
from reachlens.probes.spec import Probe
from reachlens.protocol import Protocol
from reachlens.routing import RouteEvaluator, run_search
from reachlens.runner.decode import audit_slice, batch_slices, decode_rows, grade_completion
from reachlens.tasks.base import Question, Task
from reachlens.tasks.chat import render_prompts

__all__ = ["Unit", "decode_slice", "plan_units", "unit_slices"]


@dataclass(frozen=True)
class Unit:
    """What one part of a run decodes: ``arms`` (the deployment and the activation probes) or one probe."""

    index: int
    """Its number in the run (the ``arms`` unit is 0; a decoding probe's is its position in the run + 1)."""
    probes: tuple[tuple[int, Probe], ...]
    """(position in the run, probe) of the probes it decodes."""

    @property
    def decodes(self) -> str:
        return "arms" if self.index == 0 else self.probes[0][1].decodes


def plan_units(probes: Sequence[Probe]) -> list[Unit]:
    """The units of a run of ``probes``: the ``arms`` unit first, then each decoding probe in order."""
    arms = tuple((i, p) for i, p in enumerate(probes) if isinstance(p, ArmProbe))
    return [Unit(0, arms)] + [Unit(i + 1, ((i, p),)) for i, p in enumerate(probes) if not isinstance(p, ArmProbe)]


def unit_slices(unit: Unit, task: Task, protocol: Protocol, max_batch_rows: int) -> list[tuple[int, int]]:
    """The fixed slices ``(start, stop)`` of the task a unit decodes."""
    if unit.decodes == "samples":
        return batch_slices(task, unit.probes[0][1].protocol(protocol), max_batch_rows)
    if unit.decodes == "routes":
        return [(0, len(task))]
    per_q = 1 + sum(p.budget for _, p in unit.probes)
    group = max(1, max_batch_rows // per_q)
    return [(start, min(start + group, len(task))) for start in range(0, len(task), group)]


def _row(q: Question, label: str, arm: str, idx: int, graded: dict, text: str, finish: str, tokens: int,
         logprob: float, intervention: bool, detail: str = "") -> dict:
    return {"question_id": q.question_id, "probe": label, "arm": arm, "candidate_idx": idx, "text": text, **graded,
            "mean_logprob": logprob, "finish_reason": finish, "decoded_tokens": tokens, "intervention": intervention,
            "detail": detail}


def _completion_row(grader, q: Question, label: str, arm: str, idx: int, c: Completion, intervention: bool,
                    detail: str = "") -> dict:
    return _row(q, label, arm, idx, grade_completion(grader, q, c), c.text, c.finish_reason, len(c.token_ids),
                c.mean_logprob, intervention, detail)


def _decode_arms(model, task: Task, protocol: Protocol, unit: Unit, questions: Sequence[Question],
                 exec_config: ExecConfig) -> list[dict]:
    """The deployment and every activation candidate of ``questions``, decoded in one engine call."""
    lengths = [len(ids) for ids in encode(model, render_prompts(task, protocol, questions, getattr(model, "tokenizer", None)))]
    keyed: dict[int, dict] = {pos: {} for pos, _ in unit.probes}
    extra, meta = [], []
    for q, n in zip(questions, lengths):
        rows, info = [], []
        for pos, probe in unit.probes:
            for c in probe.candidates(q.question_id, n, probe.run_seed(protocol)):
                keyed[pos][c.key] = c.value
                rows.append((None, c.key, (pos, c.candidate_idx)))
                info.append((probe.label, c))
        extra.append(rows)
        meta.append(info)
    hooks = arm_hooks(model, [(p, keyed[pos]) for pos, p in unit.probes], protocol)
    with model.hooks(fwd_hooks=hooks):
        deployed, outs = decode_rows(model, task, protocol, questions, extra, exec_config)
    out = []
    for q, dep, comps, info in zip(questions, deployed, outs, meta):
        grader = question_grader(str(protocol.grader), q)
        out.append(_completion_row(grader, q, GREEDY, GREEDY, 0, dep, False))
        out += [_completion_row(grader, q, label, c.arm, c.candidate_idx, comp, True, c.detail)
                for comp, (label, c) in zip(comps, info)]
    return out


def _decode_samples(model, task: Task, protocol: Protocol, probe: Sampling, start: int, stop: int,
                    exec_config: ExecConfig) -> list[dict]:
    """The sampling probe's candidates: the samples of the audit's slice under its protocol."""
    _, samples = audit_slice(model, task, probe.protocol(protocol), start, stop, exec_config)
    by_id = {q.question_id: q for q in task.questions[start:stop]}
    return [_row(by_id[s.question_id], probe.label, probe.label, int(s.sample_idx),
                 {"answer": s.answer, "correct": bool(s.correct), "scored": bool(s.scored)}, s.text, s.finish_reason,
                 int(s.n_tokens), float(s.mean_logprob), False) for s in samples.itertuples()]


def _decode_routes(model, task: Task, protocol: Protocol, probe: Routes, exec_config: ExecConfig) -> list[dict]:
    """The routes probe's candidates: one per route evaluation of routing's search."""
    config = probe.config(protocol)
    evaluator = RouteEvaluator(model, task, protocol, window=config.window, max_batch_rows=exec_config.max_batch_rows)
    cands = run_search(evaluator, probe.route_space(len(model.blocks)), probe.search, config)
    by_id = {q.question_id: q for q in task.questions}
    return [_row(by_id[c.question_id], probe.label, probe.label, int(c.eval_idx),
                 {"answer": c.answer, "correct": bool(c.correct), "scored": bool(c.scored)}, c.text, c.finish_reason,
                 int(c.n_tokens), float(c.mean_logprob), False, f"route={c.route}") for c in cands.itertuples()]


def decode_slice(model, task: Task, protocol: Protocol, unit: Unit, start: int, stop: int,
                 exec_config: ExecConfig) -> pd.DataFrame:
    """Bank rows of the questions ``task.questions[start:stop]`` for one unit (``protocol``: the run's greedy one)."""
    if unit.decodes == "samples":
        rows = _decode_samples(model, task, protocol, unit.probes[0][1], start, stop, exec_config)
    elif unit.decodes == "routes":
        rows = _decode_routes(model, task, protocol, unit.probes[0][1], exec_config)
    else:
        rows = _decode_arms(model, task, protocol, unit, list(task.questions[start:stop]), exec_config)
    return candidate_frame(rows)
