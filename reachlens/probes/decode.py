"""How a probe run decodes: its *units*, each a decoder of fixed slices of the task's questions into bank rows.

A unit is a :class:`Decoder`: it says which slices of questions it decodes together (:meth:`Decoder.slices`,
counted from the task's first question whatever is done already, so a resumed run decodes exactly the batches an
uninterrupted one does), decodes one (:meth:`Decoder.decode`, rows of :data:`~reachlens.records.BANK_COLUMNS`
graded by :func:`~reachlens.runner.grade_completion`, the one grading of every study) and says how many
candidates each question has of each probe (:meth:`Decoder.expected`: a part with fewer is not whole). A run's
units (:func:`plan_units`):

* unit 0, the greedy deployment and every activation probe (:class:`~reachlens.probes.activation.ArmGroup`): rows
  with arms, in one engine call per slice;
* unit ``i + 1`` for the decoding probe at position ``i`` of the run: the probe itself decodes
  (:class:`~reachlens.probes.Sampling`: the audit's slice decoder, samples only;
  :class:`~reachlens.probes.Routes`: routing's search).

Adding a family is one class: a decoding family implements :class:`Decoder` itself (its ``slices``, ``decode`` and
``expected``); an activation family is an :class:`~reachlens.probes.activation.ArmProbe` (its ``candidates`` and
``hooks``), decoded by unit 0 beside the deployment. The runner schedules the slices (:class:`~reachlens.probes.ProbeJob`).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig
from reachlens.probes.activation import ArmGroup, ArmProbe
from reachlens.probes.spec import Probe
from reachlens.protocol import Protocol
from reachlens.tasks.base import Task

__all__ = ["Decoder", "check_whole", "expected_rows", "plan_units"]


@typing.runtime_checkable
class Decoder(typing.Protocol):
    """One unit of a probe run (see the module docstring)."""

    def slices(self, task: Task, protocol: Protocol, max_batch_rows: int) -> list[tuple[int, int]]:
        """The fixed slices ``(start, stop)`` of ``task`` this unit decodes together."""

    def decode(self, model: Any, task: Task, protocol: Protocol, start: int, stop: int,
               exec_config: ExecConfig) -> list[dict[str, Any]]:
        """The bank rows (:func:`~reachlens.probes.bank.bank_row`) of ``task.questions[start:stop]``."""

    def expected(self) -> dict[str, int]:
        """Candidates per question, by probe label (the deployment's ``greedy``: 1)."""


def plan_units(probes: Sequence[Probe]) -> dict[int, Decoder]:
    """The units of a run of ``probes``: 0 the deployment and every activation probe, ``i + 1`` the decoding probe
    at position ``i``."""
    units: dict[int, Decoder] = {0: ArmGroup(tuple((i, p) for i, p in enumerate(probes) if isinstance(p, ArmProbe)))}
    for i, p in enumerate(probes):
        if not isinstance(p, ArmProbe):
            if not isinstance(p, Decoder):
                raise ReachlensError(f"probe {p.label!r} is neither an activation probe nor a decoder (slices, decode, "
                                     "expected); see reachlens.probes.decode")
            units[i + 1] = p
    return units


def expected_rows(units: Mapping[int, Decoder]) -> dict[str, int]:
    """Candidates per question of every probe of a run (and the deployment), by label."""
    out: dict[str, int] = {}
    for unit in units.values():
        out.update(unit.expected())
    return out


def check_whole(rows: pd.DataFrame, question_ids: Sequence[str], expected: Mapping[str, int]) -> str | None:
    """What ``rows`` (bank rows of the questions ``question_ids`` under the probes of ``expected``) lack, in words;
    None when every question has every candidate of every probe (indices ``0 .. n - 1``) and nothing else."""
    if not len(rows):
        return f"no candidates of its {len(question_ids)} question(s)" if question_ids else None
    extra = sorted(set(rows["question_id"]) - set(question_ids))
    if extra:
        return f"question {extra[0]!r}, which is not one of its questions"
    stray = sorted(set(rows["probe"]) - set(expected))
    if stray:
        return f"candidates of {stray[0]!r}, which is not one of its probes"
    got = rows.groupby(["question_id", "probe"])["candidate_idx"].agg(["size", "nunique", "min", "max"])
    for qid in question_ids:
        for label, n in expected.items():
            if (qid, label) not in got.index:
                return f"question {qid!r} has no candidate of {label!r} (it needs {n})"
            size, unique, low, high = got.loc[(qid, label)]
            if not (size == unique == n and low == 0 and high == n - 1):
                return f"question {qid!r} has {int(unique)} distinct candidate(s) of {label!r} in {int(size)} row(s), " \
                       f"not {n} (indices 0..{n - 1})"
    return None

