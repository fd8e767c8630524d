"""The lucky-guess null of a reach figure: how often K candidates hit the gold of *another* question.

O_K counts a question reached when one of its candidates' answers equals its gold. Some of those hits are luck: a
model that writes plausible numbers hits a gold now and then whatever the question. The null measures that rate on
the audit itself: each question's candidates are scored against the gold of another question of the same *kind*
(its gold's sign and number of digits, so a wrong answer of the right size is as likely to hit as it is at home),
by a random derangement within each kind (no question keeps its own gold), many times.

* ``O_K_null``: the mean over draws of the share of questions whose candidates hit the borrowed gold (computed
  exactly as the mean over derangements: question i meets each other question j of its kind with probability
  1 / (m - 1) for a kind of m questions), with ``O_K_null_p95``, the 95th percentile over the seeded draws;
* ``O_K_minus_null``: O_K - O_K_null, with a paired bootstrap interval over questions (each question's reach minus
  its own expected null hit).

A question alone in its kind is pooled with the other lone questions (and those with the largest kind when only
one is left). Answers compare as the numeric grader compares them (exact values), other answers as strings; it
applies to every audit, checkable trace or not (GSM8K's final answers, multiple choice labels).

A probe bank and a routing run keep no golds: :func:`task_golds` builds their task again from its name and split
(as the verified reach does for the questions' expressions), and each reach figure there gets its null by
:func:`lucky_null` over that figure's own candidates.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from typing import Any
from dataclasses import dataclass

import numpy as np
import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.grading.extract import number_key
from reachlens.stats import N_BOOT, paired_bootstrap_ci
from reachlens.tasks import load_task

__all__ = ["N_NULL_DRAWS", "LuckyNull", "answer_kind", "derangement", "lucky_null", "task_golds"]

N_NULL_DRAWS = 1000
"""Random derangements behind the null's 95th percentile."""


@dataclass(frozen=True)
class LuckyNull:
    """The lucky-guess null of one audit's O_K (see the module docstring)."""

    O_K_null: float
    O_K_null_p95: float
    O_K_minus_null: float
    O_K_minus_null_ci: tuple[float, float]
    per_question: pd.Series
    """Each question's expected null hit (index ``question_id``)."""

    def summary(self) -> dict[str, float | list[float]]:
        return {"O_K_null": self.O_K_null, "O_K_null_p95": self.O_K_null_p95, "O_K_minus_null": self.O_K_minus_null,
                "O_K_minus_null_ci": list(self.O_K_minus_null_ci)}


def _key(text: object) -> object:
    if not isinstance(text, str):
        return None
    key = number_key(text)
    return key if key is not None else text.strip()


def answer_kind(gold: object) -> str:
    """A gold's kind: its sign and its number of integer digits for a number, ``"label"`` otherwise.

    >>> answer_kind("42"), answer_kind("-7"), answer_kind("1,319"), answer_kind("B")
    ('+2', '-1', '+4', 'label')
    """
    key = _key(gold)
    if key is None or isinstance(key, str):
        return "label" if key is None or not key.lstrip("-").replace(".", "").isdigit() else "long"
    value = abs(int(key))
    return ("-" if str(gold).strip().startswith(("-", "\u2212")) and value else "+") + str(len(str(value)))


def _groups(golds: list[object]) -> list[list[int]]:
    """Indices of the questions of each kind, lone questions pooled (see the module docstring)."""
    by_kind: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(golds):
        by_kind[answer_kind(g)].append(i)
    groups = [g for g in by_kind.values() if len(g) > 1]
    lone = [g[0] for g in by_kind.values() if len(g) == 1]
    if len(lone) > 1:
        groups.append(lone)
    elif lone and groups:
        max(groups, key=len).append(lone[0])
    return groups


def derangement(m: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random permutation of ``range(m)`` with no fixed point (``m`` >= 2), by rejection."""
    while True:
        p = rng.permutation(m)
        if not (p == np.arange(m)).any():
            return p


def _hits(questions: pd.DataFrame, samples: pd.DataFrame) -> tuple[list[set], list[object]]:
    ok = samples[samples["scored"].astype(bool)]
    answers: dict[str, set] = defaultdict(set)
    for qid, a in zip(ok["question_id"], ok["answer"]):
        k = _key(a)
        if k is not None:
            answers[qid].add(k)
    return [answers.get(q, set()) for q in questions["question_id"]], [_key(g) for g in questions["gold"]]


def lucky_null(questions: pd.DataFrame, samples: pd.DataFrame, *, n_draws: int = N_NULL_DRAWS, seed: int = 0,
               n_boot: int = N_BOOT) -> LuckyNull:
    """The lucky-guess null of an audit's tables (``questions``: ``question_id``, ``gold``, ``reachable``;
    ``samples``: ``question_id``, ``answer``, ``scored``)."""
    answers, golds = _hits(questions, samples)
    n = len(golds)
    expected = np.full(n, math.nan)
    draws = np.zeros(max(n_draws, 1))
    rng = np.random.default_rng(seed)
    counted = np.zeros(n, dtype=bool)
    for group in _groups(list(questions["gold"])):
        m = len(group)
        hit = np.array([[golds[j] in answers[i] for j in group] for i in group], dtype=float)
        np.fill_diagonal(hit, 0.0)
        expected[group] = hit.sum(axis=1) / (m - 1)
        counted[group] = True
        for d in range(len(draws)):
            p = derangement(m, rng)
            draws[d] += hit[np.arange(m), p].sum()
    n_in = int(counted.sum())
    if n_in == 0:
        nan = math.nan
        return LuckyNull(nan, nan, nan, (nan, nan), pd.Series(expected, index=questions["question_id"]))
    reach = questions["reachable"].astype(float).to_numpy()
    diff = np.where(counted, reach - expected, np.nan)
    null = float(np.nanmean(expected))
    return LuckyNull(null, float(np.quantile(draws / n_in, 0.95)), float(np.nanmean(diff)),
                     paired_bootstrap_ci(diff, n_boot=n_boot, seed=seed),
                     pd.Series(expected, index=questions["question_id"].to_numpy(), name="null_hit"))


def task_golds(task: str, split: str, data: Mapping[str, Any] | None) -> pd.Series | None:
    """The golds of a run that keeps none (a probe bank, a routing run), by question id: its task built again from
    ``task`` and ``split``; None when it was read from a data file (``data``, the run's data identity, names it), when
    it cannot be built here (a data set out of reach), or when the questions built differ from those the run
    recorded (their SHA-256)."""
    data = dict(data or {})
    if "file" in data:
        return None
    try:
        built = load_task(task, split=split)
    except ReachlensError:
        return None
    if data.get("questions_sha256") not in (None, (built.data_identity or {}).get("questions_sha256")):
        return None
    return pd.Series({q.question_id: q.gold for q in built.questions}, dtype=object, name="gold")
