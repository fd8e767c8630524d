"""Nothing a run holds is injected into a terminal or a page (issue 25, second pass).

Before issue 25 ``reachlens show`` printed run.json strings raw (an OSC sequence retitled the window, a CSI one
erased a line), ``report.md`` kept ``<img onerror=...>`` answers and ``|`` in question ids shifted its columns, and
``write_report`` put protocol fields into the page unescaped. Pages are parsed with the standard library's HTML
parser and Markdown is rendered with markdown-it: every payload is text, none is a tag or an attribute.
"""

from __future__ import annotations

import html.parser
import re

from hostile import CONTROL, ESC, IMG, SCRIPT, cli, error_line, hostile_audit
from markdown_it import MarkdownIt


class _Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[str]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, [name for name, _ in attrs]))


def _tags(page: str) -> list[tuple[str, list[str]]]:
    p = _Tags()
    p.feed(page)
    return p.tags


def test_show_and_compare_print_no_control_byte(tmp_path, capsys) -> None:
    base = hostile_audit("base").save(tmp_path / f"base {IMG}")
    trained = hostile_audit("trained", realized=(True, True, False)).save(tmp_path / "trained")
    code, out, err = cli(capsys, "show", base)
    assert code == 0 and not CONTROL & set(out + err)
    assert "\\x1b]0;owned\\x07" in out and "\\x9b31m" in out  # shown, as escapes
    assert all(line.startswith((" ", "kind", "format", "status", "model", "protocol", "data", "exec", "reachlens",
                                "command", "summary")) for line in out.splitlines())  # no line forged
    code, out, err = cli(capsys, "compare", base, trained)
    assert code == 0 and not CONTROL & set(out + err) and "\\x1b" in out


def test_an_error_naming_a_hostile_value_prints_no_control_byte(tmp_path, capsys) -> None:
    folder = tmp_path / f"x{ESC}"
    folder.mkdir()
    (folder / "data.txt").write_text("mine")
    code, _, err = cli(capsys, "show", folder)
    assert code == 2 and not CONTROL & set(err) and "\\x1b]0;owned" in error_line(err)


def test_every_page_holds_the_payloads_as_text(tmp_path, capsys) -> None:
    from plotly.offline import get_plotlyjs

    from reachlens.report import write_run_report
    from reachlens.store import read_run

    base = hostile_audit("base").save(tmp_path / f"base {IMG}")
    trained = hostile_audit("trained", realized=(True, True, False), n_correct=(2, 1, 0)).save(tmp_path / f"t {IMG}")
    assert cli(capsys, "report", base, trained, "--out", tmp_path / "pair")[0] == 0
    pages = [tmp_path / "pair" / "report.html", write_run_report(read_run(base), tmp_path / "generic")[0]]
    for page in pages:
        text = page.read_text()
        assert "window.__pwned" in text and not CONTROL & set(text.replace(get_plotlyjs(), ""))  # plotly.js aside
        for tag, attrs in _tags(text):
            assert tag not in ("img", "iframe", "object") and not any(a.startswith("on") for a in attrs), (page, tag)
        bodies = re.findall(r"<script[^>]*>(.*?)</script>", text, re.S)
        assert all(b == get_plotlyjs() or b.strip().startswith("window.PLOTLYENV") for b in bodies)  # plotly's only
        assert SCRIPT not in text and IMG not in text  # as HTML text, or inside a figure's JSON (\u003c...)
        md = page.with_suffix(".md").read_text()
        assert not CONTROL & set(md)
        rendered = MarkdownIt("commonmark", {"html": True}).enable("table").render(md)
        assert not {tag for tag, _ in _tags(rendered)} - {"h1", "h2", "h3", "p", "table", "thead", "tbody", "tr", "th",
                                                            "td", "br", "code", "em", "strong", "ul", "li"}
        assert not any(attrs for _, attrs in _tags(rendered))  # no onerror=, no src=, no style=


def test_show_prints_a_summary_of_records_as_a_table_of_escaped_cells() -> None:
    """A summary entry that is a list of records (a probe run's overlap, budget-matched rows) or a mapping of
    names to records (its probes) prints as an indented table, one row per record, every cell escaped, '|' in a
    value kept inside its cell; past 40 rows it says how many more there are."""
    from markdown_it import MarkdownIt

    from reachlens.cli.cmd_show import _table_lines
    from reachlens.escape import visible

    rows = [{"a": "sampling", "b": f"x|{ESC}]0;owned\a", "jaccard": 0.47368, "ci": [0.2, None]},
            {"a": "routes", "b": "fewshot", "jaccard": 1.0, "ci": [0.5, 1.0]}]
    lines = _table_lines("overlap", rows)
    assert lines[0] == "  overlap:" and not CONTROL & set("".join(lines))
    html = MarkdownIt().enable("table").render("\n".join(x.strip() for x in lines[1:]))
    cells = re.findall(r"<td>(.*?)</td>", html)
    assert cells == ["sampling", "x|" + visible(f"{ESC}]0;owned\a"), "0.4737", "[0.2, -]", "routes", "fewshot", "1", "[0.5, 1]"]
    named = _table_lines("probes", {"sampling:k=8": {"O": 0.4167, "arms": {"x": {"O": 1}}}})
    assert named[1] == "    | name | O | arms |" and named[3] == "    | sampling:k=8 | 0.4167 | 1 entries |"
    many = _table_lines("rows", [{"i": i} for i in range(45)])
    assert len(many) == 3 + 40 + 1 and "5 more rows" in many[-1]
    assert _table_lines("D", 0.5) == [] and _table_lines("D_ci", [0.1, 0.3]) == []
