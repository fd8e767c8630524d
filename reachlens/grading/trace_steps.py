"""The steps of a worked solution, read from model text without evaluating it: equations and their exact values.

A trace grader (:mod:`reachlens.grading.trace`) asks two things of a completion: which equations it writes
(``94+2=96``, ``12 - 5 = 7``, GSM8K's calculator annotations ``<<48/2=24>>``) and whether each one is right. This
module answers both with a tokenizer and a small arithmetic reader over ``fractions.Fraction``: numbers, ``+ - * /``
(also ``×``, ``·``, ``÷`` and the minus sign ``−``), parentheses and a leading sign; nothing else is ever computed.

Bounded work on untrusted text. A completion longer than :data:`MAX_TRACE_CHARS` characters, or with more than
:data:`MAX_EQUATIONS` equal signs, is not read at all (:class:`TooLong`); the tokenizer is one linear pass (one
regular expression of single-character and digit-run alternatives, nothing that backtracks); a number longer than
:data:`MAX_NUMBER_DIGITS` digits is never converted; an equation's left side is read only up to
:data:`MAX_SIDE_TOKENS` tokens and :data:`MAX_DEPTH` open parentheses, with no recursion. A side that breaks a bound
is *unreadable* (``Equation.value`` None), which a trace grader counts as an invalid step, never as a valid one.

>>> [(e.lhs, e.value == e.rhs) for e in equations("94+2=96;96-39=58")]
[('94+2', True), ('96-39', False)]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["MAX_DEPTH", "MAX_EQUATIONS", "MAX_NUMBER_DIGITS", "MAX_SIDE_TOKENS", "MAX_TRACE_CHARS", "Equation",
           "TooLong", "equations", "evaluate", "tokenize"]

MAX_TRACE_CHARS = 20_000
"""Characters past which a completion's steps are not read (a worked solution is far shorter)."""
MAX_EQUATIONS = 1_000
"""Equal signs past which a completion's steps are not read."""
MAX_NUMBER_DIGITS = 40
"""Digits past which a number is not converted (its equation is unreadable)."""
MAX_SIDE_TOKENS = 64
"""Tokens of an equation's left side past which it is unreadable."""
MAX_DEPTH = 16
"""Open parentheses past which an equation is unreadable."""

_OPS = {"+": "+", "-": "-", "\u2212": "-", "*": "*", "\u00d7": "*", "\u00b7": "*", "/": "/", "\u00f7": "/"}
_TOKEN_RE = re.compile(r"[0-9]+(?:,[0-9]{3})*(?:\.[0-9]+)?|\.[0-9]+|[-+*/=()\u2212\u00d7\u00b7\u00f7]|\s+|.", re.DOTALL)
_DIGITS = frozenset("0123456789")
_EXPR_KINDS = {"num", "op", "(", ")", "sp"}


class TooLong(Exception):
    """The completion is past :data:`MAX_TRACE_CHARS` characters or :data:`MAX_EQUATIONS` equal signs."""


@dataclass(frozen=True)
class Token:
    kind: str  # "num", "op", "(", ")", "=", "sp" (whitespace), "other"
    text: str
    start: int


@dataclass(frozen=True)
class Equation:
    """One equation of a completion: ``lhs = rhs`` as written, and the exact value of its left side."""

    lhs: str
    """The left side's text, whitespace removed (``"-4+3"``)."""
    rhs: Fraction | None
    """The right side's number (None: unreadable, e.g. too many digits)."""
    value: Fraction | None
    """The left side's exact value (None: unreadable, or a division by zero)."""
    terms: tuple[Fraction | str, ...]
    """The left side's tokens: numbers (a leading sign folded into the first) and operators."""
    start: int
    """Where the left side starts in the text."""
    at: int
    """Where its ``=`` is in the text."""

    @property
    def is_operation(self) -> bool:
        """Whether its left side has an operator (``5 = 5`` restates a value; it computes nothing)."""
        return any(isinstance(t, str) and t not in "()" for t in self.terms)

    @property
    def holds(self) -> bool:
        """Whether both sides were read and are equal."""
        return self.value is not None and self.rhs is not None and self.value == self.rhs


def tokenize(text: str) -> list[Token]:
    """``text`` as tokens, in one linear pass.

    >>> [t.text for t in tokenize("5-9=-4")]
    ['5', '-', '9', '=', '-', '4']
    """
    out = []
    for m in _TOKEN_RE.finditer(text):
        s = m.group()
        c = s[0]
        kind = ("num" if c in _DIGITS or (c == "." and len(s) > 1) else "op" if c in _OPS else c if c in "()="
                else "sp" if c.isspace() else "other")
        out.append(Token(kind, _OPS.get(s, s), m.start()))
    return out


def _number(text: str) -> Fraction | None:
    digits = text.replace(",", "")
    if len(digits) > MAX_NUMBER_DIGITS + 1:
        return None
    return Fraction(digits)


