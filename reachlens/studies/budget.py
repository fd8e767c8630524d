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

from reachlens.store import AuditDir
from reachlens.studies.auditing import AuditResult, _in_task_order, _question_table_update, audit, summarize
from reachlens.tasks.base import Task

__all__ = ["extend_budget"]


def extend_budget(
    model, task: Task, source: AuditResult | str | Path, k: int, *, out: str | Path | None = None,
    max_batch_rows: int = 1024, progress: Callable[[int], None] | None = None,
) -> AuditResult:
    """The audit ``source`` extended to budget ``k`` (> its K); written to ``out`` when given.

    ``progress`` is called with the number of questions extended so far, as in :func:`audit`.

    >>> big = extend_budget(model, task, "runs/base", k=400, out="runs/base-k400")  # doctest: +SKIP
    """
    src = source if isinstance(source, AuditResult) else AuditResult.load(source)
    if k <= src.k:
        raise ValueError(f"k={k!r} must exceed the audit's budget K={src.k} to extend it")
    ids = [q.question_id for q in task.questions]
    missing = set(src.questions["question_id"]) - set(ids)
    if missing:
        raise ValueError(f"the task lacks {len(missing)} of the audit's questions (e.g. {sorted(missing)[0]!r}); "
                         "pass the task the audit was made on")
    sub = Task(task.name, tuple(q for q in task.questions if q.question_id in set(src.questions["question_id"])),
               task.prompt_formats, task.default_format, task.grader, task.stop, task.source, task.metadata)
    more = audit(model, sub, src.protocol.with_k(k - src.k), max_batch_rows=max_batch_rows, sample_offset=src.k,
                 progress=progress)
    samples = pd.concat([src.samples, more.samples], ignore_index=True)
    questions = _question_table_update(src.questions, samples, k)
    questions, samples = _in_task_order(questions, samples, ids)
    protocol = dataclasses.replace(src.protocol, k=k)
    result = AuditResult(protocol, src.model, questions, samples)
    if out is not None:
        store = AuditDir(out)
        store.open(protocol, src.model, extra={"extended_from_k": src.k})
        store.consolidate(questions, samples, summarize(result))
    return result
