"""Hostile model text never raises out of a grader and never takes long (issue 13, items 1, 2, 8).

A grader reads untrusted text: a repeating decimal run to the token limit, a megabyte of nested
braces, NUL bytes, lone surrogates. Any exception inside extraction or comparison makes that one
sample unscored; extraction reads a bounded tail in linear time. The fuzz test feeds every grader
random and adversarial text through hypothesis and times each call.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reachlens.grading import (
    AnswerCut,
    ChoiceGrader,
    Grade,
    MathGrader,
    NumericGrader,
    extract_boxed,
    extract_choice,
    extract_math_answer,
    extract_numeric_answer,
    get_grader,
)

REPO = Path(__file__).resolve().parents[2]


def timed(fn, *args):
    start = time.monotonic()
    out = fn(*args)
    return out, time.monotonic() - start


# --- item 1: a long number ---------------------------------------------------------------------

def test_a_repeating_decimal_past_the_int_limit_is_graded_not_raised() -> None:
    text = "So 1/3 = 0." + "3" * 4400
    grade = NumericGrader().grade(text, "5")
    assert grade.scored and not grade.correct and grade.answer.startswith("0.333")
    # the math grader: its extraction normalizes plain numbers, which used to convert to int
    grade = MathGrader(timeout_s=2).grade("The answer is 0." + "3" * 4400, "5")
    assert isinstance(grade, Grade) and not grade.correct


def test_digit_runs_past_the_limit_compare_as_digit_strings() -> None:
    grader = NumericGrader()
    assert grader.grade("#### 5." + "0" * 5000, "5").correct  # trailing zeros are no digits
    assert grader.grade("#### 000" + "0" * 5000 + "7", "7").correct  # nor are leading ones
    big = "12345" * 1000
    assert grader.grade(f"#### {big}", big).correct
    assert not grader.grade(f"#### {big}1", big).correct
    assert not grader.grade("#### 0." + "3" * 5000, "1/3").correct  # exact, as for short numbers
    # a fraction too long to divide is not a number: the line has none, so the last number wins
    assert grader.grade("#### " + "1" * 5000 + "/3\nso 4", "4").correct


# --- item 2: extraction is linear and bounded --------------------------------------------------

HOSTILE = {
    "nested boxes (140 KB)": "\\boxed{" * 20000,
    "comma groups, last one long (32 KB)": "1," + "000," * 8000 + "0000",
    "comma groups (32 KB)": "1" + ",000" * 8000,
    "hash markers on one line": "#### " * 20000,
    "answer phrases on one line": "the answer is " * 10000,
    "answer phrase then spaces": "the answer is" + " " * 200_000 + "x",
    "hash then spaces": "####" + " " * 200_000 + "(",
    "dollars": "The answer is $" + "$" * 100_000 + "a" + "$" * 100_000 + "b",
    "braces": "\\boxed{" + "{" * 100_000 + "}" * 99_999,
    "a megabyte of digits": "9" * 1_000_000,
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_extraction_is_fast_on_hostile_text(name: str) -> None:
    text = HOSTILE[name]
    for extract in (extract_numeric_answer, extract_choice, extract_boxed, extract_math_answer):
        _, elapsed = timed(answer_or_cut, extract, text)
        assert elapsed < 0.5, f"{extract.__name__} took {elapsed:.2f} s on {name}"


def answer_or_cut(extract, text: str) -> str | None | AnswerCut:
    """What ``extract`` finds, or the :class:`AnswerCut` it raises (a final answer across the bound)."""
    try:
        return extract(text)
    except AnswerCut as cut:
        return cut


def test_the_boxed_answer_in_a_long_text_is_still_found() -> None:
    text = "x " * 500_000 + r"so $\boxed{\frac{1}{2}}$ and \boxed{" + "{" * 10 + " unclosed"
    assert extract_boxed(text) == r"\frac{1}{2}"
    assert MathGrader(timeout_s=2).grade(text, "0.5") == Grade(r"\frac{1}{2}", True, True)


def test_math_extraction_runs_under_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    import reachlens.grading.math_equiv as math_equiv

    def slow(text: str) -> str:
        while True:
            time.sleep(0.01)

    monkeypatch.setattr(math_equiv, "extract_math_answer", slow)
    grade, elapsed = timed(MathGrader(timeout_s=0.3).grade, r"\boxed{1}", "1")
    assert grade == Grade(None, correct=False, scored=False)
    assert elapsed < 2


# --- any exception inside a grader: that sample is unscored and counted -------------------------

@pytest.mark.parametrize("name", ["numeric", "choice", "math"])
def test_an_exception_in_extraction_makes_the_sample_unscored_and_counted(name, monkeypatch) -> None:
    from reachlens.grading.base import GRADING_ERRORS

    grader = get_grader(name)
    gold = {"numeric": "1", "choice": "A", "math": "1"}[name]
    before = GRADING_ERRORS[name]
    module = sys.modules[type(grader).__module__]
    target = {"numeric": "extract_numeric_answer", "choice": "extract_choice", "math": "extract_math_answer"}[name]

    def crash(*args, **kwargs):
        raise RuntimeError("a bug in extraction")

    monkeypatch.setattr(module, target, crash)
    assert grader.grade("#### 1", gold) == Grade(None, correct=False, scored=False)
    assert GRADING_ERRORS[name] == before + 1


# --- item 8: the math-verify worker -----------------------------------------------------------

def test_a_crash_inside_math_verify_comparison_is_unscored_not_wrong(monkeypatch) -> None:
    import math_verify.grader

    def crash(*args, **kwargs):
        raise RuntimeError("sympy blew up")

    monkeypatch.setattr(math_verify.grader, "sympy_expr_eq", crash)
    assert MathGrader().grade(r"\boxed{x+1}", "x+1") == Grade("x+1", correct=False, scored=False)


def _worker_pid() -> int:
    import reachlens.grading.math_equiv as math_equiv

    process = math_equiv._WORKER._process
    assert process is not None and process.poll() is None
    return process.pid


def test_the_worker_runs_under_an_address_space_limit() -> None:
    import reachlens.grading.math_equiv as math_equiv

    assert MathGrader(isolation="process").grade(r"\boxed{2}", "2").correct
    limits = Path(f"/proc/{_worker_pid()}/limits").read_text()
    line = next(ln for ln in limits.splitlines() if ln.startswith("Max address space"))
    assert line.split()[3] == str(math_equiv._WORKER_MEMORY_LIMIT), line
    # a power too large for the cap is unscored, and the worker serves the next request
    assert not MathGrader(timeout_s=10, isolation="process").grade(r"\boxed{2^{2^{40}}}", "1").scored
    assert MathGrader(isolation="process").grade(r"\boxed{3}", "3").correct


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to find the worker")
def test_the_worker_dies_with_its_parent_after_kill_9(tmp_path: Path) -> None:
    # The parent starts the worker on a comparison that runs for minutes, reports the worker's pid,
    # and is killed with SIGKILL mid-comparison: the worker must not outlive it.
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(
        """
        import sys, threading, time
        import reachlens.grading.math_equiv as m
        from reachlens.grading import MathGrader
        assert MathGrader(isolation="process").grade(r"\\boxed{1}", "1").correct
        print(m._WORKER._process.pid, flush=True)
        threading.Thread(target=lambda: MathGrader(timeout_s=600, isolation="process").grade(
            r"\\boxed{9^{9^{9^{9}}}}", "1")).start()
        time.sleep(600)
        """
    ))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        worker = int(parent.stdout.readline())
        time.sleep(1.0)  # the worker is now busy in sympy, not reading stdin
        assert _alive(worker)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker), f"worker {worker} outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has exited (it waits only for init to reap it)


# --- the fuzz test ----------------------------------------------------------------------------

FRAGMENTS = [
    "\\boxed{", "}", "{", "\\{", "####", "#### ", "The answer is ", "answer:", "Answer: (", ")", "$", "$$",
    "1,000", ",000", "0.", "3", "9" * 50, "-", "\u2212", "/", "/0", "%", ".", "\n", " ", "\t",
    "\u0663", "\u0968", "\uff11", "\U0001d7d9", "\x00", "\ud800", "\udfff", "\\frac{", "\\sqrt{", "^{",
    "A", "(B)", "c", "I", "\\text{", "\\left(", "\\right)", "e", "\\pi", "\u00b2",
]

pieces = st.one_of(
    st.sampled_from(FRAGMENTS),
    st.text(st.characters(codec=None, exclude_categories=()), max_size=20),  # surrogates and NUL too
    st.integers(min_value=-10**30, max_value=10**30).map(str),
)
texts = st.one_of(
    st.lists(pieces, max_size=40).map("".join),
    # megabyte strings: one fragment repeated, with a random head and tail
    st.tuples(st.lists(pieces, max_size=5).map("".join), st.sampled_from(FRAGMENTS + ["9", "{", " "]),
              st.integers(min_value=1000, max_value=1_000_000), st.lists(pieces, max_size=5).map("".join))
    .map(lambda t: t[0] + t[1] * (t[2] // max(1, len(t[1]))) + t[3]),
    st.integers(min_value=4300, max_value=20000).map(lambda n: "#### 0." + "3" * n),
    st.integers(min_value=1, max_value=3000).map(lambda n: "\\boxed{" * n + "1" + "}" * (n // 2)),
)

GRADERS = {
    "numeric": (NumericGrader(), "42"),
    "choice": (ChoiceGrader(), "B"),
    "choice-digits": (ChoiceGrader(labels=tuple("12345")), "3"),
    # a math deadline well under the second, so a loaded CI machine still leaves headroom
    "math": (MathGrader(timeout_s=0.25), r"\frac{1}{2}"),
    "math-process": (MathGrader(timeout_s=0.25, isolation="process"), "42"),
}


@pytest.fixture(scope="module", autouse=True)
def _warm_math_verify():
    """Import sympy here and start the worker, outside the timed calls (about a second each, once)."""
    MathGrader().grade(r"\boxed{1}", "1")
    MathGrader(isolation="process").grade(r"\boxed{1}", "1")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=texts)
def test_fuzz_every_grader_returns_a_grade_within_a_second(text: str) -> None:
    for name, (grader, gold) in GRADERS.items():
        grade, elapsed = timed(grader.grade, text, gold)
        assert isinstance(grade, Grade), name
        assert not (grade.correct and not grade.scored), name
        assert elapsed < 1.0, f"{name} took {elapsed:.2f} s on a text of {len(text)} characters"