def _terms(tokens: Sequence[Token]) -> list[Fraction | str] | None:
    """Numbers and operators of a side; a sign before a number (at the start, after an operator or a parenthesis)
    folds into it; None when a number is unreadable, a bound is broken or the side does not alternate."""
    toks = [t for t in tokens if t.kind != "sp"]
    if not toks or len(toks) > MAX_SIDE_TOKENS:
        return None
    out: list[Fraction | str] = []
    sign = 1
    for i, t in enumerate(toks):
        prev = out[-1] if out else "("
        if t.kind == "op" and t.text in "+-" and isinstance(prev, str) and prev != ")" and i + 1 < len(toks) \
                and toks[i + 1].kind == "num":
            sign = -sign if t.text == "-" else sign
            continue
        if t.kind == "num":
            value = _number(t.text)
            if value is None or not isinstance(prev, str) or prev == ")":
                return None
            out.append(sign * value)
            sign = 1
        else:
            out.append(t.text)
    return out


_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


def _apply(values: list[Fraction], op: str) -> bool:
    if len(values) < 2:
        return False
    b, a = values.pop(), values.pop()
    if op == "/" and b == 0:
        return False
    values.append(a + b if op == "+" else a - b if op == "-" else a * b if op == "*" else a / b)
    return True


def evaluate(terms: Sequence[Fraction | str]) -> Fraction | None:
    """The exact value of a side's terms (numbers, ``+ - * /``, parentheses; usual precedence, left to right),
    without recursion; None when the terms are not one well-formed expression, nest past :data:`MAX_DEPTH`,
    or divide by zero.

    >>> evaluate([Fraction(2), "*", "(", Fraction(3), "+", Fraction(4), ")"])
    Fraction(14, 1)
    """
    values: list[Fraction] = []
    ops: list[str] = []
    expect_value = True
    for t in terms:
        if isinstance(t, Fraction):
            if not expect_value:
                return None
            values.append(t)
            expect_value = False
        elif t == "(":
            if not expect_value or ops.count("(") >= MAX_DEPTH:
                return None
            ops.append(t)
        elif t == ")":
            if expect_value:
                return None
            while ops and ops[-1] != "(":
                if not _apply(values, ops.pop()):
                    return None
            if not ops:
                return None
            ops.pop()
        else:
            if expect_value:
                return None
            while ops and ops[-1] != "(" and _PRECEDENCE[ops[-1]] >= _PRECEDENCE[t]:
                if not _apply(values, ops.pop()):
                    return None
            ops.append(t)
            expect_value = True
    while ops:
        op = ops.pop()
        if op == "(" or not _apply(values, op):
            return None
    return values[0] if len(values) == 1 and not expect_value else None


def _rhs(tokens: Sequence[Token], i: int) -> tuple[Fraction | None, int, int]:
    """The number right after the ``=`` at ``i`` (a sign allowed): ``(value, first token, end)``; end 0: none."""
    j = i + 1
    while j < len(tokens) and tokens[j].kind == "sp":
        j += 1
    first, sign = j, 1
    if j < len(tokens) and tokens[j].kind == "op" and tokens[j].text in "+-":
        sign, j = (-1 if tokens[j].text == "-" else 1), j + 1
    if j >= len(tokens) or tokens[j].kind != "num":
        return None, first, 0
    value = _number(tokens[j].text)
    if j + 2 < len(tokens) and tokens[j + 1].text == "/" and tokens[j + 2].kind == "num":  # a fraction, "3/4"
        den = _number(tokens[j + 2].text)
        value = None if value is None or not den else value / den
        j += 2
    return (None if value is None else sign * value), first, j + 1


def _lhs_start(tokens: Sequence[Token], i: int, floor: int) -> int:
    """The first token of the run of expression tokens (numbers, operators, parentheses, spaces) ending before
    ``i``, not before ``floor`` (just after the previous ``=``: ``a = b = c`` reads ``b = c`` as its own equation),
    and not across two operands with no operator between them (``96 96-39``: the left side is ``96-39``)."""
    j, right = i, None  # right: the nearest non-space token to the right of j
    while j > floor and tokens[j - 1].kind in _EXPR_KINDS:
        t = tokens[j - 1]
        if t.kind != "sp":
            if t.kind in ("num", ")") and right is not None and right.kind in ("num", "("):
                break
            right = t
        j -= 1
    while j < i and tokens[j].kind == "sp":
        j += 1
    return j


def equations(text: str) -> list[Equation]:
    """Every ``lhs = number`` of ``text`` whose left side is a run of numbers, operators and parentheses, with
    both sides' exact values; an ``=`` with no number after it, or nothing but words before it, is no equation.

    Raises:
        TooLong: ``text`` is past :data:`MAX_TRACE_CHARS` characters or :data:`MAX_EQUATIONS` equal signs.

    >>> [(e.lhs, e.rhs) for e in equations("So 12 - 5 = 7. Total = 7")]
    [('12-5', Fraction(7, 1))]
    """
    if len(text) > MAX_TRACE_CHARS or text.count("=") > MAX_EQUATIONS:
        raise TooLong(f"longer than {MAX_TRACE_CHARS} characters or {MAX_EQUATIONS} equal signs")
    tokens = tokenize(text)
    out, floor = [], 0
    for i, t in enumerate(tokens):
        if t.kind != "=":
            continue
        start = _lhs_start(tokens, i, floor)
        floor = i + 1
        rhs, _, end = _rhs(tokens, i)
        side = tokens[start:i]
        if not end or not any(s.kind == "num" for s in side):
            continue
        terms = _terms(side)
        value = evaluate(terms) if terms is not None else None
        out.append(Equation("".join(s.text for s in side if s.kind != "sp"), rhs, value,
                            tuple(terms or ()), tokens[start].start, t.start))
    return out
