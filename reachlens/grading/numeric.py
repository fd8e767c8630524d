"""The numeric grader: GSM8K-style final numbers compared exactly as fractions.

The answer is found by :func:`~reachlens.grading.extract.extract_numeric_answer` (``#### N``, then
"the answer is N", then the last number) and compared with the gold number as a
``fractions.Fraction``, so ``3.50`` equals ``3.5`` and ``3/4`` equals ``0.75`` with no float
rounding; ``0.333`` does not equal ``1/3``. A completion with no number is scored and wrong; one
whose last number is cut by the extraction bound is unscored (:class:`~reachlens.grading.extract.AnswerCut`). A
number past :data:`~reachlens.grading.extract.MAX_DIGITS` digits is compared as a digit string.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reachlens.errors import ReachlensError
from reachlens.grading.base import GRADERS, Grade, unscored
from reachlens.grading.extract import AnswerCut, extract_numeric_answer, number_key

__all__ = ["NumericGrader"]


@dataclass(frozen=True)
class NumericGrader:
    """Exact numeric comparison of the final number in a completion with a gold number.

    >>> NumericGrader().grade("5 + 13 = 18 dollars.\\n#### 18", "18")
    Grade(answer='18', correct=True, scored=True)
    >>> NumericGrader().grade("It costs $1,234.00", "1,234").correct
    True
    """

    name: str = field(default="numeric", init=False)
    """The registry name."""

    def extract(self, text: str) -> str | None:
        """The final number in ``text``, normalized for display, or None.

        >>> NumericGrader().extract("The answer is: -3.50.")
        '-3.50'
        """
        return extract_numeric_answer(text)

    def grade(self, text: str, gold: str) -> Grade:
        """Grade ``text`` against the gold number ``gold`` (``"18"``, ``"1,234"``, ``"3/4"``).

        Never raises on ``text``: an exception while extracting or comparing makes the completion
        unscored (:func:`~reachlens.grading.base.unscored`).

        Raises:
            ReachlensError: ``gold`` is not a single number (a data error, not a model error).

        >>> NumericGrader().grade("3/4 of the cake", "0.75").correct
        True
        """
        gold_value = number_key(gold) if isinstance(gold, str) else None
        if gold_value is None:
            raise ReachlensError(
                f"gold answer {gold!r} is not a number; the numeric grader needs a gold such as "
                "'18', '-3.5', '1,234' or '3/4' (use the 'math' grader for LaTeX answers)"
            )
        answer = None
        try:
            answer = self.extract(text)
            if answer is None:
                return Grade(answer=None, correct=False)
            return Grade(answer=answer, correct=number_key(answer) == gold_value)
        except AnswerCut:  # the last number lies across the extraction bound: undecidable, not wrong
            return Grade(answer=None, correct=False, scored=False)
        except Exception as error:
            return unscored(self.name, text, error, answer)


GRADERS.register("numeric", NumericGrader())
