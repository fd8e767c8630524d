"""The tables every study writes: their columns, their per-question updates, and one Markdown writer.

One vocabulary across studies (the glossary of docs/concepts.md):

* ``realized``: the deployment (greedy, the protocol's prompt) is graded correct; its mean is ``D``;
* ``reachable``: the probe of budget K (K samples, or K layer routes) has a correct candidate; its
  mean is ``O_K``;
* ``deployed_text``, ``deployed_answer``, ``deployed_scored``, ``deployed_finish``: the deployment's
  raw output, extracted answer, whether the grader could decide it, and why decoding stopped.

Every candidate any study writes (an audit's samples, a routing run's route evaluations, a probe run's bank) is a
row of one shape, :data:`CANDIDATE_COLUMNS`: ``candidate_idx`` its index within its question, ``n_tokens`` the tokens
it generated, ``correct`` and ``scored`` its grade (booleans); a study adds its own columns after them. The selectors
read :data:`SELECTOR_COLUMNS`, five of them.

Tables (raw text is kept in every one, so a run can be re-scored without decoding again):

* :data:`QUESTION_COLUMNS` / :data:`SAMPLE_COLUMNS`: an audit's questions and its K samples each;
* :data:`ROUTE_CANDIDATE_COLUMNS` / :data:`ROUTE_QUESTION_COLUMNS`: a routing run's route evaluations and
  its questions (each selector adds ``<selector>`` and ``<selector>_answer``);
* :data:`BANK_COLUMNS`: a probe run's candidate bank (the greedy deployment and every probe's candidates);
* :data:`OPTION_COLUMNS` / :data:`RECOGNITION_COLUMNS`: a recognition run's option likelihoods and
  its questions (recognition beside the greedy deployment);
* :data:`CAUSAL_COLUMNS`: a causal sweep's per-question outcomes under each condition.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from reachlens.escape import md_text

__all__ = [
    "BANK_COLUMNS", "CANDIDATE_COLUMNS", "CAUSAL_COLUMNS", "GENERATION_COLUMNS", "OPTION_COLUMNS", "QUESTION_COLUMNS",
    "RECOGNITION_COLUMNS", "ROUTE_CANDIDATE_COLUMNS", "ROUTE_QUESTION_COLUMNS", "SAMPLE_COLUMNS", "SELECTOR_COLUMNS",
    "candidate_frame", "candidate_row", "canonical", "in_task_order", "markdown_table", "update_question_table",
]

QUESTION_COLUMNS = [
    "question_id", "realized", "reachable", "n_correct", "n_scored", "k", "propensity",
    "deployed_answer", "deployed_text", "deployed_scored", "deployed_finish", "gold", "labels",
]
"""An audit's question table: one row per question."""

CANDIDATE_COLUMNS = [
    "question_id", "candidate_idx", "text", "answer", "correct", "scored", "finish_reason", "n_tokens", "mean_logprob",
]
"""Every candidate of every study, first in its table: its question, its index within the question (an audit's
sample j, a route evaluation's order, a probe's candidate), raw text, extracted answer (NaN: none), grade
(``correct`` only when ``scored``), why decoding stopped, tokens generated and their mean log-probability."""

def candidate_row(question_id: str, candidate_idx: int, completion: Any, graded: Mapping[str, Any],
                  **extra: Any) -> dict[str, Any]:
    """One candidate (:data:`CANDIDATE_COLUMNS`, then ``extra``'s columns) of ``completion`` (its ``text``,
    ``token_ids``, ``finish_reason`` and ``mean_logprob``: a :class:`~reachlens.engine.Completion`), ``graded`` its
    ``answer``, ``correct`` and ``scored`` (:func:`~reachlens.grading.grade_completion`): the one way every study
    builds a candidate from a completion.

    >>> from types import SimpleNamespace as NS
    >>> row = candidate_row("q0", 2, NS(text="4", token_ids=(7,), finish_reason="stop", mean_logprob=-0.5),
    ...                     {"answer": "4", "correct": True, "scored": True}, probe="greedy")
    >>> list(row) == CANDIDATE_COLUMNS + ["probe"], row["n_tokens"]
    (True, 1)
    """
    return {"question_id": question_id, "candidate_idx": candidate_idx, "text": completion.text,
            "answer": graded["answer"], "correct": bool(graded["correct"]), "scored": bool(graded["scored"]),
            "finish_reason": completion.finish_reason, "n_tokens": len(completion.token_ids),
            "mean_logprob": completion.mean_logprob, **extra}


SELECTOR_COLUMNS = ("question_id", "candidate_idx", "answer", "correct", "scored")
"""The columns of a candidate every selector reads (:mod:`reachlens.selectors`): a subset of :data:`CANDIDATE_COLUMNS`."""

SAMPLE_COLUMNS = list(CANDIDATE_COLUMNS)
"""An audit's sample table: one row per (question, sample), the candidate columns alone."""

ROUTE_CANDIDATE_COLUMNS = [*CANDIDATE_COLUMNS, "route", "route_len", "duplicate", "lowest_window_logprob", "objective"]
"""A routing run's candidate table: one row per route evaluation (the identity route first); ``verify_logprob``
follows when the run scores ``self_verify``."""

