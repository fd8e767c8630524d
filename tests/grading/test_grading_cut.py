"""A number or a box cut by the extraction tail is never graded as another answer (issue 25).

Extraction reads the last :data:`~reachlens.grading.extract.TAIL_CHARS` characters of a completion.
Before issue 25 the tail could start inside a number and grade the fragment: ``'The answer is 1.' +
'0' * 9000`` read as ``000...0`` = 0, wrong against gold 1 and right against gold 0; and a
``\\boxed{`` opened before the tail was "scored and wrong" (its content unreadable). Now the tail starts
at a token boundary, and a completion whose final answer lies across the cut is unscored.
"""

from __future__ import annotations

import pytest

from reachlens.grading import Grade, MathGrader, NumericGrader
from reachlens.grading.base import GRADING_ERRORS
from reachlens.grading.extract import TAIL_CHARS, AnswerCut, extract_boxed, extract_numeric_answer

UNSCORED = Grade(None, correct=False, scored=False)


@pytest.mark.parametrize("text", [
    "The answer is 1." + "0" * 9000,  # the reproduction
    "The answer is 1" + "0" * 9000,
    "x " * 10 + "1,000," + "000," * 3000,  # thousands groups
    "#### 12" + "3" * 9000 + " and that is all",  # a number cut, words after it but no number
    "So -" + "7" * (TAIL_CHARS + 5),  # the sign is before the cut
])
def test_a_number_cut_by_the_tail_is_unscored_never_another_number(text) -> None:
    before = dict(GRADING_ERRORS)
    for gold in ("0", "1", "1000", "123", "-7"):
        assert NumericGrader().grade(text, gold) == UNSCORED, gold
    assert dict(GRADING_ERRORS) == before  # a cut is undecidable, not a grader failure
    with pytest.raises(AnswerCut):
        extract_numeric_answer(text)


def test_a_cut_just_before_a_number_reads_it_whole() -> None:
    text = "word " * 3000 + "#### 42"  # the cut falls between words
    assert NumericGrader().grade(text, "42") == Grade("42", True, True)
    # the cut inside a number, the final answer later: the later answer is read
    assert NumericGrader().grade("The answer is 1." + "0" * 9000 + " so #### 5", "5") == Grade("5", True, True)
    # the tail begins exactly at a space: the first token is whole and kept
    text = "9" * 100 + " " + "8" * (TAIL_CHARS - 1)
    assert extract_numeric_answer(text) == "8" * (TAIL_CHARS - 1)


def test_a_box_opened_before_the_tail_is_unscored() -> None:
    text = r"Thus \boxed{" + "x" * 9000 + "}."
    assert MathGrader(timeout_s=2).grade(text, "x") == UNSCORED
    text = r"first \boxed{5}. " + "and so on " * 1000 + "The answer is 6."  # the last box is out of reach
    assert MathGrader(timeout_s=2).grade(text, "6") == UNSCORED
    with pytest.raises(AnswerCut):
        extract_boxed(text)


def test_a_box_inside_the_tail_is_read() -> None:
    text = r"\boxed{1} " + "x " * 5000 + r"so \boxed{\frac{1}{2}}"
    assert MathGrader(timeout_s=2).grade(text, r"\frac12") == Grade(r"\frac{1}{2}", True, True)
    nested = "\\boxed{" * 3000 + "1" + "}" * 1500  # the innermost boxes close inside the tail
    assert extract_boxed(nested) == "1"
