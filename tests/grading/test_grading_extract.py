"""Hand-made cases for every answer-extraction rule in ``reachlens.grading.extract``."""

from __future__ import annotations

import doctest
import importlib
from fractions import Fraction

import pytest

from reachlens.errors import ReachlensError
from reachlens.grading import (
    extract_boxed,
    extract_choice,
    extract_math_answer,
    extract_numeric_answer,
    parse_number,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # thousands separators, but never a "3, 4" list or "12,34"
        ("1,319 apples", "1319"),
        ("We have 1,234,567 grains", "1234567"),
        ("the points 3, 4", "4"),
        ("pairs 3,4", "4"),
        ("12,34", "34"),
        # signs
        ("-5", "-5"),
        ("The temperature is -12 degrees", "-12"),
        ("+7", "7"),
        ("\u22125", "-5"),  # a unicode minus sign
        ("10-5", "5"),  # a subtraction, not a negative number
        # decimals, fractions, trailing period
        ("It costs 3.50.", "3.50"),
        ("only .5 left", "0.5"),
        ("She ate 3/4 of it", "3/4"),
        ("The total is 42.", "42"),
        # currency and percent signs
        ("$18", "18"),
        ("He paid $1,234.50 in total.", "1234.50"),
        ("-$5 overall", "-5"),
        ("a 50% discount", "50"),
        ("\u20ac7 each", "7"),
        # no number
        ("no digits here", None),
        ("", None),
        ("divide by 3/0", None),
    ],
)
def test_last_number_and_normalization(text: str, expected: str | None) -> None:
    assert extract_numeric_answer(text) == expected


def test_hash_marker_wins_over_later_numbers() -> None:
    # GSM8K convention: the `####` line is the answer, whatever follows it.
    assert extract_numeric_answer("So 3 + 4 = 7.\n#### 7\nI hope 12 is right, 99") == "7"


def test_last_hash_marker_wins() -> None:
    assert extract_numeric_answer("#### 5\nwait, recount\n#### 6") == "6"


def test_hash_marker_without_number_falls_through() -> None:
    assert extract_numeric_answer("The answer is 8.\n#### ?") == "8"
    assert extract_numeric_answer("It is 8, then 9.\n####") == "9"


def test_hash_marker_beats_answer_phrase() -> None:
    assert extract_numeric_answer("The answer is 5.\n#### 6") == "6"


@pytest.mark.parametrize(
    "text",
    [
        "The answer is 18. Steps taken: 3",
        "the answer is: 18, after 3 steps",
        "THE ANSWER IS $18 (in 2 days)",
        "Final answer: 18 dollars, 4 people",
        "The answer is 17.\nNo, recheck: the answer is 18 for 2 days",
    ],
)
def test_answer_phrase_wins_over_later_numbers(text: str) -> None:
    assert extract_numeric_answer(text) == "18"


def test_answer_phrase_without_number_uses_an_earlier_phrase() -> None:
    assert extract_numeric_answer("The answer is 4. Hmm, the answer is\nunclear") == "4"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("18", Fraction(18)),
        ("1,234", Fraction(1234)),
        ("-3.5", Fraction(-7, 2)),
        ("3.50", Fraction(7, 2)),
        ("3/4", Fraction(3, 4)),
        ("0.75", Fraction(3, 4)),
        ("1.5/2", Fraction(3, 4)),
        (" $18. ", Fraction(18)),
        ("50%", Fraction(50)),
        ("-1,000,000", Fraction(-1_000_000)),
        ("3, 4", None),
        ("3 4", None),
        ("1/0", None),
        ("x", None),
        ("", None),
        ("18 apples", None),
    ],
)
def test_parse_number(text: str, value: Fraction | None) -> None:
    assert parse_number(text) == value


def test_equal_values_in_different_spellings() -> None:
    assert parse_number("3.50") == parse_number("3.5") == parse_number("7/2")
    assert parse_number("3/4") == parse_number("0.75")
    assert parse_number("0.333") != parse_number("1/3")  # exact: no float rounding


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is (B).", "B"),
        ("the answer is: C", "C"),
        ("Answer: C", "C"),
        ("**Answer:** D", "D"),  # markdown bold around the keyword
        ("#### B", "B"),
        ("The answer is (A). Let me check... #### C", "C"),  # `####` beats the phrase
        ("B", "B"),
        ("(d).", "D"),
        ("  c  ", "C"),
        ("Paris is (B) but London (C) is bigger", "C"),  # last parenthesized label
        ("I choose option D over A", "A"),  # last standalone label as a fallback
        ("the answer is a bit tricky", None),  # lower-case 'a' is a word, not a label
        ("nothing chosen", None),
        ("The answer is (E)", None),  # E is not a valid label here
    ],
)
def test_extract_choice_letters(text: str, expected: str | None) -> None:
    assert extract_choice(text, ("A", "B", "C", "D")) == expected


def test_bold_answer_marker() -> None:
    assert extract_choice("The answer is **B**", "ABCD") == "B"


def test_extract_choice_digit_labels_as_in_arc() -> None:
    labels = ("1", "2", "3", "4")
    assert extract_choice("The answer is 3", labels) == "3"
    assert extract_choice("Answer: (2)", labels) == "2"
    assert extract_choice("4", labels) == "4"
    assert extract_choice("The answer is 12", labels) is None  # 12 is no label
    assert extract_choice("#### 9", labels) is None


def test_extract_choice_up_to_j() -> None:
    labels = tuple("ABCDEFGHIJ")
    assert extract_choice("The answer is (J).", labels) == "J"
    assert extract_choice("#### h", labels) is None  # anchored labels are matched as spelled
    assert extract_choice("h", labels) == "H"  # a lone label may be lower case


def test_extract_choice_rejects_empty_labels() -> None:
    with pytest.raises(ReachlensError, match=r"labels \(\) is empty"):
        extract_choice("A", ())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so $x = \boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),
        (r"\boxed{1} then \boxed{2}", "2"),
        (r"\boxed{\left\{ 1, 2 \right\}}", r"\left\{ 1, 2 \right\}"),
        (r"\fbox{7}", "7"),
        (r"\boxed {x^{2}}", "x^{2}"),
        (r"\boxed{\frac{1}{2}", None),  # truncated output: unbalanced
        ("no box", None),
    ],
)
def test_extract_boxed(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"The answer is 3. Indeed $\boxed{4}$.", "4"),  # a box beats everything
        ("Work...\n#### 1,234\nThe answer is 9", "1,234"),  # `####` beats the phrase
        ("The answer is $x^2+1$.", "x^2+1"),
        ("the answer is: \\frac{3}{4}", "\\frac{3}{4}"),
        ("I do not know.", None),
    ],
)
def test_extract_math_answer(text: str, expected: str | None) -> None:
    assert extract_math_answer(text) == expected


@pytest.mark.parametrize(
    "module",
    [
        "reachlens.grading",
        "reachlens.grading.extract",
        "reachlens.grading.numeric",
        "reachlens.grading.choice",
        "reachlens.grading.math_equiv",
        "reachlens.grading._math_verify_core",
    ],
)
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0
    assert result.failed == 0
