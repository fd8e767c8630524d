"""A probe run (kind ``probe``): one candidate bank of a model on a task under several probes.

    DIR/run.json            the run record: the greedy protocol of the deployment (decode length, prompt
                            format, seed, grader, stops), options (the probes' labels; ``inputs``, the SHA-256
                            of each file a probe reads, by its path), model and data identity, exec (batch rows,
                            dtype, device): all checked on resume; ``unions``, the named unions (derived from
                            the bank, not its identity: a resume or a re-run of a complete run may name others)
    DIR/parts/U.S.candidates.parquet  one part per finished slice of each unit (:mod:`reachlens.probes.decode`)
    DIR/candidates.parquet  the bank (:data:`~reachlens.records.BANK_COLUMNS`), written when it completes
    DIR/(the summary)      D and O per probe, per arm and per named union (intervals), selectors and the
                            selection gap, the fix-set overlap, recovery, the budget-matched comparison, the
                            placebo comparison, each reach figure's lucky-guess null (the task's golds built
                            again: the bank keeps none) (:mod:`reachlens.probes.summary`)

It is decoded by the runner (:class:`~reachlens.probes.ProbeJob`, :func:`~reachlens.probes.probe`): resumable
from its parts, on any executor. A complete run holds every question's greedy row and each probe's full budget of
candidates (checked when it is assembled and when it is read).

>>> run = probe(load_model("zoo:base"), load_task("arith", n=50),
...             ["sampling:k=6:temperature=0.7", "graft:kind=zero,noise:layer=3"], out="runs/probe")  # doctest: +SKIP
>>> run.summary()["probes"]["graft:kind=zero,noise:layer=3"]["O"]  # doctest: +SKIP
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.probes.decode import check_whole, expected_rows, plan_units
from reachlens.probes.spec import parse_probe
from reachlens.probes.summary import probe_summary, probe_tables
from reachlens.studies.lucky_null import task_golds
from reachlens.studies.trace_reach import solutions_valid
from reachlens.store import PartsDir, RecordedProtocol, Run, RunDir, register_kind

__all__ = ["ProbeRun", "check_bank"]


def check_bank(bank: pd.DataFrame, labels: list[str], question_ids: list[str], where: str, fix: str) -> None:
    """Refuse a bank that lacks a question's greedy row or part of a probe's budget (one line naming the first and
    ``fix``): a run is complete only with every question's every candidate."""
    missing = check_whole(bank, question_ids, expected_rows(plan_units([parse_probe(x) for x in labels])))
    if missing:
        raise ReachlensError(f"{where} is not whole: {missing}; {fix}")


@register_kind
@dataclass(frozen=True)
class ProbeRun(RecordedProtocol, Run):
    """A probe run: its record and its candidate bank; everything else is computed from the bank."""

    kind: ClassVar[str] = "probe"
    dir_class: ClassVar[type[RunDir]] = PartsDir
    record_fields: ClassVar[dict[str, tuple[type, ...]]] = {
        "protocol": (dict,), "options.probes": (list,), "unions": (list,)}

    candidates: pd.DataFrame = field(repr=False)

    @property
    def probes(self) -> list[str]:
        """The probes' labels, in run order."""
        return list(self.record.options["probes"])

    @property
    def unions(self) -> list[str]:
        """The named unions the summary reports: derived from the bank, so beside the run's identity (the last
        command that ran or resumed the run named them)."""
        return list(self.record.extra["unions"])

    @functools.cached_property
    def analysis(self) -> dict[str, pd.DataFrame]:
        """Every table of the run (:func:`~reachlens.probes.summary.probe_tables`), computed once from the bank; a
        task with a trace grader (``arith*``, ``gsm8k``) adds the verified reach (``reach_trace``); a task that can
        be built again here (:func:`~reachlens.studies.lucky_null.task_golds`) each reach figure's lucky-guess null."""
        bank, p = self.candidates, self.protocol
        valid = solutions_valid(bank["question_id"], bank["text"], p.task, p.split)
        return probe_tables(bank, self.probes, self.unions, valid, task_golds(p.task, p.split, self.record.data))

    def summary(self) -> dict[str, Any]:
        return probe_summary(self.candidates, self.probes, self.unions, tables=self.analysis,
                             model=self.record.model.get("spec"), task=self.protocol.task)

    def tables(self) -> dict[str, pd.DataFrame]:
        return {"candidates": self.candidates}

    @classmethod
    def read(cls, run: RunDir) -> ProbeRun:
        """A complete probe run directory; refused when its bank lacks a candidate of a question it holds."""
        bank = run.read_table("candidates")
        check_bank(bank, list(run.record().options["probes"]), list(dict.fromkeys(bank["question_id"])),
                   f"probe run {str(run.path)!r}", "re-run the same probe command into a new directory")
        return cls(bank, record=run.record(), location=run.path)
