"""Decode questions and grade them: the one path from a question to its graded deployment and samples.

Every study that decodes goes through here: the audit (the deployment and K samples per question,
:func:`audit_slice`), recognition's generation side and every causal condition (the deployment alone,
:func:`deploy_and_grade`). A completion is graded in one place (:func:`~reachlens.grading.grade_completion`),
so ``realized`` means the same thing in every table, and made a candidate row in one
(:func:`~reachlens.records.candidate_row`). The slices decoded together are fixed by :func:`question_slices`.
What a decode may hold in memory is bounded in :mod:`reachlens.engine.memory`; what fits the model's context, in
:mod:`reachlens.runner.context`.

The deployment is the greedy decode of the protocol's prompt; sample j of question q is drawn with the seed
``row_seed(seed, q, sample_offset + j)`` and depends on nothing else, so a question decodes the same rows
in any batch, process or executor. Hooks the caller attached to the model are live on every step.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence, Set
from typing import Any

import pandas as pd

from reachlens.engine import Completion, Row, row_seed
from reachlens.engine.backends import generate_rows
from reachlens.errors import UnknownNameError
from reachlens.execution import ExecConfig
from reachlens.grading import grade_completion, question_grader
from reachlens.protocol import Protocol
from reachlens.records import GENERATION_COLUMNS, QUESTION_COLUMNS, SAMPLE_COLUMNS, candidate_row, canonical
from reachlens.tasks.base import Question, Task
from reachlens.tasks.chat import render_prompts

__all__ = ["audit_slice", "batch_slices", "decode_rows", "deploy_and_grade", "deploy_arms_and_grade", "grade_questions",
           "grade_samples", "question_slices", "questions_by_id", "sample_slice"]


def _deployed(grader, question: Question, completion: Completion) -> dict[str, Any]:
    g = grade_completion(grader, question, completion)
    return {"question_id": question.question_id, "deployed_text": completion.text, "deployed_answer": g["answer"],
            "realized": g["correct"], "deployed_scored": g["scored"], "deployed_finish": completion.finish_reason}


def grade_samples(protocol: Protocol, questions: Sequence[Question], samples: Sequence[Sequence[Completion]],
                  sample_offset: int = 0) -> pd.DataFrame:
    """Grade each question's samples into candidate rows (:data:`~reachlens.records.SAMPLE_COLUMNS`; sample j of
    question i is candidate ``sample_offset + j``)."""
    rows = []
    for q, outs in zip(questions, samples):
        grader = question_grader(str(protocol.grader), q)
        graded: dict[str, dict[str, Any]] = {}  # a grade depends on the text and the question only: once per text
        for j, o in enumerate(outs):
            grade = graded.get(o.text)
            if grade is None:
                grade = graded[o.text] = grade_completion(grader, q, o)
            rows.append(candidate_row(q.question_id, sample_offset + j, o, grade))
    return canonical(pd.DataFrame(rows, columns=SAMPLE_COLUMNS))


def grade_questions(
    protocol: Protocol, questions: Sequence[Question], deployed: Sequence[Completion],
    samples: Sequence[Sequence[Completion]], sample_offset: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Grade completions into an audit's question and sample tables (no model needed)."""
    s_df = grade_samples(protocol, questions, samples, sample_offset)
    good = s_df.groupby("question_id")["correct"].sum() if len(s_df) else pd.Series(dtype=int)
    graded = s_df.groupby("question_id")["scored"].sum() if len(s_df) else pd.Series(dtype=int)
    q_rows = []
    for q, dep in zip(questions, deployed):
        deployment = _deployed(question_grader(str(protocol.grader), q), q, dep)
        n_correct, n_scored = int(good.get(q.question_id, 0)), int(graded.get(q.question_id, 0))
        q_rows.append({**deployment, "reachable": n_correct > 0, "n_correct": n_correct,
                       "n_scored": n_scored, "k": protocol.k, "propensity": n_correct / n_scored if n_scored else math.nan,
                       "gold": q.gold, "labels": "".join(q.labels) if q.labels is not None else None})
    return canonical(pd.DataFrame(q_rows, columns=QUESTION_COLUMNS)), s_df


