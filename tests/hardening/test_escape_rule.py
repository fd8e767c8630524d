"""One escaping rule for every page, table, CSV cell and terminal line (issue 25, second pass).

Before issue 25: ``markdown_table`` wrote ``str(v)``, so a ``|`` or a line break in a question id shifted the
columns and an ``<img onerror=...>`` answer stayed live HTML; ``recognize``'s CSV kept ``=HYPERLINK(...)`` ids
raw (formula injection); ``write_report`` interpolated protocol fields unescaped. Each is checked here against a
reference made another way: Markdown rendered by markdown-it (CommonMark with GFM tables), CSV read back by the
standard library's reader, HTML parsed by the standard library's parser.
"""

from __future__ import annotations

import csv
import html.parser
import math

import pandas as pd
import pytest
from hostile import CONTROL, ESC, IMG, SCRIPT
from markdown_it import MarkdownIt

from reachlens.escape import csv_cell, csv_safe, html_text, md_text, visible
from reachlens.records import markdown_table

HOSTILE = [SCRIPT, IMG, ESC, "a|b", "x\\|y", "line1\nline2\r\nline3", "tail\\", "&lt;b&gt;", "`code|x`", "\u202egnp.exe",
           "=HYPERLINK(\"http://x\")", "-1+2", "@SUM(A1)", "\tTAB", "\rCR", "+3", "-3", "1e5", "plain"]


def _render(md: str) -> str:
    return MarkdownIt("commonmark", {"html": True}).enable("table").render(md)


class _Cells(html.parser.HTMLParser):
    """Tags, attributes and cell texts of an HTML fragment."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[str] = []
        self.cells: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [name for name, _ in attrs]
        if tag in ("td", "th"):
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append("\n")

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.cells.append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _parse(fragment: str) -> _Cells:
    p = _Cells()
    p.feed(fragment)
    p.close()
    return p


def test_a_markdown_table_keeps_its_columns_and_no_live_html() -> None:
    df = pd.DataFrame({"question_id": HOSTILE, "n": range(len(HOSTILE)), "D": [0.5] * len(HOSTILE)})
    page = _parse(_render(markdown_table(df)))
    assert set(page.tags) <= {"table", "thead", "tbody", "tr", "th", "td", "br", "code"}, page.tags
    assert not page.attrs  # no onerror=, no style=, nothing
    body = page.cells[3:]
    assert len(body) == 3 * len(HOSTILE)  # no row lost or split
    for i, value in enumerate(HOSTILE):
        cell, n = body[3 * i], body[3 * i + 1]
        assert n == str(i), (value, body[3 * i: 3 * i + 3])
        if "`" not in value:  # a code span shows its backslashes; everything else reads back as it was
            want = "\n".join(visible(line) for line in value.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
            assert cell.strip() == want.strip(), (value, cell)  # Markdown trims a cell's edges


def test_markdown_text_has_no_control_byte_and_one_line() -> None:
    for value in HOSTILE:
        text = md_text(value)
        assert "\n" not in text and not CONTROL & set(text) and "<" not in text.replace("<br>", ""), (value, text)


def test_html_text_is_text_in_a_page_and_in_an_attribute() -> None:
    for value in HOSTILE:
        page = _parse(f'<p title="{html_text(value)}">{html_text(value)}</p>')
        assert page.tags == ["p"] and page.attrs == ["title"] and not CONTROL & set(html_text(value)), value


@pytest.mark.parametrize("value", HOSTILE)
def test_the_terminal_never_gets_a_control_byte(value) -> None:
    one_line = visible(value)
    assert not CONTROL & set(one_line) and "\n" not in one_line
    assert "\u202e" not in one_line  # a bidirectional override cannot reorder what a terminal shows
    assert visible("a\nb", newlines=True) == "a\nb" and visible("a\nb") == "a\\nb"


def test_a_csv_cell_never_starts_a_formula(tmp_path) -> None:
    """OWASP's rule: a text cell starting with = + - @ tab or CR gets a leading quote; plain numbers are left."""
    from reachlens.store import write_csv

    df = pd.DataFrame({"question_id": HOSTILE, "x": [-1.5] * len(HOSTILE), "=col": range(len(HOSTILE))})
    write_csv(tmp_path / "t.csv", df)
    with open(tmp_path / "t.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["question_id", "x", "'=col"]
    for value, row in zip(HOSTILE, rows[1:]):
        formula = value[:1] in ("=", "+", "-", "@", "\t", "\r") and value not in ("+3", "-3")
        assert row[0] == ("'" + value if formula else value), (value, row)
        assert float(row[1]) == -1.5  # numbers stay numbers
    assert [csv_cell(v) for v in (1, math.nan, None)][0] == 1
    assert csv_safe(pd.DataFrame({"a": ["-x", "ok"]}))["a"].tolist() == ["'-x", "ok"]


INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u2062", "\u180e",
             *map(chr, (0xE0000, 0xE0001, 0xE0020, 0xE0041, 0xE007F))]
"""Zero-width characters, the word joiner, an invisible operator, the BOM and TAG characters (issue 36): text that
shows as nothing, so a string holding it looks like another (``adm\u200bin``) or carries hidden words."""


def test_zero_width_and_tag_characters_are_escaped_by_every_rule(tmp_path, capsys) -> None:
    import unicodedata

    from hostile import cli, hostile_audit

    assert {unicodedata.category(c) for c in INVISIBLE} <= {"Cf", "Cn"}  # format (invisible) or unassigned TAGs
    hidden = "adm" + "".join(INVISIBLE) + "in"
    for text in (visible(hidden), visible(hidden, newlines=True), html_text(hidden), md_text(hidden)):
        assert not set(INVISIBLE) & set(text) and text.startswith("adm\\u200b"), text
    assert visible(chr(0xE0041)) == "\\U000e0041"  # a TAG "A", named by its code point
    run = hostile_audit(f"m{hidden}").save(tmp_path / "run")
    code, out, _ = cli(capsys, "show", run)
    assert code == 0 and "adm\\u200b" in out and not set(INVISIBLE) & set(out)
    assert cli(capsys, "report", run)[0] == 0
    for page in (run / "report.html", run / "report.md"):
        assert not set(INVISIBLE) & set(page.read_text()), page
