"""Reaching a solution, not just an answer: an audit's verified figures, from its trace table.

An audit of a task with a trace grader is trace-graded when it finishes (:func:`task_trace`); another, or one written
before, is trace-graded by ``reachlens rescore DIR --trace`` (:func:`trace_of` in Python). A trace-graded audit holds a
``trace`` table: one row per candidate (the deployment as ``candidate_idx`` -1, then its K samples) with the trace
grader's verdict (:mod:`reachlens.grading.trace`). A candidate *solves* its question when its answer is correct and
its worked solution valid. From it:

* ``D_trace``: the share of questions whose greedy deployment solves them (over those whose deployment was graded);
* ``O_K_trace``: the share of questions that one of the K samples solves; ``reach_invalid_only`` = O_K - O_K_trace,
  the questions reached only through invalid solutions;
* ``pass_at_k_trace``: the unbiased pass@k (:func:`~reachlens.studies.metrics.pass_at_k`) with the solving samples
  as the successes (n = the graded samples, as the answer-based curve);
* ``maj_K_trace``: a majority vote over the samples whose solution is valid (a verifier the gold never enters);
  a question with no valid sample counts as failed;
* the gaps ``D - D_trace``, ``O_K - O_K_trace`` and the verified gap ``O_K_trace - D_trace``, and the share of
  samples with a checkable step (``checkable_share``: "no checkable step" is never valid, so a low share means the
  verified figures are lower bounds).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.grading.trace import TRACE_GRADER_OF_TASK, get_trace_grader, trace_grader_for_task
from reachlens.selectors import select
from reachlens.stats import wilson_interval
from reachlens.studies.metrics import budget_grid, pass_at_k_curve
from reachlens.tasks import load_task

__all__ = ["DEPLOYED_IDX", "TRACE_COLUMNS", "solutions_valid", "solved_table", "task_trace", "trace_figures",
           "trace_of", "trace_table", "traced", "verified_questions"]

DEPLOYED_IDX = -1
"""The ``candidate_idx`` of the greedy deployment in a trace table."""

TRACE_COLUMNS = ["question_id", "candidate_idx", "trace_checkable", "trace_valid", "trace_first_invalid",
                 "trace_reason", "trace_grader"]
"""A trace table: the verdict of a trace grader on each candidate (``candidate_idx`` -1: the deployment)."""


def trace_table(questions: pd.DataFrame, samples: pd.DataFrame, grader: str,
                exprs: Mapping[str, str | None]) -> pd.DataFrame:
    """The trace grader ``grader``'s verdict on every deployment and sample of an audit's tables; ``exprs`` maps a
    question id to its expression (``fields["expr"]``; what ``arith_trace`` needs, None for ``gsm8k_trace``).

    Raises:
        ReachlensError: a question of the tables has no entry in ``exprs``.
    """
    g = get_trace_grader(grader)
    missing = sorted(set(questions["question_id"]) - set(exprs))
    if missing:
        raise ReachlensError(f"question {missing[0]!r} of the audit is not in its task ({len(missing)} missing); "
                             "trace-grade it with the task it was audited on")
    golds = dict(zip(questions["question_id"], questions["gold"]))
    rows = [(qid, DEPLOYED_IDX, text) for qid, text in zip(questions["question_id"], questions["deployed_text"])]
    rows += list(zip(samples["question_id"], samples["candidate_idx"], samples["text"]))
    out = []
    for qid, idx, text in rows:
        v = g.grade(text if isinstance(text, str) else "", golds[qid], expr=exprs[qid])
        out.append({"question_id": qid, "candidate_idx": int(idx), "trace_checkable": v.checkable,
                    "trace_valid": v.valid, "trace_first_invalid": v.first_invalid, "trace_reason": v.reason,
                    "trace_grader": grader})
    df = pd.DataFrame(out, columns=TRACE_COLUMNS)
    return df.astype({"candidate_idx": "int64", "trace_checkable": "bool", "trace_valid": "bool",
                      "trace_first_invalid": "int64", "trace_reason": "str", "trace_grader": "str"})


def trace_of(audit: Any, grader: str = "auto") -> pd.DataFrame:
    """The trace table of ``audit`` (an :class:`~reachlens.studies.AuditResult`) under the trace grader ``grader``
    (``"auto"``: its task's own, :data:`~reachlens.grading.trace.TRACE_GRADER_OF_TASK`); an ``arith_trace`` audit
    reads its questions' expressions from its task, generated again from its protocol (no decoding).

    Raises:
        ReachlensError: the task has no trace grader, or the name is unknown.
    """
    task = audit.protocol.task
    name = trace_grader_for_task(task) if grader == "auto" else grader
    if name is None:
        raise ReachlensError(f"task {task!r} has no trace grader (tasks with one: {sorted(TRACE_GRADER_OF_TASK)}); "
                             "its reach figures stand beside the lucky-guess null alone")
    get_trace_grader(name)  # an unknown name fails here, naming the known ones
    if name != "arith_trace":
        return trace_table(audit.questions, audit.samples, name, dict.fromkeys(audit.questions["question_id"]))
    return task_trace(audit.questions, audit.samples, load_task(task, split=audit.protocol.split), name)


def traced(audit: Any) -> Any:
    """``audit`` with its trace table: as it is when it has one or its task has no trace grader, else trace-graded
    now (:func:`trace_of`; an audit written before audits were trace-graded as they finish)."""
    if audit.trace is not None or trace_grader_for_task(audit.protocol.task) is None:
        return audit
    return dataclasses.replace(audit, trace=trace_of(audit))


def task_trace(questions: pd.DataFrame, samples: pd.DataFrame, task: Any, grader: str = "auto") -> pd.DataFrame | None:
    """The trace table of an audit's tables of ``task`` (a :class:`~reachlens.tasks.base.Task`, its questions'
    expressions at hand) under ``grader`` (``"auto"``: the task's own); None when ``"auto"`` finds none. What an
    audit of a task with a trace grader writes beside its tables when it finishes."""
    name = trace_grader_for_task(task.name) if grader == "auto" else grader
    if name is None:
        return None
    exprs = {q.question_id: q.fields.get("expr") for q in task.questions}
    return trace_table(questions, samples, name, exprs)


def solved_table(samples: pd.DataFrame, trace: pd.DataFrame) -> pd.DataFrame:
    """The samples with ``trace_valid``, ``trace_checkable`` and ``solved`` (correct, graded and valid) joined."""
    t = trace[trace["candidate_idx"] != DEPLOYED_IDX][["question_id", "candidate_idx", "trace_valid",
                                                       "trace_checkable"]]
    s = samples.merge(t, on=["question_id", "candidate_idx"], how="left", validate="one_to_one")
    s["trace_valid"] = s["trace_valid"].fillna(False).astype(bool)
    s["trace_checkable"] = s["trace_checkable"].fillna(False).astype(bool)
    s["solved"] = s["correct"].astype(bool) & s["scored"].astype(bool) & s["trace_valid"]
    return s


def verified_questions(questions: pd.DataFrame, samples: pd.DataFrame, trace: pd.DataFrame) -> pd.DataFrame:
    """One row per question: ``realized_trace`` (the deployment solves it), ``reachable_trace`` (a sample does),
    ``n_solved``, ``n_valid`` (samples with a valid solution, right answer or not), ``n_checkable``, and
    ``maj_trace`` (the majority vote of the valid samples is correct; 0 when none is valid)."""
    s = solved_table(samples, trace)
    agg = s.groupby("question_id").agg(n_solved=("solved", "sum"), n_valid=("trace_valid", "sum"),
                                       n_checkable=("trace_checkable", "sum"))
    dep = trace[trace["candidate_idx"] == DEPLOYED_IDX].set_index("question_id")["trace_valid"]
    q = questions[["question_id", "realized", "reachable", "deployed_scored"]].join(agg, on="question_id")
    for c in ("n_solved", "n_valid", "n_checkable"):
        q[c] = q[c].fillna(0).astype(int)
    q["deployed_trace_valid"] = q["question_id"].map(dep).fillna(False).astype(bool)
    q["realized_trace"] = q["realized"].astype(bool) & q["deployed_trace_valid"]
    q["reachable_trace"] = q["n_solved"] > 0
    valid = s[s["trace_valid"]]
    maj = select(valid, "majority").set_index("question_id")["correct"] if len(valid) else pd.Series(dtype=float)
    q["maj_trace"] = q["question_id"].map(maj).fillna(0.0).astype(float)
    return q.reset_index(drop=True)


def trace_figures(questions: pd.DataFrame, samples: pd.DataFrame, trace: pd.DataFrame | None,
                  k: int) -> dict[str, Any]:
    """The verified figures of an audit's tables (the module docstring), keys ending ``_trace``; empty when the
    audit has no trace table."""
    if trace is None or not len(questions):
        return {}
    q = verified_questions(questions, samples, trace)
    n = len(q)
    dep = q[q["deployed_scored"].astype(bool)]
    d, o = (float(dep["realized_trace"].mean()) if len(dep) else math.nan), float(q["reachable_trace"].mean())
    d_ans = float(dep["realized"].astype(bool).mean()) if len(dep) else math.nan
    o_ans = float(q["reachable"].astype(bool).mean())
    s = solved_table(samples, trace)
    correct = s["correct"].astype(bool) & s["scored"].astype(bool)
    curve = pass_at_k_curve(questions["n_scored"], questions["question_id"].map(q.set_index("question_id")["n_solved"]),
                            budget_grid(k))
    return {
        "trace_grader": str(trace["trace_grader"].iloc[0]) if len(trace) else None,
        "D_trace": d, "D_trace_ci": list(wilson_interval(int(dep["realized_trace"].sum()), len(dep))),
        "O_K_trace": o, "O_K_trace_ci": list(wilson_interval(int(q["reachable_trace"].sum()), n)),
        "gap_trace": o - d, "D_minus_D_trace": d_ans - d, "O_K_minus_O_K_trace": o_ans - o,
        "maj_K_trace": float(q["maj_trace"].mean()),
        "checkable_share": float(s["trace_checkable"].mean()) if len(s) else math.nan,
        "deployed_checkable_share": float(trace.loc[trace["candidate_idx"] == DEPLOYED_IDX, "trace_checkable"].mean()),
        "n_correct_samples": int(correct.sum()), "n_correct_valid_samples": int(s["solved"].sum()),
        "n_reached_invalid_only": int((q["reachable"].astype(bool) & ~q["reachable_trace"]).sum()),
        "n_realized_invalid": int((dep["realized"].astype(bool) & ~dep["realized_trace"]).sum()),
        "pass_at_k_trace": {int(r.k): r.pass_at_k for r in curve.itertuples()},
    }


def solutions_valid(question_ids: Iterable[str], texts: Iterable[Any], task: str, split: str = "test",
                    grader: str = "auto") -> list[bool] | None:
    """Whether each completion's worked solution is valid under ``task``'s trace grader (``grader``: a name, or
    ``"auto"``, the task's own): one bool per ``(question_id, text)``; None when ``"auto"`` finds no trace grader.
    The verified column of a candidate table (a probe bank, a routing pool): a candidate *solves* its question when
    it is correct and valid. An ``arith_trace`` task is generated again from its name and split for the questions'
    expressions (no decoding); a question it lacks reads as not valid.
    """
    name = trace_grader_for_task(task) if grader == "auto" else grader
    if name is None:
        return None
    g = get_trace_grader(name)
    exprs: dict[str, str | None] = {}
    if name == "arith_trace":
        exprs = {q.question_id: q.fields.get("expr") for q in load_task(task, split=split).questions}
    # validity reads the text's own steps and answer, never the gold: any number stands in for it
    return [bool(g.grade(t if isinstance(t, str) else "", "0", expr=exprs.get(q)).valid) if
            (name != "arith_trace" or exprs.get(q)) else False for q, t in zip(question_ids, texts)]
