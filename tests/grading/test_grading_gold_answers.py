"""Every gold answer of GSM8K (test) and MATH-500 must grade correct against itself, and a
perturbed answer must grade wrong: on the format fixtures in ``tests/data`` (always) and on the full real
files under ``../shared/data`` (skipped with a reason where they are absent)."""

from __future__ import annotations

from fractions import Fraction

import json

import pytest
from conftest import FIXTURE_DATA
from grading_shared_data import read_jsonl

from reachlens.grading import MathGrader, NumericGrader, extract_boxed, parse_number

GSM8K_TEST_SIZE = 1319
MATH500_SIZE = 500


@pytest.fixture(scope="module")
def gsm8k() -> list[dict]:
    rows = read_jsonl("gsm8k/test.jsonl")
    assert len(rows) == GSM8K_TEST_SIZE
    return rows


@pytest.fixture(scope="module")
def math500() -> list[dict]:
    rows = read_jsonl("math500/test.jsonl")
    assert len(rows) == MATH500_SIZE
    return rows


def _gsm8k_gold(solution: str) -> str:
    last_line = solution.rstrip().splitlines()[-1]
    assert last_line.startswith("#### "), f"GSM8K solution does not end in '#### N': {last_line!r}"
    return last_line.removeprefix("#### ").strip()


def _format(value: Fraction) -> str:
    """``7`` or ``7/2``: a spelling both graders read."""
    return str(value) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def _fixture(relative: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURE_DATA / relative).read_text().splitlines() if line.strip()]


def test_fixture_golds_grade_right_against_themselves_and_wrong_against_gold_plus_one() -> None:
    numeric, math = NumericGrader(), MathGrader()
    for row in _fixture("gsm8k/test.jsonl"):
        gold = _gsm8k_gold(row["answer"])
        assert numeric.grade(row["answer"], gold).correct, row["answer"]
        assert not numeric.grade(row["answer"], _format(parse_number(gold) + 1)).correct, row["answer"]
    for row in _fixture("math500/test.jsonl"):
        assert math.grade(row["solution"], row["answer"]).correct, row["solution"]
        assert math.grade(f"\\boxed{{{row['answer']}}}", row["answer"]).correct, row["answer"]
    assert not math.grade("\\boxed{\\frac{6}{5}}", "\\frac{5}{6}").correct


def test_gsm8k_gold_solutions_grade_correct_against_their_answer(gsm8k: list[dict]) -> None:
    grader = NumericGrader()
    grades = [grader.grade(row["answer"], _gsm8k_gold(row["answer"])) for row in gsm8k]
    wrong = [(g, row["answer"][-60:]) for g, row in zip(grades, gsm8k) if not g.correct]
    assert not wrong, f"{len(wrong)} gold solutions graded wrong, e.g. {wrong[:3]!r}"
    assert sum(g.correct for g in grades) == GSM8K_TEST_SIZE
    assert all(g.scored for g in grades)
    # Golds with thousands separators (e.g. "1,000") are among them and still read whole.
    assert any("," in _gsm8k_gold(row["answer"]) for row in gsm8k)


def test_gsm8k_gold_solutions_grade_wrong_against_gold_plus_one(gsm8k: list[dict]) -> None:
    grader = NumericGrader()
    right = []
    for row in gsm8k:
        gold = parse_number(_gsm8k_gold(row["answer"]))
        assert gold is not None
        if grader.grade(row["answer"], _format(gold + 1)).correct:
            right.append(row["answer"][-60:])
    assert not right, f"{len(right)} solutions graded correct against gold + 1: {right[:3]!r}"


def test_gsm8k_bare_gold_answers_grade_correct(gsm8k: list[dict]) -> None:
    grader = NumericGrader()
    for row in gsm8k:
        gold = _gsm8k_gold(row["answer"])
        assert grader.grade(f"The answer is {gold}.", gold).correct, gold
        assert grader.grade(f"So she has {gold} left.", gold).correct, gold


def test_math500_every_gold_answer_grades_correct_against_itself(math500: list[dict]) -> None:
    grader = MathGrader()
    grades = [
        grader.grade(f"So the answer is $\\boxed{{{row['answer']}}}$.", row["answer"])
        for row in math500
    ]
    passed = sum(g.correct for g in grades)
    failing = [row["answer"] for g, row in zip(grades, math500) if not g.correct]
    assert passed == MATH500_SIZE, f"golds that fail against themselves: {failing!r}"


def test_math500_gold_solutions_grade_correct_against_their_answer(math500: list[dict]) -> None:
    grader = MathGrader()
    boxed = [row for row in math500 if extract_boxed(row["solution"]) is not None]
    assert len(boxed) == MATH500_SIZE, "SOURCE.md says every MATH-500 solution has a \\boxed{}"
    grades = [grader.grade(row["solution"], row["answer"]) for row in boxed]
    passed = sum(g.correct for g in grades)
    failing = [(g.answer, row["answer"]) for g, row in zip(grades, boxed) if not g.correct]
    print(f"MATH-500 gold solution vs answer: {passed}/{len(boxed)} correct")
    assert passed == len(boxed), f"solutions graded wrong against their answer: {failing!r}"


def test_math500_numeric_golds_grade_wrong_against_gold_plus_one(math500: list[dict]) -> None:
    grader = MathGrader()
    numeric = []
    for row in math500:
        gold = parse_number(row["answer"].replace(",\\!", ",").replace("\\!", ""))
        if gold is not None:
            numeric.append((row["answer"], gold))
    print(f"MATH-500 numeric golds: {len(numeric)}")
    assert len(numeric) > 200  # most MATH-500 answers are plain numbers
    grades = [(ans, grader.grade(f"\\boxed{{{_format(gold + 1)}}}", ans)) for ans, gold in numeric]
    right = [ans for ans, grade in grades if grade.correct]
    assert not right, f"gold + 1 graded correct for {right!r}"
    unscored = [ans for ans, grade in grades if not grade.scored]
    assert not unscored, f"gold + 1 left unscored for {unscored!r}"
