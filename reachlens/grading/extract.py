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
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction

__all__ = [
    "extract_boxed",
    "extract_choice",
    "extract_math_answer",
    "extract_numeric_answer",
    "parse_number",
]

_CURRENCY = "$€£¥₹"
# One number token. Groups: sign, integer part, decimal part, denominator.
_NUMBER = (
    r"(?<![\w.])"  # not the tail of a word, of another number, or of a decimal
    rf"(?P<sign>[-+−])?[{_CURRENCY}]?(?P<sign2>[-+−])?"
    r"(?P<int>\d{1,3}(?:,\d{3})+(?![\d,]\d)|\d+)?"  # 1,319 (never 3,4 or 12,34) or 1319
    r"(?P<dec>\.\d+)?"
    r"(?:/(?P<den>\d+))?"
    r"(?![\d])%?"
)
_NUMBER_RE = re.compile(_NUMBER)
_HASH_RE = re.compile(r"####")
_ANSWER_IS_RE = re.compile(r"\banswer\s*(?:is\s*:?|:)", re.IGNORECASE)


def _token_value(match: re.Match[str]) -> tuple[str, Fraction] | None:
    """The display string and exact value of one ``_NUMBER_RE`` match, or None if it is empty."""
    integer, dec, den = match["int"], match["dec"], match["den"]
    if integer is None and dec is None:
        return None
    if den is not None and int(den) == 0:
        return None  # "3/0" is not a number
    negative = any(c in "-−" for c in (match["sign"] or "") + (match["sign2"] or ""))
    body = (integer or "0").replace(",", "") + (dec or "")
    value = Fraction(body) / (int(den) if den is not None else 1)
    display = body + (f"/{den}" if den is not None else "")
    if negative:
        value, display = -value, "-" + display
    return display, value


def _numbers(text: str) -> list[tuple[str, Fraction]]:
    """Every number token in ``text``, left to right, as (display, value)."""
    found = []
    for match in _NUMBER_RE.finditer(text):
        token = _token_value(match)
        if token is not None:
            found.append(token)
    return found


def parse_number(text: str) -> Fraction | None:
    """The exact value of ``text`` when it is a single number, else None.

    Surrounding whitespace and a trailing period are ignored; currency and percent signs,
    thousands separators and signs are understood as described in the module docstring.

    >>> parse_number("1,234"), parse_number("-3.50"), parse_number("3/4"), parse_number("$18.")
    (Fraction(1234, 1), Fraction(-7, 2), Fraction(3, 4), Fraction(18, 1))
    >>> parse_number("3, 4") is None
    True
    """
    stripped = text.strip().removesuffix(".").strip()
    match = _NUMBER_RE.fullmatch(stripped)
    if match is None:
        return None
    token = _token_value(match)
    return None if token is None else token[1]


def _first_number(text: str) -> str | None:
    numbers = _numbers(text)
    return numbers[0][0] if numbers else None


def extract_numeric_answer(text: str) -> str | None:
    """The final numeric answer in ``text`` (``####``, then "the answer is", then the last number).

    Returns the number normalized for display (no currency, percent or thousands separators, a
    leading ``-`` for negatives), or None when ``text`` holds no number.

    >>> extract_numeric_answer("3 + 4 = 7 apples.\\n#### 7")
    '7'
    >>> extract_numeric_answer("So the answer is: $1,319. Checked in 2 steps.")
    '1319'
    >>> extract_numeric_answer("She pays 3/4 of 5 dollars, that is 3.75")
    '3.75'
    >>> extract_numeric_answer("no digits here") is None
    True
    """
    for marker in reversed(list(_HASH_RE.finditer(text))):
        line = text[marker.end() :].split("\n", 1)[0]
        number = _first_number(line)
        if number is not None:
            return number
    for phrase in reversed(list(_ANSWER_IS_RE.finditer(text))):
        line = text[phrase.end() :].split("\n", 1)[0]
        number = _first_number(line)
        if number is not None:
            return number
    numbers = _numbers(text)
    return numbers[-1][0] if numbers else None


def extract_choice(text: str, labels: Sequence[str] = ("A", "B", "C", "D")) -> str | None:
    """The multiple-choice label chosen in ``text``, one of ``labels``, or None.

    Priority: ``#### B``; then "the answer is (B)" / "Answer: C" (last occurrence, either case);
    then a text that is a lone label (``"B"``, ``"(B)"``, ``"B."``); then the last ``(B)``-style
    label; then the last standalone label token (upper case only, so the word "a" is never read as
    a choice; "A"/"I" at a sentence start can still be picked up by this last fallback).

    >>> extract_choice("Paris is in France, so the answer is (C).")
    'C'
    >>> extract_choice("answer: 2", labels=("1", "2", "3", "4"))
    '2'
    >>> extract_choice("I cannot tell.") is None
    True
    """
    canon = {label.upper(): label for label in labels}
    if not canon:
        raise ValueError(f"labels {labels!r} is empty; pass the valid choice labels, e.g. 'ABCD'")
    spelled = sorted(set(labels) | set(canon), key=len, reverse=True)
    alternatives = "|".join(re.escape(label) for label in spelled)
    token = rf"\(?\s*({alternatives})\s*\)?(?![\w])"
    # Keywords in any case, labels as spelled (or upper case): "the answer is a bit" is no choice.
    anchors = (rf"####\s*{token}", rf"(?i:\banswer\s*(?:is\s*:?|:))\s*\**\s*{token}")
    for anchor in anchors:
        found = re.findall(anchor, text)
        if found:
            return canon[found[-1].upper()]
    lone = re.fullmatch(rf"\s*{token}\s*[.)]?\s*", text, re.IGNORECASE)
    if lone:
        return canon[lone.group(1).upper()]
    for pattern in (rf"\(\s*({alternatives})\s*\)", rf"(?<![\w])({alternatives})(?![\w])"):
        found = re.findall(pattern, text)
        if found:
            return canon[found[-1].upper()]
    return None


def extract_boxed(text: str) -> str | None:
    r"""The content of the last ``\boxed{...}`` (or ``\fbox{...}``) in ``text``, braces balanced.

    >>> extract_boxed(r"so $x = \boxed{\frac{1}{2}}$.")
    '\\frac{1}{2}'
    >>> extract_boxed("no box") is None
    True
    """
    for start in reversed([m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]):
        depth = 1
        for i in range(start, len(text)):
            if text[i] == "{" and text[i - 1] != "\\":
                depth += 1
            elif text[i] == "}" and text[i - 1] != "\\":
                depth -= 1
                if depth == 0:
                    return text[start:i].strip()
    return None  # unbalanced (truncated output) or no box at all


_DOLLARS_RE = re.compile(r"^\$+(.*?)\$+$", re.DOTALL)


def extract_math_answer(text: str) -> str | None:
    r"""The final LaTeX answer: the last ``\boxed{}``, else ``#### X``, else "the answer is X".

    For the last two, X is the rest of that line, without ``$`` delimiters or a trailing period.

    >>> extract_math_answer(r"Thus $\boxed{\dfrac{3}{4}}$.")
    '\\dfrac{3}{4}'
    >>> extract_math_answer("The answer is $x^2+1$.")
    'x^2+1'
    """
    boxed = extract_boxed(text)
    if boxed:
        return boxed
    for pattern in (_HASH_RE, _ANSWER_IS_RE):
        for marker in reversed(list(pattern.finditer(text))):
            line = text[marker.end() :].split("\n", 1)[0].strip().removesuffix(".").strip()
            line = _DOLLARS_RE.sub(r"\1", line).strip()
            if line:
                return line
    return None
