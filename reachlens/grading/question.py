"""Grading one question: which grader grades it, and its grade of one completion.

A question is graded by its protocol's grader (``numeric``, ``choice``, ``math``, ...); a
multiple-choice question with its own labels (``"1234"`` in some ARC rows) is graded by a
:class:`~reachlens.grading.choice.ChoiceGrader` over those labels. Every study grades through
:func:`question_grader` (or :func:`grader_for`, when the labels come from a stored table), so that
an audit, a routing run, a recognition run and a re-scoring grade a question alike.
"""

from __future__ import annotations

from typing import Any

from reachlens.grading.base import Grader, get_grader
from reachlens.grading.choice import ChoiceGrader

__all__ = ["grade_completion", "grader_for", "question_grader"]


def grader_for(name: str, labels: str | None) -> Grader:
    """The grader ``name``; for ``choice`` with a question's own labels (``"1234"``) when it has them.

    >>> grader_for("choice", "1234").grade("The answer is 3", "3").correct
    True
    """
    if name == "choice" and labels:
        return ChoiceGrader(labels=tuple(labels))
    return get_grader(name)


def question_grader(name: str, question: Any) -> Grader:
    """The grader ``name`` for ``question`` (a :class:`~reachlens.tasks.Question`: its ``labels``)."""
    return grader_for(name, "".join(question.labels) if question.labels else None)


def grade_completion(grader: Grader, question: Any, completion: Any) -> dict[str, Any]:
    """``answer``, ``correct`` and ``scored`` of one completion (anything with a ``text``: a
    :class:`~reachlens.engine.Completion`) of ``question`` (its ``gold``): the one grading of every study, so
    ``realized`` means the same thing in every table. A grader that cannot decide: not scored, never correct.

    >>> from types import SimpleNamespace as NS
    >>> grade_completion(get_grader("numeric"), NS(gold="4"), NS(text="#### 4"))
    {'answer': '4', 'correct': True, 'scored': True}
    """
    g = grader.grade(completion.text, question.gold)
    return {"answer": g.answer, "correct": bool(g.correct and g.scored), "scored": bool(g.scored)}