def decode_rows(
    model, task: Task, protocol: Protocol, questions: Sequence[Question], extra: Sequence[Sequence[tuple[Any, ...]]],
    exec_config: ExecConfig,
) -> tuple[list[Completion], list[list[Completion]]]:
    """Each question's deployment (greedy, the plain model) and its ``extra`` rows, decoded together in one
    engine call: ``extra[i]`` lists question i's rows as ``(seed, arm, index)`` (seed None: greedy; arm None:
    the plain model; tag ``(question_id, index)``). The audit's samples and a probe's arms
    (:mod:`reachlens.probes`) are both such rows; hooks the caller attached are live."""
    rows: list[Row] = []
    for i, (q, mine) in enumerate(zip(questions, extra, strict=True)):
        rows.append(Row(i, None, tag=(q.question_id, None)))
        rows += [Row(i, seed, tag=(q.question_id, index), arm=arm) for seed, arm, index in mine]
    outs = generate_rows(model, render_prompts(task, protocol, questions, getattr(model, "tokenizer", None)), rows, protocol,
                         max_batch_rows=exec_config.max_batch_rows, share_prefixes=exec_config.share_prefixes)
    deployed, rest, at = [], [], 0
    for mine in extra:
        deployed.append(outs[at])
        rest.append(outs[at + 1 : at + 1 + len(mine)])
        at += 1 + len(mine)
    return deployed, rest


def _decode(
    model, task: Task, protocol: Protocol, questions: Sequence[Question], exec_config: ExecConfig, *,
    k: int, sample_offset: int = 0, arms: Sequence[Hashable] | None = None, deploy: bool = True,
) -> tuple[list[Completion], list[list[Completion]]]:
    """Each question's deployment (greedy; none when ``deploy`` is False) and its ``k`` samples, decoded together.

    ``arms``: per entry of ``questions``, the arm its rows run (``Row.arm``; None: the plain model, as
    when ``arms`` is None). A question may repeat under different arms: its prompt is rendered once,
    and its arms are roots of one sample tree (prefilled in one batched forward)."""
    per_q = k + deploy
    index: dict[str, int] = {}  # each distinct question's prompt
    unique: list[Question] = []
    for q in questions:
        if q.question_id not in index:
            index[q.question_id] = len(unique)
            unique.append(q)
    rows: list[Row] = []
    for q, arm in zip(questions, [None] * len(questions) if arms is None else arms):
        i = index[q.question_id]
        if deploy:
            rows.append(Row(i, None, tag=(q.question_id, None), arm=arm))
        for j in range(k):
            # temperature 0 (allowed with k=1 only) makes the one sample greedy too
            seed = row_seed(protocol.seed, q.question_id, sample_offset + j) if protocol.temperature > 0 else None
            rows.append(Row(i, seed, tag=(q.question_id, sample_offset + j), arm=arm))
    outs = generate_rows(model, render_prompts(task, protocol, unique, getattr(model, "tokenizer", None)), rows, protocol,
                         max_batch_rows=exec_config.max_batch_rows, share_prefixes=exec_config.share_prefixes)
    return ([outs[i * per_q] for i in range(len(questions))] if deploy else [],
            [outs[i * per_q + deploy : (i + 1) * per_q] for i in range(len(questions))])


def questions_by_id(task: Task, ids: Sequence[str] | None) -> list[Question]:
    """The questions of ``task`` with ``ids``, in that order (all when None); an unknown id is refused."""
    if ids is None:
        return list(task.questions)
    by_id = {q.question_id: q for q in task.questions}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise UnknownNameError(f"question ids {missing[:5]!r} are not in task {task.name!r} ({len(missing)} missing)")
    return [by_id[i] for i in ids]


def deploy_and_grade(
    model, task: Task, protocol: Protocol, question_ids: Sequence[str] | None = None,
    exec_config: ExecConfig | None = None,
) -> pd.DataFrame:
    """The deployment (greedy) of the chosen questions, graded: :data:`~reachlens.records.GENERATION_COLUMNS`,
    in the order of ``question_ids`` (all questions when None). ``protocol`` is resolved and greedy."""
    ids = [q.question_id for q in questions_by_id(task, question_ids)]
    return deploy_arms_and_grade(model, task, protocol, [(None, ids)], exec_config)[0]


