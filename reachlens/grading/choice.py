"""The multiple-choice grader: the chosen label against the gold label.

Labels are single characters, letters ``A``-``J`` or digits ``1``-``9`` (ARC uses both). The chosen
label is found by :func:`~reachlens.grading.extract.extract_choice`; see its docstring for the
priority of the rules and the caveat of the last-token fallback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from reachlens.errors import ReachlensError
from reachlens.grading.base import GRADERS, Grade, unscored
from reachlens.grading.extract import extract_choice

__all__ = ["ChoiceGrader"]

_VALID = frozenset("ABCDEFGHIJ123456789")


@dataclass(frozen=True)
class ChoiceGrader:
    """Multiple-choice grading over a fixed set of labels.

    >>> ChoiceGrader().grade("The answer is (B).", "B")
    Grade(answer='B', correct=True, scored=True)
    >>> ChoiceGrader(labels=("1", "2", "3", "4")).grade("Answer: 3", "4").correct
    False
    """

    labels: Sequence[str] = ("A", "B", "C", "D")
    """The valid labels, in display order: letters A-J or digits 1-9 (``"ABCDE"`` works too);
    stored as a tuple."""
    name: str = field(default="choice", init=False)
    """The registry name."""

    def __post_init__(self) -> None:
        labels = tuple(self.labels)
        bad = [label for label in labels if label not in _VALID]
        if not labels or bad or len(set(labels)) != len(labels):
            raise ReachlensError(
                f"labels {self.labels!r} must be distinct single letters A-J or digits 1-9, "
                f"e.g. ('A', 'B', 'C', 'D'); bad: {bad!r}"
            )
        object.__setattr__(self, "labels", labels)

    def extract(self, text: str) -> str | None:
        """The label chosen in ``text``, or None.

        >>> ChoiceGrader(labels=tuple("ABCDE")).extract("#### E")
        'E'
        """
        return extract_choice(text, self.labels)

    def grade(self, text: str, gold: str) -> Grade:
        """Grade ``text`` against the gold label ``gold``.

        Never raises on ``text``: an exception while extracting makes the completion unscored.

        Raises:
            ReachlensError: ``gold`` is not one of ``labels`` (a data error, found at load time for
                task files).

        >>> ChoiceGrader().grade("C", "c").correct
        True
        """
        gold_label = gold.strip().upper() if isinstance(gold, str) else None
        if gold_label not in self.labels:
            raise ReachlensError(f"gold label {gold!r} is not one of the labels {self.labels!r}")
        try:
            answer = self.extract(text)
        except Exception as error:
            return unscored(self.name, text, error)
        return Grade(answer=answer, correct=answer == gold_label)


GRADERS.register("choice", ChoiceGrader())
