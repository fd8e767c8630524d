"""The grader interface: model text in, a :class:`Grade` out.

A grader never evaluates model text as code. Extraction and comparison are pure string and
number work (``fractions.Fraction``, regular expressions); the math-equivalence grader parses
with ``math-verify`` under a timeout. A grader that cannot decide (a timeout, a parser crash)
returns ``scored=False`` so the row is marked unscored, never silently counted wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from reachlens._registry import Registry

__all__ = ["Grade", "Grader", "GRADERS", "get_grader"]


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
