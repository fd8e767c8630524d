"""The budget control: extend an audit from K to a larger budget without redrawing the first K.

Sample j of question q depends only on (seed, q, j), so the samples K .. K'-1 drawn now are exactly
those a fresh audit at budget K' would have drawn after its first K. The extended audit therefore
equals a fresh K' audit, at the cost of only the new samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.protocol import ProtocolMismatch
from reachlens.store import AuditDir, run_differences
from reachlens.models import identity_of
from reachlens.records import in_task_order, update_question_table
from reachlens.studies.auditing import AuditResult, audit
from reachlens.tasks.base import Task

__all__ = ["extend_budget", "require_audited_with"]


def require_audited_with(model, task: Task, result: AuditResult, what: str = "rerun") -> None:
    """Refuse a control run with another model or data than ``result`` was audited with.

    The model fingerprint and the task's data identity are checked against the audit's
    (:class:`~reachlens.protocol.ProtocolMismatch` naming what differs), and every audited question
    must be in ``task``. Every control (budget, temperature, length) reruns part of an audit and calls
    this first: a control on another checkpoint would measure that checkpoint.
    """
    stored = {"protocol": result.protocol.to_dict(), "model": result.model, "data": result.data}
    diffs, _ = run_differences(stored, None, identity_of(model), task.data_identity)
    if diffs:
        raise ProtocolMismatch(diffs, what=f"the audit to {what} was made with another model or data",
                               fix="pass the model and the task (data file) the audit was made with")
    missing = set(result.questions["question_id"]) - {q.question_id for q in task.questions}
    if missing:
        raise ReachlensError(f"the task lacks {len(missing)} of the audit's questions (e.g. {sorted(missing)[0]!r}); "
                             "pass the task the audit was made on")


def extend_budget(
    model, task: Task, source: AuditResult | str | Path, k: int, *, out: str | Path | None = None,
    max_batch_rows: int = 1024, progress: Callable[[int], None] | None = None, executor=None,
) -> AuditResult:
    """The audit ``source`` extended to budget ``k`` (> its K); written to ``out`` when given.

    ``progress`` is called with the number of questions extended so far, and ``executor`` decodes the
    new samples, as in :func:`audit` (``model`` may then be a spec or a ModelSource).
    The model and the task must be those the audit was made with: their identities (model
    fingerprint, data identity) are checked against the audit's, and a difference is refused with
    :class:`~reachlens.protocol.ProtocolMismatch` naming it.

    >>> big = extend_budget(model, task, "runs/base", k=400, out="runs/base-k400")  # doctest: +SKIP
    """
    src = source if isinstance(source, AuditResult) else AuditResult.load(source)
    if k <= src.k:
        raise ReachlensError(f"k={k!r} must exceed the audit's budget K={src.k} to extend it")
    require_audited_with(model, task, src, "extend")
    ids = [q.question_id for q in task.questions]
    done = set(src.questions["question_id"])
    sub = task.only(done)
    more = audit(model, sub, src.protocol.with_k(k - src.k), max_batch_rows=max_batch_rows, sample_offset=src.k,
                 progress=progress, executor=executor)
    samples = pd.concat([src.samples, more.samples], ignore_index=True)
    questions = update_question_table(src.questions, samples, k)
    questions, samples = in_task_order(questions, samples, ids)
    protocol = dataclasses.replace(src.protocol, k=k)
    result = AuditResult(protocol, src.model, questions, samples, src.data)
    if out is not None:
        store = AuditDir(out)
        with store.writer():
            store.open(protocol, src.model, extra={"extended_from_k": src.k}, data=src.data)
            store.consolidate(questions, samples, result.summary())
    return result
