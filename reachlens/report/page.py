"""One self-contained HTML page writer: every report of reachlens is a page of this shape (plotly.js inlined
when it has figures, no CDN, no file beside it), and every table on it is written the same way.

Every string that reaches a page goes through :func:`reachlens.escape.html_text` (a table's cells and headers,
titles, notes) and every string of a Markdown page through :func:`reachlens.escape.md_text`: question ids,
answers, model specs, folder names and protocol fields are data, never markup.

A page is written atomically (:func:`reachlens.store.files.write_durably`: a full disk leaves the old page, never
half a new one) and marks itself as reachlens' (a ``generator`` meta tag; a first-line comment in Markdown).
A file of that name without the mark was not written by reachlens and is never replaced unless ``force``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Collection, Mapping, Sequence
from itertools import chain, repeat
from pathlib import Path

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.escape import html_text, md_text
from reachlens.report.tables import fmt, fmt_p
from reachlens.store.files import write_durably

__all__ = [
    "GENERATOR", "MARKDOWN_MARK", "html_table", "kv_table", "unfinished_note", "write_markdown", "write_page",
    "write_report_files",
]

GENERATOR = '<meta name="generator" content="reachlens report">'
"""The mark of a page reachlens wrote (in its head)."""
MARKDOWN_MARK = "<!-- generator: reachlens report -->"
"""The mark of a Markdown page reachlens wrote (its first line)."""

_CSS = """body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}
.tbl{border-collapse:collapse;font-size:13px;margin:0.5em 0}
.tbl td,.tbl th{padding:3px 9px;text-align:right;border-bottom:1px solid #ddd}
.tbl th{background:#f4f4f4} .note{font-size:13px;color:#444;max-width:1100px}
.kv td{padding:2px 10px;text-align:left;vertical-align:top} .kv td:first-child{font-weight:bold}
.kv td{white-space:pre-wrap;word-break:break-word} .kv td:first-child{white-space:nowrap}
.scroll{overflow-x:auto}
.unfinished{background:#fff3cd;border:1px solid #e0b000;padding:0.6em 1em;font-weight:bold}"""

CELL_CHARS = 32
"""A model's answer longer than this is shown cut, with an ellipsis, its whole text the cell's tooltip: model
output is untrusted, and a 300-digit "answer" must not widen its column past the page. Names (questions,
probes, conditions) are never cut."""


def _cell(text: str, tag: str, cut: bool, href: Callable[[str], str] | None = None, breaks: bool = False) -> str:
    inner = html_text(text) if not cut or len(text) <= CELL_CHARS else f"{html_text(text[: CELL_CHARS - 1])}…"
    if breaks:  # a long spec may break after its separators (escaped text holds no ':' or ',' of its own)
        inner = inner.replace(":", ":<wbr>").replace(",", ",<wbr>")
    if href is not None:
        inner = f'<a href="{html_text(href(text))}">{inner}</a>'
    title = f' title="{html_text(text)}"' if cut and len(text) > CELL_CHARS else ""
    return f"<{tag}{title}>{inner}</{tag}>"


def _rows(cells: list[list[str]], tag: str = "td", *, cut: Sequence[bool] = (),
          links: Sequence[Callable[[str], str] | None] = (), breaks: Sequence[bool] = ()) -> str:
    """Table rows; a column whose ``cut`` flag is set has its long cells cut (:data:`CELL_CHARS`), one with a
    ``links`` function has each cell a link to ``function(cell)``, one whose ``breaks`` flag is set may break
    after ':' and ','."""
    return "".join("<tr>" + "".join(_cell(c, tag, x, f, b) for c, x, f, b in zip(
        row, chain(cut, repeat(False)), chain(links, repeat(None)), chain(breaks, repeat(False)))) + "</tr>\n"
        for row in cells)


def html_table(df: pd.DataFrame, links: Mapping[str, Callable[[str], str]] | None = None,
               breaks: Collection[str] = ()) -> str:
    """``df`` as an HTML table, every value formatted for reading and escaped, a model's answers (a column named
    ``*answer*``) cut at :data:`CELL_CHARS` (an empty table: "(none)"); a column ``links`` names has each cell a link
    to ``links[column](cell)`` (a question id to its page in ``reachlens view``); a column ``breaks`` names (a probe's
    spec) may break after ':' and ',' (``<wbr>``: nothing is added to the text)."""
    if df.empty:
        return "<p><em>(none)</em></p>"
    head = _rows([[str(c) for c in df.columns]], "th")
    cut = tuple("answer" in str(c) for c in df.columns)
    form = [_p_value if _is_p_value(str(c)) else fmt for c in df.columns]
    hrefs = [(links or {}).get(str(c)) for c in df.columns]
    wbr = tuple(str(c) in breaks for c in df.columns)
    body = _rows([[f(v) for f, v in zip(form, row)] for row in df.itertuples(index=False)], cut=cut, links=hrefs,
                 breaks=wbr)
    return f'<table class="tbl">\n<thead>{head}</thead>\n<tbody>\n{body}</tbody>\n</table>'


def _is_p_value(column: str) -> bool:
    """A column of p-values (``p``, ``p_realized``, ``mcnemar_p``, ...): printed by :func:`fmt_p`."""
    return column == "p" or column.startswith("p_") or (column.endswith("_p") and column != "top_p")


def _p_value(v) -> str:
    return fmt_p(v) if isinstance(v, float) else fmt(v)


def kv_table(df: pd.DataFrame) -> str:
    """A two-column (name, value) table, left-aligned, escaped."""
    return f'<table class="kv">\n<tbody>\n{_rows([[str(v) for v in row] for row in df.itertuples(index=False)])}</tbody>\n</table>'


def _check_owned(path: Path, mark: str, force: bool) -> None:
    """Refuse, unless ``force``, a file at ``path`` that lacks ``mark`` (reachlens did not write it), and anything
    there that is not a regular file (a FIFO is never opened: it would block)."""
    if force or not os.path.lexists(path):
        return
    if not stat.S_ISREG(os.lstat(path).st_mode):
        raise ReachlensError(f"{str(path)!r} exists and is not a regular file (a link, a FIFO, a device), so "
                             "reachlens did not write it; remove it, or write the report to another directory (out=)")
    try:
        with open(path, "rb") as f:
            head = f.read(4096).decode("utf-8", errors="replace")
    except OSError as err:
        raise ReachlensError(f"{str(path)!r} cannot be read ({err.strerror}); write the report elsewhere (out=)") from None
    if mark not in head:
        raise ReachlensError(f"{str(path)!r} exists and was not written by reachlens report; pass force=True to "
                             "replace it, or write the report to another directory (out=)")


def _page(title: str, body: str, figures: bool) -> str:
    script = ""
    if figures:
        from plotly.offline import get_plotlyjs

        script = f'<script type="text/javascript">{get_plotlyjs()}</script>\n'
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8">{GENERATOR}<title>{html_text(title)}</title>\n'
            f"{script}<style>{_CSS}</style>\n</head><body>\n{body}\n</body></html>\n")


def write_page(path: str | Path, title: str, body: str, *, figures: bool = False, force: bool = False) -> Path:
    """Write a self-contained page: ``title`` (escaped here), the HTML ``body`` (escaped by its maker), plotly.js
    inlined when it shows ``figures``. A file at ``path`` that reachlens did not write is refused unless ``force``."""
    path = Path(path)
    _check_owned(path, GENERATOR, force)
    write_durably(path, lambda tmp: tmp.write_text(_page(title, body, figures), encoding="utf-8"))
    return path


def write_markdown(path: str | Path, text: str, *, force: bool = False) -> Path:
    """Write a Markdown page (``text``, escaped by its maker) with reachlens' mark as its first line; a file at
    ``path`` that reachlens did not write is refused unless ``force``."""
    path = Path(path)
    _check_owned(path, MARKDOWN_MARK, force)
    write_durably(path, lambda tmp: tmp.write_text(f"{MARKDOWN_MARK}\n{text}", encoding="utf-8"))
    return path


def unfinished_note(status: str) -> str | None:
    """What a report of a run whose status is ``status`` says first, when the run is not complete (None when it
    is): its tables hold only what was finished."""
    if status == "complete":
        return None
    return (f"Unfinished: this run's status is {status!r}, not complete. Its tables hold only what was finished "
            "before it stopped; run its command again to resume it.")


def write_report_files(out: Path, title: str, body: str, markdown: str, *, figures: bool, force: bool,
                       status: str = "complete") -> tuple[Path, Path]:
    """Write ``out/report.html`` (``body``, :func:`write_page`) and ``out/report.md`` (``markdown``), both checked
    to be reachlens' own (or absent) before either is written, each opening with the :func:`unfinished_note` of a
    run whose ``status`` is not complete."""
    html_path, md_path = out / "report.html", out / "report.md"
    _check_owned(html_path, GENERATOR, force)
    _check_owned(md_path, MARKDOWN_MARK, force)
    note = unfinished_note(status)
    if note is not None:
        body = f'<p class="unfinished">{html_text(note)}</p>\n{body}'
        first, _, rest = markdown.partition("\n")
        markdown = f"{first}\n\n**{md_text(note)}**\n{rest}"
    return write_page(html_path, title, body, figures=figures, force=True), write_markdown(md_path, markdown, force=True)
