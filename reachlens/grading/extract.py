"""Answer extraction: find the final answer in free model text, without evaluating anything.

Everything here is regular expressions and ``fractions.Fraction``; no model text is ever passed to
``eval``, ``sympify`` or a parser that executes code.

Numeric answers (GSM8K convention), in priority order:

1. ``#### N``: the first number after the last ``####`` marker.
2. ``The answer is N`` / ``the answer is: N`` / ``Answer: N`` (case-insensitive): the first number
   on the same line after the last such phrase that has one.
3. Otherwise the last number anywhere in the text.

A number may carry a sign (``-5``, ``+5``, ``−5``), thousands separators (``1,319``; a comma
followed by a space or by other than exactly three digits is a list, so ``3, 4`` stays two
numbers), a decimal part (``3.50``), a simple fraction (``3/4``, ``1.5/2``), a currency sign
(``$18``) and a percent sign (``50%``). Currency and percent signs are decorations: ``50%`` has
the value 50, since GSM8K gold answers are bare numbers. A zero denominator is not a number.

Caveat: the last-number fallback picks up any trailing number (a step count, a year); it is what
lm-eval's "flexible extract" does, and the ``####`` / "the answer is" rules exist to pre-empt it.

Hostile text. Extraction reads only the last :data:`TAIL_CHARS` characters of a completion (a final
answer sits at its end) and every rule runs in time linear in that tail: no pattern backtracks over a
run of digits, spaces or braces, and ``\\boxed{}`` is matched in one pass over the braces. The tail
starts at a token boundary: when the cut falls inside a run of number or word characters, the rest of
that run is dropped, never read as a number of its own. When the final answer may lie across the cut
(no number after a cut run of digits; no closed box in the tail but a ``\\boxed`` before it),
extraction raises :class:`AnswerCut` and the grader marks the completion unscored: the answer cannot
be read within the bound, so it is neither right nor wrong. A number
with more than :data:`MAX_DIGITS` digits (a repeating decimal run to the token limit) is never
converted to an integer: :func:`parse_number` declares it not a number, and the numeric grader compares
it as a digit string (``0.3333...`` never equals ``1/3``; ``5.000...0`` equals ``5``).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator, Sequence
from fractions import Fraction

from reachlens.errors import ReachlensError

__all__ = [
    "MAX_DIGITS",
    "TAIL_CHARS",
    "extract_boxed",
    "extract_choice",
    "extract_math_answer",
    "extract_numeric_answer",
    "number_key",
    "parse_number",
]

TAIL_CHARS = 8192
"""Characters at the end of a completion that extraction reads (the rest is never scanned)."""
MAX_DIGITS = 640
"""Digits past which a number is not converted to an integer (Python's smallest settable limit on
``int(str)`` is 640; the default 4300). Longer numbers compare as digit strings."""

_CURRENCY = "$\u20ac\u00a3\u00a5\u20b9"
# One number token. Groups: sign, integer part, decimal part, denominator. The comma-grouped form
# never starts right after "digit," and never gives back a group (possessive), so a long run of
# groups is read once, not once per group.
_NUMBER = (
    r"(?<![\w.])"  # not the tail of a word, of another number, or of a decimal
    rf"(?P<sign>[-+\u2212])?[{_CURRENCY}]?(?P<sign2>[-+\u2212])?"
    r"(?P<int>(?<!\d,)\d{1,3}(?:,\d{3})++(?![\d,]\d)|\d+)?"  # 1,319 (never 3,4 or 12,34) or 1319
    r"(?P<dec>\.\d+)?"
    r"(?:/(?P<den>\d+))?"
    r"(?![\d])%?"
)
_NUMBER_RE = re.compile(_NUMBER)
_HASH_RE = re.compile(r"####")
_ANSWER_IS_RE = re.compile(r"\banswer\s*+(?:is\s*+:?|:)", re.IGNORECASE)
_TOKEN_CHARS = rf"[\w.,/%{_CURRENCY}+\-\u2212]"
"""Characters that join into one token: word characters and everything a number is written with."""
_TOKEN_CHAR_RE = re.compile(_TOKEN_CHARS)
_TOKEN_RUN_RE = re.compile(_TOKEN_CHARS + "*+")
_DIGIT_RE = re.compile(r"\d")


class AnswerCut(Exception):
    """The final answer of a completion may lie across the start of the tail extraction reads (a
    number cut in two, a ``\\boxed{}`` opened before the tail): it cannot be read within the bound,
    so the grader marks the completion unscored instead of grading a fragment."""


def _tail_start(text: str) -> tuple[int, int]:
    """``(cut, start)``: extraction reads ``text[start:]``, the last :data:`TAIL_CHARS` characters
    less ``text[cut:start]``, the rest of a token the cut fell inside (empty when the cut falls
    between tokens), so the tail never starts with a fragment of a number."""
    if len(text) <= TAIL_CHARS:
        return 0, 0
    cut = len(text) - TAIL_CHARS
    if not (_TOKEN_CHAR_RE.match(text, cut - 1) and _TOKEN_CHAR_RE.match(text, cut)):
        return cut, cut
    return cut, _TOKEN_RUN_RE.match(text, cut).end()


def _tail(text: str) -> str:
    """What extraction reads of ``text`` (see :func:`_tail_start`)."""
    return text[_tail_start(text)[1] :]


def _box_before(text: str, start: int) -> bool:
    """Whether a box opens in ``text[:start]``, before the tail (a plain search, linear and in C)."""
    return text.rfind("\\boxed", 0, start) >= 0 or text.rfind("\\fbox", 0, start) >= 0


def _canonical(integer: str, dec: str) -> tuple[str, str]:
    """Digits of an integer and a decimal part without leading (integer) or trailing (decimal) zeros."""
    return integer.lstrip("0"), dec.rstrip("0")


def _token_value(match: re.Match[str]) -> tuple[str, Fraction | str] | None:
    """The display string and value of one ``_NUMBER_RE`` match, or None if it is no number.

    The value is an exact ``Fraction``, or, for a decimal with more than :data:`MAX_DIGITS`
    significant digits, its canonical digit string (``"-123.45"``); a fraction with such a part is
    not a number."""
    integer, dec, den = match["int"], match["dec"], match["den"]
    if integer is None and dec is None:
        return None
    negative = any(c in "-\u2212" for c in (match["sign"] or "") + (match["sign2"] or ""))
    digits = (integer or "0").replace(",", "")
    body = digits + (dec or "")
    display = body + (f"/{den}" if den is not None else "")
    if negative:
        display = "-" + display
    whole, frac = _canonical(digits, (dec or ".")[1:])
    if den is not None:
        den = den.lstrip("0")
        if not den:
            return None  # "3/0" is not a number
        if max(len(whole) + len(frac), len(den)) > MAX_DIGITS:
            return None  # too long to divide exactly: not a number
    elif len(whole) + len(frac) > MAX_DIGITS:
        return display, ("-" if negative and (whole or frac) else "") + (whole or "0") + (f".{frac}" if frac else "")
    value = Fraction(int(whole or "0") * 10 ** len(frac) + int(frac or "0"), 10 ** len(frac))
    if den is not None:
        value /= int(den)
    return display, -value if negative else value


def _tokens(text: str) -> Iterator[tuple[str, Fraction | str]]:
    """Every number token in ``text``, left to right, as (display, value)."""
    for match in _NUMBER_RE.finditer(text):
        token = _token_value(match)
        if token is not None:
            yield token


def number_key(text: str) -> Fraction | str | None:
    """What two numbers are compared by: the exact value of ``text`` when it is a single number
    (a ``Fraction``, or a canonical digit string past :data:`MAX_DIGITS` digits), else None.

    >>> number_key("3.50") == number_key("7/2"), number_key("0." + "3" * 1000)[:6]
    (True, '0.3333')
    """
    stripped = text.strip().removesuffix(".").strip()
    match = _NUMBER_RE.fullmatch(stripped)
    if match is None:
        return None
    token = _token_value(match)
    return None if token is None else token[1]


def parse_number(text: str) -> Fraction | None:
    """The exact value of ``text`` when it is a single number, else None.

    Surrounding whitespace and a trailing period are ignored; currency and percent signs,
    thousands separators and signs are understood as described in the module docstring. A number
    with more than :data:`MAX_DIGITS` significant digits is declared not a number (None).

    >>> parse_number("1,234"), parse_number("-3.50"), parse_number("3/4"), parse_number("$18.")
    (Fraction(1234, 1), Fraction(-7, 2), Fraction(3, 4), Fraction(18, 1))
    >>> parse_number("3, 4") is None, parse_number("9" * 5000) is None
    (True, True)
    """
    key = number_key(text)
    return key if isinstance(key, Fraction) else None


def _first_number(text: str) -> str | None:
    return next((display for display, _ in _tokens(text)), None)


def _marker_segments(pattern: re.Pattern[str], text: str) -> Iterator[str]:
    """For each match of ``pattern``, last first: the text after it up to the end of its line or the
    next match on that line, whichever comes first (each character is in one segment at most)."""
    markers = list(pattern.finditer(text))
    newlines = [m.start() for m in re.finditer("\n", text)]
    for i in range(len(markers) - 1, -1, -1):
        start = markers[i].end()
        k = bisect.bisect_left(newlines, start)
        end = newlines[k] if k < len(newlines) else len(text)
        if i + 1 < len(markers):
            end = min(end, markers[i + 1].start())
        yield text[start:end]


def extract_numeric_answer(text: str) -> str | None:
    """The final numeric answer in ``text`` (``####``, then "the answer is", then the last number).

    Returns the number normalized for display (no currency, percent or thousands separators, a
    leading ``-`` for negatives), or None when ``text`` holds no number. Only the last
    :data:`TAIL_CHARS` characters are read.

    >>> extract_numeric_answer("3 + 4 = 7 apples.\\n#### 7")
    '7'
    >>> extract_numeric_answer("So the answer is: $1,319. Checked in 2 steps.")
    '1319'
    >>> extract_numeric_answer("She pays 3/4 of 5 dollars, that is 3.75")
    '3.75'
    >>> extract_numeric_answer("no digits here") is None
    True

    Raises:
        AnswerCut: the tail holds no number but the token cut at its start has digits (the final
            number may be the one cut in two).
    """
    cut, start = _tail_start(text)
    tail = text[start:]
    # The first number after a marker on its line is the first in its segment, or else the first
    # after the next marker on that line, which the loop (last marker first) has already tried.
    for pattern in (_HASH_RE, _ANSWER_IS_RE):
        for segment in _marker_segments(pattern, tail):
            number = _first_number(segment)
            if number is not None:
                return number
    last = None
    for display, _ in _tokens(tail):
        last = display
    if last is None and _DIGIT_RE.search(text, cut, start):
        raise AnswerCut(f"the last number is cut by the {TAIL_CHARS}-character tail")
    return last


def extract_choice(text: str, labels: Sequence[str] = ("A", "B", "C", "D")) -> str | None:
    """The multiple-choice label chosen in ``text``, one of ``labels``, or None.

    Priority: ``#### B``; then "the answer is (B)" / "Answer: C" (last occurrence, either case);
    then a text that is a lone label (``"B"``, ``"(B)"``, ``"B."``); then the last ``(B)``-style
    label; then the last standalone label token (upper case only, so the word "a" is never read as
    a choice; "A"/"I" at a sentence start can still be picked up by this last fallback). Only the
    last :data:`TAIL_CHARS` characters are read.

    >>> extract_choice("Paris is in France, so the answer is (C).")
    'C'
    >>> extract_choice("answer: 2", labels=("1", "2", "3", "4"))
    '2'
    >>> extract_choice("I cannot tell.") is None
    True
    """
    canon = {label.upper(): label for label in labels}
    if not canon:
        raise ReachlensError(f"labels {labels!r} is empty; pass the valid choice labels, e.g. 'ABCD'")
    text = _tail(text)
    spelled = sorted(set(labels) | set(canon), key=len, reverse=True)
    alternatives = "|".join(re.escape(label) for label in spelled)
    # possessive quantifiers: a run of spaces is consumed once, never split between two \s*
    token = rf"\(?\s*+({alternatives})\s*+\)?(?![\w])"
    # Keywords in any case, labels as spelled (or upper case): "the answer is a bit" is no choice.
    anchors = (rf"####\s*+{token}", rf"(?i:\banswer\s*+(?:is\s*+:?|:))\s*+\**+\s*+{token}")
    for anchor in anchors:
        found = re.findall(anchor, text)
        if found:
            return canon[found[-1].upper()]
    lone = re.fullmatch(rf"\s*+{token}\s*+[.)]?\s*+", text, re.IGNORECASE)
    if lone:
        return canon[lone.group(1).upper()]
    for pattern in (rf"\(\s*+({alternatives})\s*+\)", rf"(?<![\w])({alternatives})(?![\w])"):
        found = re.findall(pattern, text)
        if found:
            return canon[found[-1].upper()]
    return None


_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*+\{")
_BRACE_RE = re.compile(r"(?<!\\)[{}]")  # an escaped \{ or \} is text, not a brace


def extract_boxed(text: str) -> str | None:
    r"""The content of the last ``\boxed{...}`` (or ``\fbox{...}``) in ``text``, braces balanced.

    One pass over the braces of the last :data:`TAIL_CHARS` characters pairs every ``{`` with its
    ``}``; the answer is the last box whose brace is closed (an unclosed one, from truncated output,
    is skipped).

    >>> extract_boxed(r"so $x = \boxed{\frac{1}{2}}$.")
    '\\frac{1}{2}'
    >>> extract_boxed("no box") is None
    True

    Raises:
        AnswerCut: no box closes in the tail but one opens before it (the last box is out of reach).
    """
    start = _tail_start(text)[1]
    found = _last_box(text[start:])
    if found is None and _box_before(text, start):
        raise AnswerCut(f"the last box opens before the {TAIL_CHARS}-character tail")
    return found


def _last_box(text: str) -> str | None:
    """The content of the last closed box in ``text`` (a tail already), or None."""
    opens = [m.end() - 1 for m in _BOX_RE.finditer(text)]
    if not opens:
        return None
    closing: dict[int, int] = {}
    stack: list[int] = []
    for brace in _BRACE_RE.finditer(text, opens[0]):
        if brace.group() == "{":
            stack.append(brace.start())
        elif stack:
            closing[stack.pop()] = brace.start()
    for start in reversed(opens):
        if start in closing:
            return text[start + 1 : closing[start]].strip()
    return None  # unbalanced (truncated output)


def _strip_dollars(line: str) -> str:
    """``$x$`` / ``$$x$$`` -> ``x``: a line that starts and ends with ``$`` loses both runs."""
    lead = len(line) - len(line.lstrip("$"))
    trail = len(line) - len(line.rstrip("$"))
    if not lead or not trail or len(line) < 2:
        return line
    if lead == len(line):  # all dollars: "$$$" -> ""
        return ""
    return line[lead : len(line) - trail]


def extract_math_answer(text: str) -> str | None:
    r"""The final LaTeX answer: the last ``\boxed{}``, else ``#### X``, else "the answer is X".

    For the last two, X is the rest of that line, without ``$`` delimiters or a trailing period.
    Only the last :data:`TAIL_CHARS` characters are read.

    >>> extract_math_answer(r"Thus $\boxed{\dfrac{3}{4}}$.")
    '\\dfrac{3}{4}'
    >>> extract_math_answer("The answer is $x^2+1$.")
    'x^2+1'

    Raises:
        AnswerCut: no box closes in the tail but one opens before it (the last box is out of reach).
    """
    boxed = extract_boxed(text)
    if boxed:
        return boxed
    text = _tail(text)
    newlines = [m.start() for m in re.finditer("\n", text)]
    for pattern in (_HASH_RE, _ANSWER_IS_RE):
        # Last marker first. A marker followed on its line by a later marker has a non-empty line,
        # so at most two lines are read per line of text: linear.
        for marker in reversed(list(pattern.finditer(text))):
            k = bisect.bisect_left(newlines, marker.end())
            end = newlines[k] if k < len(newlines) else len(text)
            line = text[marker.end() : end].strip().removesuffix(".").strip()
            line = _strip_dollars(line).strip()
            if line:
                return line
    return None
