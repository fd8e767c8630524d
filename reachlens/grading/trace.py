"""Trace graders: is a completion's final answer right *and* is its worked solution valid?

A grader kind beside the answer graders (:data:`TRACE_GRADERS`, read with :func:`get_trace_grader`). An answer grader
says whether the final number equals the gold; a trace grader reads the steps written before it
(:mod:`reachlens.grading.trace_steps`: equations, recomputed exactly over fractions, never by ``eval``) and returns a
:class:`TraceGrade`: the answer's grade, whether the solution is valid, and the first invalid step when it is not.
A question is *solved* by a completion when both hold.

* ``arith_trace`` (``arith``, ``arith_hard``, ``arith_mc``'s generation side, ``arith_small``): exact. The
  question's expression (``fields["expr"]``, such as ``94+2-39-48``) fixes the one chain of steps that solves it,
  left to right as :func:`reachlens.tasks.arith.format_solution` writes it (``94+2=96;96-39=57;57-48=9``). The
  equations written before the final ``####`` (the whole text when there is none: an instruct model's "12 - 5 = 7.
  The answer is 7.") must be exactly that chain, one step per operation, in order, each with the right result (a
  step written twice in a row counts once); the final answer must be the chain's last value. Any notation of the
  zoo's formats reads: ``;`` between steps or none, spaces around every symbol (the ``verbose`` format), negative
  running values (``5-9=-4;-4+3=-1``), ``×`` and ``−``. Compensating slips, a skipped or repeated operand, a step of
  two operations, a right answer with no steps: all invalid.
* ``gsm8k_trace`` (GSM8K): the calculator annotations ``<<48/2=24>>`` and the equations a model writes
  (``5 * 3 = 15``, parentheses and several operations allowed) are recomputed where present; a result written with
  d decimals is right when it is the value rounded to d decimals. An equality said in words ("48 / 2 is 24",
  "equals") is not read, unlike ``arith_trace``: GSM8K's prose says proportions and half-worded products that way
  ("2/5 is equal to 12.8 hectares"; the only two such gold solutions of 1,319 would read as invalid). *Checkable*
  means at least one equation was read; valid means checkable and every equation right. A completion with no
  checkable step is never valid, and the share of checkable completions is reported beside every verified figure.

Untrusted text: never executed; bounded work (:mod:`reachlens.grading.trace_steps`); an exception inside a trace
grader makes the completion not checkable and invalid (reason ``"grader error"``), never valid.

>>> g = get_trace_grader("arith_trace").grade(" 94+2=96;96-39=57;57-48=9 #### 9", "9", expr="94+2-39-48")
>>> g.correct, g.valid, g.solved
(True, True, True)
>>> g = get_trace_grader("arith_trace").grade(" 89-91=-2;-2-64=-66;-66+87=20;20+21=42 #### 42", "42",
...                                           expr="89-91-64+87+21")
>>> g.correct, g.valid, g.first_invalid, g.reason
(True, False, 2, 'step 3: -66+87 is 21, written 20')
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from fractions import Fraction

from reachlens._registry import Registry
from reachlens.grading.extract import number_key
from reachlens.grading.numeric import NumericGrader
from reachlens.grading.trace_steps import Equation, TooLong, equations

__all__ = ["TRACE_GRADERS", "TRACE_GRADER_OF_TASK", "ArithTraceGrader", "Gsm8kTraceGrader", "TraceGrade",
           "TraceGrader", "arith_chain", "get_trace_grader", "trace_grader_for_task"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TraceGrade:
    """The verdict of a trace grader on one completion."""

    correct: bool
    """The final answer equals the gold (the numeric grader's verdict)."""
    scored: bool
    """The answer grader could decide (False: unscored, as in every table)."""
    checkable: bool
    """At least one step could be read and recomputed."""
    valid: bool
    """The worked solution is valid (always False when not checkable)."""
    n_steps: int
    """Equations read."""
    first_invalid: int
    """Index of the first invalid step (0-based), -1 when valid or when no step is at fault."""
    reason: str
    """Why the solution is invalid ("" when valid)."""

    @property
    def solved(self) -> bool:
        """A right answer on a valid solution."""
        return self.correct and self.scored and self.valid


class TraceGrader:
    """A trace grader: ``grade(text, gold, expr=...)`` returns a :class:`TraceGrade`."""

    name: str = ""

    def grade(self, text: str, gold: str, expr: str | None = None) -> TraceGrade:
        answer = NumericGrader().grade(text, gold)
        try:
            checkable, valid, n, first, reason = self._verify(text, expr, answer.answer)
        except TooLong as error:
            checkable, valid, n, first, reason = False, False, 0, -1, str(error)
        except Exception as error:  # model text is untrusted: a bug here never makes a solution valid
            logger.warning("the %s trace grader failed (%s: %s); marked invalid", self.name, type(error).__name__,
                           str(error)[:200])
            checkable, valid, n, first, reason = False, False, 0, -1, "grader error"
        return TraceGrade(bool(answer.correct and answer.scored), bool(answer.scored), checkable,
                          bool(valid and checkable), n, first, reason)

    def _verify(self, text: str, expr: str | None, answer: str | None) -> tuple[bool, bool, int, int, str]:
        raise NotImplementedError


_VERBAL_EQ_RE = re.compile(r"([0-9]\s*[-+*/\u2212\u00d7]\s*[0-9]+)\s+(?:equals|is equal to|is)\s+(?=[-\u2212]?[0-9])")
"""An operation of two numbers said equal to a number in words (``14 - 2 equals 12``, ``14 - 2 is 12``): read as
``=`` by ``arith_trace`` (an instruct model's sentence); a number alone (``the answer is 12``) is no equation."""

_EXPR_RE = re.compile(r"\s*([0-9]{1,12})((?:\s*[-+*]\s*[0-9]{1,12}){1,64})\s*")
_STEP_RE = re.compile(r"\s*([-+*])\s*([0-9]{1,12})")


def arith_chain(expr: str) -> list[tuple[Fraction, str, Fraction, Fraction]]:
    """The steps ``(a, op, b, c)`` that solve an arith expression left to right.

    >>> [(int(a), op, int(b), int(c)) for a, op, b, c in arith_chain("5-9+3")]
    [(5, '-', 9, -4), (-4, '+', 3, -1)]
    """
    m = _EXPR_RE.fullmatch(expr)
    if m is None:
        raise ValueError(f"{expr!r} is not an arith expression (operands and +, -, * alternating)")
    value, steps = Fraction(int(m.group(1))), []
    for op, b in _STEP_RE.findall(m.group(2)):
        b = Fraction(int(b))
        c = value + b if op == "+" else value - b if op == "-" else value * b
        steps.append((value, op, b, c))
        value = c
    return steps


def _side(e: Equation) -> str:
    """An equation's left side for a message, cut to 40 characters."""
    return e.lhs if len(e.lhs) <= 40 else e.lhs[:37] + "..."


def _fmt(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else str(x)


def _as_steps(eqs: list[Equation]) -> list[Equation]:
    """The equations with a step written twice in a row counted once."""
    out: list[Equation] = []
    for e in eqs:
        if not out or (e.lhs, e.rhs) != (out[-1].lhs, out[-1].rhs):
            out.append(e)
    return out


@dataclass(frozen=True)
class ArithTraceGrader(TraceGrader):
    """Exact trace grading of the arith tasks (see the module docstring); needs the question's ``expr``."""

    name: str = field(default="arith_trace", init=False)

    def _verify(self, text, expr, answer):
        if expr is None:
            raise ValueError("arith_trace needs the question's expression (fields['expr'])")
        chain = arith_chain(expr)
        body = _VERBAL_EQ_RE.sub(r"\1 = ", text.split("####", 1)[0])
        eqs = equations(body)
        stray = sorted(set(m.start() for m in re.finditer("=", body)) - {e.at for e in eqs})
        steps = _as_steps([e for e in eqs if not stray or e.at < stray[0]])
        if stray:
            return bool(steps), False, len(steps), len(steps), f"step {len(steps) + 1} cannot be read"
        if not steps:
            return False, False, 0, -1, "no step written"
        for i, e in enumerate(steps):
            if e.value is None or e.rhs is None:
                return True, False, len(steps), i, f"step {i + 1}: {_side(e)} cannot be read"
            if i >= len(chain):
                return (True, False, len(steps), i,
                        f"step {i + 1}: {_side(e)}: more steps than the {len(chain)} operations")
            a, op, b, c = chain[i]
            if len(e.terms) != 3 or e.terms[1] != op or e.terms[2] != b:
                return True, False, len(steps), i, f"step {i + 1}: {_side(e)} is not the next operation ({op}{_fmt(b)})"
            if e.terms[0] != a:
                return True, False, len(steps), i, f"step {i + 1}: {_side(e)} does not start from {_fmt(a)}"
            if e.rhs != e.value:
                return True, False, len(steps), i, f"step {i + 1}: {_side(e)} is {_fmt(e.value)}, written {_fmt(e.rhs)}"
        if len(steps) < len(chain):
            return True, False, len(steps), -1, f"{len(steps)} of the {len(chain)} steps written"
        if answer is None or number_key(answer) != chain[-1][3]:
            return True, False, len(steps), -1, "the final answer is not the last step's value"
        return True, True, len(steps), -1, ""


def _rounds_to(value: Fraction, written: Fraction, text_decimals: int) -> bool:
    if value == written:
        return True
    if text_decimals == 0:
        return False
    scale = 10 ** text_decimals
    return abs(value - written) * scale * 2 <= 1  # the value rounded to the written decimals


def _decimals(e: Equation, text: str) -> int:
    """Decimals of the number written after ``=`` (0 for an integer)."""
    rest = text[e.start:].split("=", 1)[1].lstrip(" -+\u2212")
    m = re.match(r"[0-9,]*(?:\.([0-9]+))?", rest)
    return len(m.group(1)) if m and m.group(1) else 0


@dataclass(frozen=True)
class Gsm8kTraceGrader(TraceGrader):
    """GSM8K: every annotation and written equation recomputed where present (see the module docstring)."""

    name: str = field(default="gsm8k_trace", init=False)

    def _verify(self, text, expr, answer):
        eqs = equations(text)
        if not any(e.is_operation for e in eqs):  # "5 = 5" restates, it computes nothing: no checkable step
            return False, False, len(eqs), -1, "no checkable step"
        for i, e in enumerate(eqs):
            if e.value is None or e.rhs is None:
                return True, False, len(eqs), i, f"step {i + 1}: {_side(e)} cannot be read"
            if not _rounds_to(e.value, e.rhs, _decimals(e, text)):
                return (True, False, len(eqs), i,
                        f"step {i + 1}: {_side(e)} is {float(e.value):g}, written {_fmt(e.rhs)}")
        return True, True, len(eqs), -1, ""


TRACE_GRADERS: Registry[TraceGrader] = Registry("trace grader")
TRACE_GRADERS.register("arith_trace", ArithTraceGrader())
TRACE_GRADERS.register("gsm8k_trace", Gsm8kTraceGrader())

TRACE_GRADER_OF_TASK = {"arith": "arith_trace", "arith_hard": "arith_trace", "arith_mc": "arith_trace",
                        "arith_small": "arith_trace", "arith_null": "arith_trace", "gsm8k": "gsm8k_trace"}
"""The trace grader of each task that has one (a task not named here has no checkable trace: its reach figures
stand beside the lucky-guess null alone)."""


def get_trace_grader(name: str) -> TraceGrader:
    """The registered trace grader called ``name`` (``arith_trace``, ``gsm8k_trace``)."""
    return TRACE_GRADERS[name]


def trace_grader_for_task(task: str) -> str | None:
    """The name of ``task``'s trace grader, or None when it has none.

    >>> trace_grader_for_task("arith_hard"), trace_grader_for_task("piqa")
    ('arith_trace', None)
    """
    return TRACE_GRADER_OF_TASK.get(task)


