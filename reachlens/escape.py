"""One escaping rule for every place a stored string leaves reachlens: a terminal, an HTML page, a Markdown
table, a CSV file.

Everything a run holds may come from someone else: question ids and gold answers from a data file, model specs
and folder names typed by whoever made the run, answers the model wrote, a ``run.json`` edited by hand. So no
writer puts a stored string out as it is; each goes through the function here for its medium:

* :func:`visible`: for a terminal. Control characters (C0 but tab, and newline unless kept; DEL; C1; the
  Unicode bidirectional overrides) and invisible ones (the zero-width space, joiners, word joiner, invisible
  operators and BOM, U+180E, U+200B-U+200D, U+2060-U+2064, U+206A-U+206F, U+FEFF; the TAG characters
  U+E0000-U+E007F) are written as their escapes
  (``\\x1b``, ``\\u202e``, ``\\U000e0041``), so an OSC or CSI sequence in a shared run cannot retitle a window,
  erase a line or fake one, and no text hides in a string that looks like another.
* :func:`html_text`: for HTML text and attribute values (``&``, ``<``, ``>``, both quotes; control characters as
  :func:`visible` writes them).
* :func:`md_text`: for Markdown, a table cell or inline text: ``&`` and ``<`` as entities (no tag, no
  entity can start; a lone ``>`` cannot, and stays readable in ``base -> grpo``), a backslash before
  punctuation doubled, ``|`` as ``\\|``, the backtick and a ``]`` that could close a link escaped (no link, no
  image, no code span: model text cannot load a tracking pixel or close the code span around it), a line
  break as ``<br>``,
  control characters as :func:`visible` writes them. A cell never shifts the columns and never carries live
  HTML.
* :func:`csv_cell` / :func:`csv_safe`: for a spreadsheet. A text cell starting with ``=``, ``+``, ``-``, ``@``,
  a tab or a carriage return gets a leading ``'`` (OWASP's rule against formula injection); a text cell that is
  a plain number (``-3``, ``+1.5e3``) is left alone, as no spreadsheet reads it as a formula.

>>> visible("a\\x1b]0;owned\\x07b")
'a\\\\x1b]0;owned\\\\x07b'
>>> md_text("a|b\\n<img onerror=x>")
'a\\\\|b<br>&lt;img onerror=x>'
>>> csv_cell("=HYPERLINK(1)"), csv_cell("-3")
("'=HYPERLINK(1)", '-3')
"""

from __future__ import annotations

import html
import re
from typing import Any

import pandas as pd

__all__ = ["csv_cell", "csv_safe", "html_text", "md_text", "visible"]

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u180e\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064"
                      "\u2066-\u206f\ufeff\U000e0000-\U000e007f]")
"""Characters a terminal acts on, that reorder what it shows, or that show nothing (zero-width, TAG); tab and
newline are handled apart."""
_MD_LINK = re.compile(r"`|\](?=[(\[:])")
"""A backtick (a code span) and a ``]`` that could close a link or an image (``](``, ``][``, or ``]:`` of a
definition): escaped, so no link can form, and a plain ``[95% CI]`` reads as it is (no writer puts ``(``,
``[`` or ``:`` right after an escaped text)."""
_NEWLINE = re.compile(r"\r\n|\n|\r")
_PUNCT_AFTER_BACKSLASH = re.compile(r"\\(?=[!-/:-@\[-`{-~])")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _escape_char(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" if c < 0x10000 else f"\\U{c:08x}"


def visible(text: Any, *, newlines: bool = False) -> str:
    """``text`` (any value, as ``str``) with every control character written as its escape; a newline is kept
    when ``newlines`` is True (several lines), else escaped too (one line)."""
    s = str(text)
    if newlines:
        return "\n".join(_CONTROL.sub(_escape_char, line) for line in s.split("\n"))
    return _CONTROL.sub(_escape_char, s.replace("\n", "\\n"))


def html_text(text: Any) -> str:
    """``text`` (any value, as ``str``) safe as HTML text or a quoted attribute value; control characters but
    newline and tab as :func:`visible` writes them (a page's source is safe to print, too)."""
    return html.escape(visible(text, newlines=True), quote=True)


def md_text(text: Any) -> str:
    """``text`` (any value, as ``str``) safe as one Markdown table cell or inline Markdown: no live HTML, no
    column break, no line break (``<br>``)."""
    s = _PUNCT_AFTER_BACKSLASH.sub(r"\\\\", str(text))
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|")
    s = _MD_LINK.sub(r"\\\g<0>", s)
    return "<br>".join(visible(line) for line in _NEWLINE.split(s))


def csv_cell(value: Any) -> Any:
    """``value`` safe as a spreadsheet cell: a text cell that would start a formula gets a leading ``'``."""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _PLAIN_NUMBER.fullmatch(value):
        return "'" + value
    return value


def csv_safe(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every text cell (and column name) made safe by :func:`csv_cell`; numbers are left as they are."""
    out = df.rename(columns=lambda c: csv_cell(c) if isinstance(c, str) else c)
    for col in out.columns:
        if out[col].dtype == object or pd.api.types.is_string_dtype(out[col]):
            out[col] = out[col].map(csv_cell)
    return out
