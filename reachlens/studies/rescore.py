"""Re-grade a stored audit without sampling: the raw text is kept, so a fixed grader re-scores it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from reachlens.grading import get_grader
from reachlens.store import AuditDir, write_json
from reachlens.studies.auditing import AuditResult, _question_table_update, canonical, grader_for, summarize

__all__ = ["rescore"]


def rescore(path: str | Path, grader: str | None = None) -> AuditResult:
    """Re-grade every stored sample and deployed output of the audit at ``path``; rewrite its tables.

    Args:
        path: an audit directory.
        grader: a grader name to use instead of the protocol's (the protocol records the change).

    >>> result = rescore("runs/base")  # doctest: +SKIP
    """
    store = AuditDir(path)
    old = AuditResult.load(path)
    if not len(old.questions):
        raise ValueError(f"audit directory {str(path)!r} has no finished questions to rescore")
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
    q = _question_table_update(q, s, old.protocol.k)

    protocol = old.protocol
    if name != protocol.grader:
        protocol = dataclasses.replace(protocol, grader=name)
        header = store.read_header()
        header["protocol"], header["protocol_hash"] = protocol.to_dict(), protocol.hash
        write_json(store.header_path, header)
    result = AuditResult(protocol, old.model, q, canonical(s))
    store.consolidate(q, result.samples, summarize(result))
    return result
