"""Graders: model text in, a :class:`Grade` out; model text is never executed.

Importing this package registers the three graders in :data:`GRADERS`: ``numeric`` (GSM8K-style
exact numbers), ``choice`` (multiple-choice labels A-D; build a :class:`ChoiceGrader` for other
labels) and ``math`` (LaTeX equivalence with math-verify under a timeout; math-verify itself is
imported on first use).

>>> get_grader("numeric").grade("#### 1,319", "1319").correct
True
"""

from reachlens.grading.base import GRADERS, Grade, Grader, get_grader
from reachlens.grading.choice import ChoiceGrader
from reachlens.grading.extract import (
    AnswerCut,
    extract_boxed,
    extract_choice,
    extract_math_answer,
    extract_numeric_answer,
    parse_number,
)
from reachlens.grading.math_equiv import MathGrader, normalize_math_answer
from reachlens.grading.numeric import NumericGrader
from reachlens.grading.question import grade_completion, grader_for, question_grader

__all__ = [
    "GRADERS",
    "AnswerCut",
    "ChoiceGrader",
    "Grade",
    "Grader",
    "MathGrader",
    "NumericGrader",
    "extract_boxed",
    "extract_choice",
    "extract_math_answer",
    "extract_numeric_answer",
    "get_grader",
    "grade_completion",
    "grader_for",
    "normalize_math_answer",
    "parse_number",
    "question_grader",
]
