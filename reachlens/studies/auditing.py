"""The audit: for each question, is the default deployment correct (realized) and does a K-sample
probe reach a correct answer (reachable)?

For question i with grader g_i: ``realized_i = g_i(greedy output)``, ``reachable_i = max_k g_i(c_k)``
over K samples at the protocol's temperature. D is the mean of realized, O_K the mean of reachable,
and ``gap = O_K - D`` is what the model could answer but does not emit. ``propensity`` is the share
of a question's graded samples that are correct (the per-question hit rate).

Samples the grader could not decide (``scored=False``: a math-verify timeout) are kept but excluded:
they count neither as correct nor as wrong, and pass@k uses the number of graded samples as n.

The audit is a run of kind ``audit`` (:class:`AuditResult`). It is decoded and graded by the runner
(:class:`~reachlens.studies.AuditJob` on :func:`reachlens.runner.run_jobs`, which asks :mod:`reachlens.engine` for
every completion); it never decodes itself. Its directory holds a part per finished slice while it runs
(:class:`~reachlens.store.PartsDir`); a question is finished only with all its K samples (:func:`~reachlens.store.audit_tables`: a
resume redoes one that lacks them, and a complete audit lacking them is refused when read, naming it). Hooks the caller attached to the model (``with model.hooks(...)``) are live throughout, so
an audit of an ablated model is this same function called inside the ablation's context.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pandas as pd

from reachlens.errors import MissingFileError, ReachlensError
from reachlens.protocol import Protocol
from reachlens.records import update_question_table
from reachlens.selectors import SelectionGap, select, selection_gap
from reachlens.stats import wilson_interval
from reachlens.store import PartsDir, Run, RunDir, RunRecord, audit_tables, register_kind
from reachlens.studies.lucky_null import LuckyNull, lucky_null
from reachlens.studies.metrics import budget_grid, pass_at_k_curve
from reachlens.studies.trace_reach import trace_figures

__all__ = ["AuditResult", "stored_trace"]


@register_kind
@dataclass(frozen=True)
class AuditResult(Run):
    """Everything one audit produced (a run of kind ``audit``): its record (protocol, model, data identity) and its
    tables. Tables keep raw text so it can be re-scored."""

    kind: ClassVar[str] = "audit"
    record_fields: ClassVar[dict[str, tuple[type, ...]]] = {"protocol": (dict,)}
    dir_class: ClassVar[type[RunDir]] = PartsDir

    questions: pd.DataFrame = field(repr=False)
    samples: pd.DataFrame = field(repr=False)
    trace: pd.DataFrame | None = field(default=None, repr=False)
    """The trace grader's verdict on each candidate (:mod:`reachlens.studies.trace_reach`), None until trace-graded."""

    @classmethod
    def new(cls, protocol: Protocol, model: dict[str, Any], questions: pd.DataFrame, samples: pd.DataFrame,
            data: dict[str, Any] | None = None) -> AuditResult:
        """An audit made in Python from its tables: its record from ``protocol``, ``model`` and ``data``."""
        return cls(questions, samples, record=RunRecord.new("audit", protocol, model, data or None))

    @property
    def protocol(self) -> Protocol:
        """The protocol it was audited under (resolved against the task), as its record holds it."""
        return self.record.protocol

    @property
    def model(self) -> dict[str, str | None]:
        """The identity of the model audited (spec, fingerprint, revision: None for a local folder)."""
        return self.record.model

    @property
    def data(self) -> dict[str, Any]:
        """The data identity of the task audited (see :mod:`reachlens.tasks.base`); empty when unknown (an audit of
        a hand-made task)."""
        return dict(self.record.data or {})

    @property
    def n(self) -> int:
        return len(self.questions)

    @property
    def k(self) -> int:
        return self.protocol.k

    @property
    def D(self) -> float:
        """Deployed accuracy: mean of realized over questions whose deployment was graded."""
        q = self.questions[self.questions["deployed_scored"]]
        return float(q["realized"].mean()) if len(q) else math.nan

    @property
    def O_K(self) -> float:
        """Reachable ceiling at budget K: mean of reachable over questions."""
        return float(self.questions["reachable"].mean()) if self.n else math.nan

    @property
    def gap(self) -> float:
        return self.O_K - self.D

    @property
    def D_ci(self) -> tuple[float, float]:
        """95 % Wilson interval of :attr:`D` (over the questions whose deployment was graded)."""
        q = self.questions[self.questions["deployed_scored"]]
        return wilson_interval(int(q["realized"].sum()), len(q))

    @property
    def O_K_ci(self) -> tuple[float, float]:
        """95 % Wilson interval of :attr:`O_K`."""
        return wilson_interval(int(self.questions["reachable"].sum()), self.n)

    @property
    def truncated_samples(self) -> float:
        """Share of the K samples that stopped at ``max_new_tokens`` (``finish_reason == "length"``)."""
        return float((self.samples["finish_reason"] == "length").mean()) if len(self.samples) else math.nan

    @property
    def truncated_deployed(self) -> float:
        """Share of the deployed (greedy) outputs that stopped at ``max_new_tokens``."""
        return float((self.questions["deployed_finish"] == "length").mean()) if self.n else math.nan

    @property
    def bank(self) -> pd.DataFrame:
        """The K samples as a candidate bank (:mod:`reachlens.selectors`): the sample table itself."""
        return self.samples

    def majority(self) -> pd.DataFrame:
        """Majority over each question's K samples, ties averaged (:func:`reachlens.selectors.select`): one row
        per question, ``correct`` the expected correctness under a uniform tie-break (NaN: no sample graded)."""
        return self._majority.copy()

    @functools.cached_property
    def _majority(self) -> pd.DataFrame:
        return select(self.bank, "majority")

    @property
    def maj_K(self) -> float:
        """maj_K: the mean of :meth:`majority` over the questions with a graded sample."""
        return _mean_and_wilson(self.majority()["correct"])[0]

    @property
    def maj_K_ci(self) -> tuple[float, float]:
        """95 % Wilson interval of :attr:`maj_K` (a tie's expected correctness counts as a fractional success)."""
        return _mean_and_wilson(self.majority()["correct"])[1]

    def selection_gap(self) -> SelectionGap:
        """O_K - maj_K, paired over the questions with a graded sample, with its paired bootstrap interval."""
        return self._selection_gap

    @functools.cached_property
    def _selection_gap(self) -> SelectionGap:
        return selection_gap(self.bank, ["majority"])

    def pass_at_k_curve(self) -> pd.DataFrame:
        """Unbiased pass@k averaged over questions, k = 1, 2, 4, ... up to K (columns ``k``, ``pass_at_k``)."""
        return pass_at_k_curve(self.questions["n_scored"], self.questions["n_correct"], budget_grid(self.k))

    def summary(self) -> dict[str, Any]:
        """D, O_K and maj_K with their 95 % Wilson intervals, gap, the selection gap (O_K - maj_K, paired
        bootstrap interval), n, k, the shares of samples and deployed outputs cut at ``max_new_tokens``, the
        protocol's hash, the model, unscored counts, data identity, pass@k.

        maj_K and the selection gap are over the questions with a graded sample (all of them unless the
        grader could decide none of a question's samples), so ``selection_gap == O_K - maj_K`` exactly then."""
        curve = self.pass_at_k_curve()
        maj_K, maj_K_ci = _mean_and_wilson(self.majority()["correct"])
        sel = self.selection_gap()
        return {
            "D": self.D, "D_ci": list(self.D_ci), "O_K": self.O_K, "O_K_ci": list(self.O_K_ci), "gap": self.gap,
            "maj_K": maj_K, "maj_K_ci": list(maj_K_ci),
            "selection_gap": sel.gap, "selection_gap_ci": list(sel.gap_ci),
            "n": self.n, "k": self.k,
            "truncated_samples": self.truncated_samples, "truncated_deployed": self.truncated_deployed,
            "protocol_hash": self.protocol.hash, "model": self.model.get("spec"),
            "model_fingerprint": self.model.get("fingerprint"),
            "n_unscored_samples": int((~self.samples["scored"]).sum()) if len(self.samples) else 0,
            "n_unscored_deployed": int((~self.questions["deployed_scored"]).sum()) if self.n else 0,
            "data": dict(self.data) or None,
            "pass_at_k": {int(r.k): r.pass_at_k for r in curve.itertuples()},
            **self.lucky_null().summary(), **trace_figures(self.questions, self.samples, self.trace, self.k),
        }

    def lucky_null(self) -> LuckyNull:
        """The lucky-guess null of :attr:`O_K` (:mod:`reachlens.studies.lucky_null`)."""
        return self._lucky_null

    @functools.cached_property
    def _lucky_null(self) -> LuckyNull:
        return lucky_null(self.questions, self.samples)

    def restrict_k(self, k: int) -> AuditResult:
        """This audit as if it had been run with budget ``k`` <= K: the first k samples of each question.

        Exact, because sample j depends on (seed, question, j) only: an audit at budget k would have
        drawn these very samples.
        """
        if not 1 <= k <= self.k:
            raise ReachlensError(f"k={k!r} must lie in 1..{self.k} (this audit's budget)")
        samples = self.samples[self.samples["candidate_idx"] < k].reset_index(drop=True)
        q = update_question_table(self.questions, samples, k)
        trace = None if self.trace is None else self.trace[self.trace["candidate_idx"] < k].reset_index(drop=True)
        return AuditResult(q, samples, trace, record=dataclasses.replace(self.record, protocol=self.protocol.with_k(k)))

    # --- as a run ------------------------------------------------------------------------------------
    def tables(self) -> dict[str, pd.DataFrame]:
        trace = {} if self.trace is None else {"trace": self.trace}
        return {"samples": self.samples, "questions": self.questions, **trace}

    @classmethod
    def read(cls, run: PartsDir) -> AuditResult:
        """A finished audit directory, or as much of an unfinished one as it holds (:func:`audit_tables`)."""
        questions, samples = audit_tables(run)
        trace = stored_trace(run) if run.is_complete() else None
        return cls(questions, samples, trace, record=run.record(), location=run.path)


def stored_trace(run: PartsDir) -> pd.DataFrame | None:
    """The run's trace table when it has one (written as the audit finished, or by ``reachlens rescore --trace``)."""
    try:
        return run.read_table("trace")
    except MissingFileError:
        return None


def _mean_and_wilson(correct: pd.Series) -> tuple[float, tuple[float, float]]:
    """The mean of the defined values and their 95 % Wilson interval (the sum as the successes)."""
    c = correct.dropna().astype(float)
    return (float(c.mean()) if len(c) else math.nan), wilson_interval(float(c.sum()), len(c))