BANK_COLUMNS = [*CANDIDATE_COLUMNS, "probe", "arm", "intervention", "detail"]
"""A probe run's candidate bank: the greedy deployment (probe and arm ``greedy``) and every probe's candidates, which
probe and arm made each, whether an activation probe did (``intervention``) and what varies per question
(``detail``: a route, a placebo's position)."""

ROUTE_QUESTION_COLUMNS = [
    "question_id", "realized", "deployed_answer", "deployed_scored", "reachable", "n_candidates", "n_unique", "n_answers",
]
"""A routing run's question table, before the selectors' columns (``realized`` as in every table: the deployment
graded correct; ``deployed_scored`` whether it could be graded; ``reachable`` is 1/0, NaN when no candidate was)."""

OPTION_COLUMNS = ["question_id", "option", "label", "text", "loglik", "n_tokens", "is_greedy", "loglik_norm", "gold"]
"""A recognition run's option table: one row per (question, option)."""

RECOGNITION_COLUMNS = [
    "question_id", "gold", "gold_index", "rec_choice", "rec_correct", "rec_choice_norm", "rec_correct_norm",
    "rec_margin", "deployed_text", "deployed_answer", "realized", "deployed_scored", "deployed_finish",
]
"""A recognition run's question table: recognition (``rec_*``) beside the greedy deployment."""

GENERATION_COLUMNS = ["question_id", "deployed_text", "deployed_answer", "realized", "deployed_scored", "deployed_finish"]
"""The greedy deployment of chosen questions, graded (recognition's generation side, a causal condition)."""

CAUSAL_COLUMNS = ["condition", "question_id", "set", "realized", "deployed_answer", "deployed_text"]
"""A causal sweep's per-question table: the deployment of each question under each condition."""

_TEXT_COLUMNS = ("text", "answer", "finish_reason", "deployed_answer", "deployed_text", "deployed_finish", "gold", "labels",
                 "question_id", "probe", "arm", "detail", "route")


_CANDIDATE_TYPES = {"candidate_idx": "int64", "n_tokens": "int64", "mean_logprob": "float64", "correct": "bool",
                    "scored": "bool"}


def candidate_frame(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> pd.DataFrame:
    """Candidate rows (dicts) as a table of ``columns`` (:data:`CANDIDATE_COLUMNS` first) with the candidate columns'
    types and text as pandas' string dtype (:func:`canonical`), so a table compares equal to itself read back."""
    df = pd.DataFrame(list(rows), columns=list(columns))
    return canonical(df.astype({c: t for c, t in _CANDIDATE_TYPES.items() if c in df.columns}))


def canonical(df: pd.DataFrame) -> pd.DataFrame:
    """Text columns as pandas' string dtype (missing = NaN), so tables compare equal however they were made."""
    df = df.copy()
    for col in _TEXT_COLUMNS:
        if col in df.columns:
            df[col] = df[col].astype("str")
    return df


def update_question_table(questions: pd.DataFrame, samples: pd.DataFrame, k: int) -> pd.DataFrame:
    """An audit's question table with the columns that depend on its samples recomputed
    (``n_correct``, ``n_scored``, ``k``, ``reachable``, ``propensity``): after re-scoring the
    samples, cutting them to the first k, or adding more."""
    agg = samples.groupby("question_id").agg(n_correct=("correct", "sum"), n_scored=("scored", "sum"))
    q = questions.drop(columns=["n_correct", "n_scored"]).join(agg, on="question_id")
    q["n_correct"] = q["n_correct"].fillna(0).astype(int)
    q["n_scored"] = q["n_scored"].fillna(0).astype(int)
    q["k"] = k
    q["reachable"] = q["n_correct"] > 0
    q["propensity"] = q["n_correct"] / q["n_scored"].where(q["n_scored"] > 0)
    return canonical(q[QUESTION_COLUMNS])


def in_task_order(questions: pd.DataFrame, samples: pd.DataFrame, ids: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """An audit's tables sorted by the task's question order (ids it does not know go last), samples
    then by sample index."""
    order = {qid: i for i, qid in enumerate(ids)}
    rank = lambda s: s.map(lambda x: order.get(x, len(order)))  # noqa: E731
    questions = questions.assign(_r=rank(questions["question_id"])).sort_values(["_r", "question_id"], kind="stable")
    samples = samples.assign(_r=rank(samples["question_id"])).sort_values(["_r", "question_id", "candidate_idx"],
                                                                         kind="stable")
    return (canonical(questions.drop(columns="_r").reset_index(drop=True)[QUESTION_COLUMNS]),
            canonical(samples.drop(columns="_r").reset_index(drop=True)[SAMPLE_COLUMNS]))


def markdown_table(df: pd.DataFrame, digits: int = 3, missing: str = "undefined") -> str:
    """``df`` as a GitHub Markdown table: floats to ``digits`` places, NaN as ``missing``; an empty
    table is ``_(none)_``. Every header and cell is escaped (:func:`reachlens.escape.md_text`): a ``|``, a line
    break or HTML in a question id, an answer or a model spec never shifts the columns or reaches a page live.

    >>> print(markdown_table(pd.DataFrame({"model": ["base"], "D": [0.4567], "O_K": [float("nan")]})))
    | model | D | O_K |
    |---|---|---|
    | base | 0.457 | undefined |
    """
    if df.empty:
        return "_(none)_"

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return missing if math.isnan(v) else f"{v:.{digits}f}"
        return md_text(v)

    head = "| " + " | ".join(map(md_text, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *body])
