"""The grader interface: model text in, a :class:`Grade` out.

A grader never evaluates model text as code. Extraction and comparison are pure string and
number work (``fractions.Fraction``, regular expressions); the math-equivalence grader parses
with ``math-verify`` under a timeout. A grader that cannot decide (a timeout, a parser crash)
returns ``scored=False`` so the row is marked unscored, never silently counted wrong.

Model text is untrusted: a grader never raises on it. Any exception inside extraction or comparison
(a bug in a parser, text that is not even a string) makes that one completion unscored through
:func:`unscored`, which logs it and counts it in :data:`GRADING_ERRORS`. Only a bad *gold* answer
raises: it is the data's fault, found before any model runs when the task file is loaded.
"""

from __future__ import annotations

import collections
import logging
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from reachlens._registry import Registry

__all__ = ["GRADING_ERRORS", "Grade", "Grader", "GRADERS", "get_grader", "unscored"]

logger = logging.getLogger(__name__)

GRADING_ERRORS: collections.Counter[str] = collections.Counter()
"""Completions made unscored by an exception inside a grader in this process, by grader name."""


@dataclass(frozen=True)
class Grade:
    """The verdict on one completion."""

    answer: str | None
    """The extracted final answer, normalized for display (None when none could be found)."""
    correct: bool
    """Whether ``answer`` matches the gold answer. False whenever ``scored`` is False."""
    scored: bool = True
    """False when the grader could not decide (timeout, parser error): exclude, do not count wrong."""


@runtime_checkable
class Grader(Protocol):
    """Scores a completion against a gold answer."""

    name: str

    def extract(self, text: str) -> str | None:
        """The final answer in ``text``, or None."""
        ...

    def grade(self, text: str, gold: str) -> Grade:
        """Extract the answer from ``text`` and compare it with ``gold``."""
        ...


GRADERS: Registry[Grader] = Registry("grader")


def get_grader(name: str) -> Grader:
    """The registered grader called ``name`` (``numeric``, ``choice``, ``math``)."""
    return GRADERS[name]


def unscored(grader: str, text: object, error: BaseException, answer: str | None = None) -> Grade:
    """The verdict on a completion whose grading raised ``error``: unscored, logged and counted."""
    GRADING_ERRORS[grader] += 1
    head = text[:80] if isinstance(text, str) else type(text).__name__
    try:
        message = str(error)[:200]
    except Exception:  # an exception whose message cannot be made
        message = "?"
    logger.warning("the %s grader failed on a completion (%s: %s; text begins %r); marked unscored",
                   grader, type(error).__name__, message, head)
    return Grade(answer=answer, correct=False, scored=False)
