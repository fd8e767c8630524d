"""The three graders on hand-made cases: registry, exact numbers, labels, LaTeX equivalence,
timeouts (main thread, other threads, worker process) and the no-eval guarantee."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from reachlens.errors import ReachlensError
from reachlens.grading import (
    GRADERS,
    ChoiceGrader,
    Grade,
    Grader,
    MathGrader,
    NumericGrader,
    get_grader,
)

# 9^(9^(9^9)): sympy tries to evaluate it while comparing and never finishes.
PATHOLOGICAL = r"\boxed{9^{9^{9^{9}}}}"


def test_importing_the_package_registers_all_three_graders() -> None:
    assert {"numeric", "choice", "math"} <= set(GRADERS.names())
    for name, kind in [("numeric", NumericGrader), ("choice", ChoiceGrader), ("math", MathGrader)]:
        grader = get_grader(name)
        assert isinstance(grader, kind)
        assert isinstance(grader, Grader)
        assert grader.name == name


def test_unknown_grader_names_the_key_and_the_known_ones() -> None:
    with pytest.raises(LookupError, match=r"unknown grader 'nmeric'; known: .*numeric"):
        get_grader("nmeric")


def test_import_is_light() -> None:
    code = (
        "import sys, reachlens.grading as g; "
        "heavy = [m for m in ('math_verify', 'latex2sympy2_extended') if m in sys.modules]; "
        "assert not heavy, heavy; assert 'math' in g.GRADERS"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# --- numeric ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "gold", "answer", "correct"),
    [
        ("She picks 1,319 apples", "1319", "1319", True),
        ("She picks 1,319 apples", "1,319", "1319", True),
        ("The change is -5", "-5", "-5", True),
        ("The change is 5", "-5", "5", False),
        ("Each costs 3.50", "3.5", "3.50", True),
        ("3/4 of the pie", "0.75", "3/4", True),
        ("0.75 of the pie", "3/4", "0.75", True),
        ("It costs $18.", "18", "18", True),
        ("It rose by 50%", "50", "50", True),
        ("It is 18.000001", "18", "18.000001", False),
        ("3 + 4 = 7\n#### 7\nThen 12 more", "7", "7", True),  # `####` beats a later number
        ("The answer is 7. Checked in 3 steps.", "7", "7", True),
        ("She has 3, 4 left", "34", "4", False),  # a list, not 34
    ],
)
def test_numeric_grader(text: str, gold: str, answer: str, correct: bool) -> None:
    assert NumericGrader().grade(text, gold) == Grade(answer=answer, correct=correct, scored=True)


def test_numeric_no_number_is_scored_and_wrong() -> None:
    assert NumericGrader().grade("I cannot solve this.", "18") == Grade(None, False, True)


def test_numeric_bad_gold_names_the_value() -> None:
    with pytest.raises(ReachlensError, match=r"gold answer 'eighteen' is not a number"):
        NumericGrader().grade("18", "eighteen")


# --- choice ----------------------------------------------------------------------------------


def test_choice_grader() -> None:
    grader = ChoiceGrader()
    assert grader.labels == ("A", "B", "C", "D")
    assert grader.grade("The answer is (B).", "B") == Grade("B", True, True)
    assert grader.grade("Answer: C", "B") == Grade("C", False, True)
    assert grader.grade("#### d", "D") == Grade(None, False, True)  # anchored labels as spelled
    assert grader.grade("d", "d") == Grade("D", True, True)
    assert grader.grade("no idea", "A") == Grade(None, False, True)


def test_choice_grader_digit_labels() -> None:
    grader = ChoiceGrader(labels=("1", "2", "3", "4"))
    assert grader.grade("The answer is 3", "3").correct
    assert not grader.grade("The answer is 3", "4").correct


def test_choice_grader_accepts_a_label_string() -> None:
    assert ChoiceGrader(labels="ABCDE") == ChoiceGrader(labels=("A", "B", "C", "D", "E"))


@pytest.mark.parametrize("labels", [(), ("A", "A"), ("A", "K"), ("A", "0"), ("AB",), ("a", "b")])
def test_choice_grader_rejects_bad_labels(labels: tuple[str, ...]) -> None:
    with pytest.raises(ReachlensError, match=r"must be distinct single letters A-J or digits 1-9"):
        ChoiceGrader(labels=labels)


def test_choice_grader_rejects_a_gold_outside_the_labels() -> None:
    with pytest.raises(ReachlensError, match=r"gold label 'E' is not one of the labels"):
        ChoiceGrader().grade("E", "E")


# --- math ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "gold"),
    [
        (r"So $x = \boxed{\dfrac{1}{2}}$.", "0.5"),
        (r"\boxed{0.5}", r"\frac12"),
        (r"\boxed{(3, \frac{\pi}{2})}", r"\left( 3, \frac{\pi}{2} \right)"),
        (r"\boxed{10080}", r"10,\!080"),
        (r"\boxed{90}", r"90^\circ"),
        (r"\boxed{5.4}", r"5.4 \text{ cents}"),
        (r"\boxed{\text{(C)}}", "C"),
        (r"\boxed{7, 5, 3}", "3, 5, 7"),
        (r"\boxed{[-2, 7]}", r"x \in [-2,7]"),
        (r"\boxed{2\sqrt{2}}", r"\sqrt{8}"),
        ("Step...\n#### 1,234", "1234"),
        ("The answer is $18.", "18"),
        ("The answer is 18 dollars.", "18"),
        ("The answer is: $x^2 + 2x + 1$.", "(x+1)^2"),
    ],
)
def test_math_grader_equivalent(text: str, gold: str) -> None:
    grade = MathGrader().grade(text, gold)
    assert grade.correct and grade.scored, grade


@pytest.mark.parametrize(
    ("text", "gold"),
    [
        (r"\boxed{\frac{1}{3}}", "0.33"),
        (r"\boxed{(3, \pi)}", r"\left( 3, \frac{\pi}{2} \right)"),
        (r"\boxed{58501}", "58,500"),
        (r"\boxed{2}", "-2"),
        (r"\boxed{x^2 + 1}", "(x+1)^2"),
    ],
)
def test_math_grader_not_equivalent(text: str, gold: str) -> None:
    assert MathGrader().grade(text, gold) == Grade(MathGrader().extract(text), False, True)


def test_math_no_answer_is_scored_and_wrong() -> None:
    assert MathGrader().grade("I have no idea.", "3") == Grade(None, False, True)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout_s": 0}, "timeout_s 0 must be a positive number"),
        ({"timeout_s": float("inf")}, "timeout_s inf must be a positive number"),
        # Our ReachlensError, or the runtime type checker's TypeError when tests run with it on.
        ({"isolation": "thread"}, "'thread'"),
    ],
)
def test_math_grader_rejects_bad_configuration(kwargs: dict, message: str) -> None:
    with pytest.raises((ReachlensError, TypeError), match=message):
        MathGrader(**kwargs)


@pytest.mark.parametrize("isolation", ["auto", "process"])
def test_math_parser_failure_is_unscored(isolation: str) -> None:
    # An empty gold gives math-verify nothing to parse: undecided, not wrong.
    grader = MathGrader(isolation=isolation)
    assert grader.grade(r"\boxed{1}", "") == Grade("1", correct=False, scored=False)


def test_math_parser_exception_is_unscored(monkeypatch: pytest.MonkeyPatch) -> None:
    import reachlens.grading.math_equiv as math_equiv

    def crash(answer: str, gold: str) -> bool:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(math_equiv, "verify_latex", crash)
    assert MathGrader().grade(r"\boxed{2}", "2") == Grade("2", correct=False, scored=False)


def test_math_timeout_in_the_main_thread_is_bounded_and_unscored() -> None:
    start = time.monotonic()
    grade = MathGrader(timeout_s=1).grade(PATHOLOGICAL, "1")
    elapsed = time.monotonic() - start
    assert grade == Grade(r"9^{9^{9^{9}}}", correct=False, scored=False)
    assert elapsed < 4, f"the 1 s timeout took {elapsed:.1f} s"


def test_math_timeout_restores_the_previous_alarm_handler_and_timer() -> None:
    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    try:
        signal.setitimer(signal.ITIMER_REAL, 2.5)  # somebody else's timer, due after our call
        assert not MathGrader(timeout_s=0.5).grade(PATHOLOGICAL, "1").scored
        assert MathGrader().grade(r"\boxed{2}", "2").correct  # no stray alarm left behind
        assert signal.getsignal(signal.SIGALRM) is not None and not fired
        deadline = time.monotonic() + 5
        while not fired and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fired == [signal.SIGALRM], "the outer timer was lost"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_math_grader_outside_the_main_thread_uses_a_worker_process() -> None:
    grader = MathGrader(timeout_s=1)
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(grader.grade, r"\boxed{\frac{2}{4}}", "0.5").result().correct
        start = time.monotonic()
        stuck = pool.submit(grader.grade, PATHOLOGICAL, "1").result(timeout=60)
        elapsed = time.monotonic() - start
        assert stuck == Grade(r"9^{9^{9^{9}}}", correct=False, scored=False)
        assert elapsed < 6, f"the 1 s timeout took {elapsed:.1f} s in a thread"
        # The overrunning worker was killed; the next call gets a fresh one.
        assert pool.submit(grader.grade, r"\boxed{3}", "3").result() == Grade("3", True, True)
        assert pool.submit(grader.grade, r"\boxed{4}", "3").result() == Grade("4", False, True)


def test_math_grader_process_isolation_in_the_main_thread() -> None:
    grader = MathGrader(timeout_s=1, isolation="process")
    assert threading.current_thread() is threading.main_thread()
    assert grader.grade(r"\boxed{\sqrt{8}}", r"2\sqrt{2}") == Grade(r"\sqrt{8}", True, True)
    assert not grader.grade(PATHOLOGICAL, "1").scored


def test_math_grader_only_lets_number_tokens_reach_sympy_eval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import math_verify
    import sympy.parsing.sympy_parser as sympy_parser

    calls: list[object] = []  # source strings, or code objects compiled from evaluate=False ASTs
    real_eval_expr = sympy_parser.eval_expr

    def spy(code: object, *args: object) -> object:
        calls.append(code)
        return real_eval_expr(code, *args)

    monkeypatch.setattr(sympy_parser, "eval_expr", spy)

    # The control: math-verify's default extraction evals a plain-text expression.
    math_verify.parse("The final answer is 17 + 3/7 - 2")
    assert calls, "expected math-verify's ExprExtractionConfig to go through sympy.parse_expr"

    # Our grader (LaTeX extraction only) reaches eval solely through sympy.Number(<token>) on
    # the grammar's digit tokens, so the code eval'd is `Integer (19 )` or `Float ('0.5' )`.
    calls.clear()
    texts = [
        "The answer is 17 + 3/7 - 2",
        "#### 2*(3+4)^2",
        r"\boxed{\frac{13}{17} + 0.5}",
        r"\boxed{__import__('os').system('echo pwned')}",
        "The answer is ().__class__.__bases__[0].__subclasses__()",
        r"\boxed{\text{exec(open('x').read())}}",
    ]
    for text in texts:
        MathGrader().grade(text, "19")
    number_only = re.compile(r"(?:Integer|Float) \((?:\d+|'[\d.]+') \)")
    assert calls, "expected sympy.Number to parse the number tokens"
    leaks = [code for code in calls if not (isinstance(code, str) and number_only.fullmatch(code))]
    assert not leaks, f"sympy eval was reached with more than a number token: {leaks!r}"


def test_math_grader_does_not_run_python_in_answers(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    text = rf"\boxed{{__import__('pathlib').Path('{marker}').touch()}}"
    MathGrader().grade(text, "1")
    MathGrader(isolation="process").grade(text, "1")
    assert not marker.exists()
