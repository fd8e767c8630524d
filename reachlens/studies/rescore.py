"""Re-grade a stored audit without sampling: the raw text is kept, so a fixed grader re-scores it.

The new tables, summary and (for a changed grader) header replace the old ones in one step that a
crash cannot split (:meth:`~reachlens.store.RunDir.rewrite`: staged, journaled, record last), under
the directory's writer lock. Before anything is rewritten the directory's recorded identity is
checked: its summary must name the model and data its record names. Only a complete audit is rescored: an
unfinished one is refused (a rescore writes a summary, and a summary beside unfinished tables would read as
a result); resume it first.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from reachlens.errors import ReachlensError
from reachlens.grading import get_grader, grader_for
from reachlens.protocol import ProtocolMismatch
from reachlens.records import canonical, update_question_table
from reachlens.store import PartsDir
from reachlens.studies.auditing import AuditResult
from reachlens.studies.trace_reach import trace_of

__all__ = ["rescore"]


def rescore(path: str | Path, grader: str | None = None, trace: str | None = None) -> AuditResult:
    """Re-grade every stored sample and deployed output of the audit at ``path``; rewrite its tables.

    Args:
        path: an audit directory.
        grader: a grader name to use instead of the protocol's (the protocol records the change).
        trace: also trace-grade every candidate (:mod:`reachlens.studies.trace_reach`): a trace grader's name
            (``arith_trace``, ``gsm8k_trace``) or ``"auto"``, the task's own; the audit then holds a ``trace``
            table and its summary the verified figures. None keeps the trace table it has (if any).

    >>> result = rescore("runs/base")  # doctest: +SKIP
    """
    store = PartsDir(path)
    status = store.record().status  # as it stands: a killed run reads interrupted
    with store.writer():
        if not store.is_complete():
            raise ReachlensError(f"audit directory {str(store.path)!r} has not finished (status {status}); resume it "
                                 "by running the same audit command into it, then rescore it")
        old = AuditResult.read(store)
        _check_identity(store, old)
        if trace is not None:
            old = dataclasses.replace(old, trace=trace_of(old, trace))
        return _rescore(store, old, grader)


def _check_identity(store: PartsDir, old: AuditResult) -> None:
    """Refuse a directory whose summary names another model or data than its record."""
    summary = store.summary()
    if summary is None:
        return
    diffs = {}
    if summary.get("model_fingerprint") != old.model.get("fingerprint"):
        diffs["model.fingerprint"] = (old.model.get("fingerprint"), summary.get("model_fingerprint"))
    if "data" in summary and old.data and summary["data"] != old.data:
        diffs["data"] = (old.data, summary["data"])
    if diffs:
        raise ProtocolMismatch(diffs, what=f"audit directory {str(store.path)!r} is not one run: its "
                               f"run record and summary differ",
                               fix="restore the directory from a copy, or re-run the audit into a new directory")


def _rescore(store: PartsDir, old: AuditResult, grader: str | None) -> AuditResult:
    if not len(old.questions):
        raise ReachlensError(f"audit directory {str(store.path)!r} has no finished questions to rescore")
    name = grader or str(old.protocol.grader)
    get_grader(name)  # unknown names fail here, before anything is rewritten
    q = old.questions.copy()
    graders = {qid: grader_for(name, lab if isinstance(lab, str) else None) for qid, lab in zip(q["question_id"], q["labels"])}
    golds = dict(zip(q["question_id"], q["gold"]))

    s = old.samples.copy()
    g = [graders[qid].grade(t, golds[qid]) for qid, t in zip(s["question_id"], s["text"])]
    s["answer"] = [x.answer for x in g]
    s["scored"] = [bool(x.scored) for x in g]
    s["correct"] = [bool(x.correct and x.scored) for x in g]
    gd = [graders[qid].grade(t, golds[qid]) for qid, t in zip(q["question_id"], q["deployed_text"])]
    q["deployed_answer"] = [x.answer for x in gd]
    q["deployed_scored"] = [bool(x.scored) for x in gd]
    q["realized"] = [bool(x.correct and x.scored) for x in gd]
    q = update_question_table(q, s, old.protocol.k)

    protocol = old.protocol
    record = None
    if name != protocol.grader:
        protocol = dataclasses.replace(protocol, grader=name)
        record = dataclasses.replace(old.record, protocol=protocol)
    result = AuditResult(q, canonical(s), old.trace, record=record or old.record, location=store.path)
    store.rewrite(result.tables(), result.summary(), record)  # the record last
    return result