def deploy_arms_and_grade(
    model, task: Task, protocol: Protocol, plan: Sequence[tuple[Hashable, Sequence[str]]],
    exec_config: ExecConfig | None = None,
) -> list[pd.DataFrame]:
    """The graded deployments of many arms in one decode: per ``(arm, question_ids)`` of ``plan``, the
    table :func:`deploy_and_grade` gives for those questions with that arm's hooks alone attached.

    Every arm's rows (``Row.arm``; None: the plain model) decode side by side in one
    :func:`~reachlens.engine.generate` call, each question's prompt rendered once and prefilled once per
    arm; the per-arm hooks (``arm=`` of :mod:`reachlens.interventions`) must be attached by the caller.
    Rows never share an entry across arms, so each arm decodes what it would alone (up to the float32
    rounding of a different batch composition, see :mod:`reachlens.engine.generate`).

    >>> with model.hooks(fwd_hooks=zero_ablation(model, 3, "mlp", arm="L3")):  # doctest: +SKIP
    ...     plain, ablated = deploy_arms_and_grade(model, task, protocol, [(None, ids), ("L3", ids)])
    """
    questions, arms, spans = [], [], []
    for arm, ids in plan:
        chosen = questions_by_id(task, ids)
        spans.append((len(questions), len(questions) + len(chosen)))
        questions += chosen
        arms += [arm] * len(chosen)
    deployed: list[Completion] = []
    if questions:
        deployed, _ = _decode(model, task, protocol, questions, exec_config or ExecConfig(max_batch_rows=256), k=0,
                              arms=arms)
    rows = [_deployed(question_grader(str(protocol.grader), q), q, d) for q, d in zip(questions, deployed)]
    return [pd.DataFrame(rows[a:b], columns=GENERATION_COLUMNS) for a, b in spans]


def question_slices(n_questions: int, per_question: int, max_batch_rows: int) -> list[tuple[int, int]]:
    """The fixed slices ``(start, stop)`` of ``n_questions`` questions of ``per_question`` rows each decoded together:
    ``max_batch_rows // per_question`` questions a slice (at least one), counted from the first question whatever
    is done already. The one slice rule of every unit (an audit's, a probe run's).

    >>> question_slices(5, 3, 7)
    [(0, 2), (2, 4), (4, 5)]
    """
    group = max(1, max_batch_rows // per_question)
    return [(start, min(start + group, n_questions)) for start in range(0, n_questions, group)]


def batch_slices(task: Task, protocol: Protocol, max_batch_rows: int, done: Set[str] = frozenset()) -> list[tuple[int, int]]:
    """The fixed slices ``(start, stop)`` of ``task`` decoded together, less those wholly in ``done``.

    A slice holds ``max_batch_rows // (K + 1)`` questions (:func:`question_slices`). So a resumed run, and every
    executor, decodes exactly the batches an uninterrupted single-process run would have: same shapes, same
    numbers, bit for bit.
    """
    slices = question_slices(len(task), protocol.k + 1, max_batch_rows)
    return [(a, b) for a, b in slices if any(q.question_id not in done for q in task.questions[a:b])]


def audit_slice(
    model, task: Task, protocol: Protocol, start: int, stop: int, exec_config: ExecConfig, *, sample_offset: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Decode and grade the questions ``task.questions[start:stop]`` (one slice of :func:`batch_slices`): their
    question and sample tables (samples ``sample_offset`` .. ``sample_offset + K - 1``). ``protocol`` is resolved."""
    batch = list(task.questions[start:stop])
    deployed, samples = _decode(model, task, protocol, batch, exec_config, k=protocol.k, sample_offset=sample_offset)
    return grade_questions(protocol, batch, deployed, samples, sample_offset)


def sample_slice(
    model, task: Task, protocol: Protocol, start: int, stop: int, exec_config: ExecConfig, *, sample_offset: int = 0,
) -> pd.DataFrame:
    """The K samples alone of the questions ``task.questions[start:stop]``, graded (the sample table
    :func:`audit_slice` gives, without decoding the deployment): a probe's samples (:mod:`reachlens.probes`)."""
    batch = list(task.questions[start:stop])
    _, samples = _decode(model, task, protocol, batch, exec_config, k=protocol.k, sample_offset=sample_offset,
                         deploy=False)
    return grade_samples(protocol, batch, samples, sample_offset)
