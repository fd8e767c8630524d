"""One self-contained HTML page writer: every report of reachlens is a page of this shape (plotly.js inlined
when it has figures, no CDN, no file beside it), and every table on it is written the same way."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from reachlens.report.tables import fmt

__all__ = ["html_table", "kv_table", "write_page"]

_CSS = """body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}
.tbl{border-collapse:collapse;font-size:13px;margin:0.5em 0}
.tbl td,.tbl th{padding:3px 9px;text-align:right;border-bottom:1px solid #ddd}
.tbl th{background:#f4f4f4} .note{font-size:13px;color:#444;max-width:1100px}
.kv td{padding:2px 10px;text-align:left;vertical-align:top} .kv td:first-child{font-weight:bold}
.scroll{overflow-x:auto}"""


def html_table(df: pd.DataFrame) -> str:
    """``df`` as an HTML table, every value formatted for reading (an empty table: "(none)")."""
    if df.empty:
        return "<p><em>(none)</em></p>"
    return pd.DataFrame({c: [fmt(v) for v in df[c]] for c in df.columns}).to_html(index=False, classes="tbl", border=0)


def kv_table(df: pd.DataFrame) -> str:
    """A two-column (name, value) table, left-aligned."""
    return df.to_html(index=False, header=False, classes="kv", border=0)


def write_page(path: str | Path, title: str, body: str, *, figures: bool = False) -> Path:
    """Write a self-contained page: ``title``, the HTML ``body``, plotly.js inlined when it shows ``figures``."""
    script = ""
    if figures:
        from plotly.offline import get_plotlyjs

        script = f'<script type="text/javascript">{get_plotlyjs()}</script>\n'
    page = (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>\n{script}'
            f"<style>{_CSS}</style>\n</head><body>\n{body}\n</body></html>\n")
    path = Path(path)
    path.write_text(page)
    return path
