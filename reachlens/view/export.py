"""``reachlens view --export OUT``: a static copy of the viewer for sharing, opened from ``file://`` with no server.

The same fragments the server answers (:mod:`reachlens.view.render`), written once into plain pages with no
script: ``OUT/index.html`` lists the question sets; ``OUT/sets/N/index.html`` is set N's question list (every
question, a comparison's paired figures of them all), each question id a link to ``OUT/sets/N/q/M.html``: the
question's prompt, gold and sides with every sample's full text inlined (in closed ``<details>``: nothing to fetch).
Files are named by numbers, never by a question id or a folder name of a run. What needs the server is left out:
filters, search and sort (the pages say so; ``reachlens.view.questions_of`` gives any view as a DataFrame).

Every page carries the server's rule in a ``<meta>`` content security policy: no script at all, the style its
own (the stylesheet inlined, allowed by its hash), no request anywhere. The export is for a small run: past
:data:`MAX_QUESTIONS` question pages in all it is refused in one line (serve it with ``reachlens view`` instead).
OUT must be new or empty and outside the run directories: the viewer never writes into a run.
"""

from __future__ import annotations

import base64
import hashlib
import re
from importlib import resources
from pathlib import Path

from reachlens.errors import ReachlensError
from reachlens.escape import html_text as h
from reachlens.view import render
from reachlens.view.query import View
from reachlens.view.source import QuestionSet, question_sets

__all__ = ["MAX_QUESTIONS", "export"]

MAX_QUESTIONS = 5000
"""The most question pages an export writes (all sets together)."""
_LINK = re.compile(r'<p><a href="\?[^"]*">link to this question</a></p>')
_SAMPLE = re.compile(r'<details class="sample" data-side="(\d+)" data-idx="([^"]+)">(.*?)<pre></pre></details>', re.S)


def _page(title: str, body: str, depth: int) -> str:
    css = resources.files("reachlens.view").joinpath("static", "app.css").read_text()
    digest = base64.b64encode(hashlib.sha256(css.encode()).digest()).decode()
    csp = f"default-src 'none'; style-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    home = "../" * depth + "index.html"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{h(csp)}"><title>{h(title)}</title>'
            f'<style>{css}</style></head><body class="export"><header><h1><a href="{home}">reachlens view</a> '
            f"(a static export: no filter, search or sort; <code>reachlens view DIR</code> has them)</h1></header>"
            f"<main><section>{body}</section></main></body></html>\n")


def _check_out(out: Path, dirs: list[str | Path]) -> None:
    for d in dirs:
        root = Path(d).resolve()
        if out.resolve() == root or root in out.resolve().parents:
            raise ReachlensError(f"--export {str(out)!r} is inside the run directory {str(d)!r}; the viewer never "
                                 "writes into a run: export somewhere else")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ReachlensError(f"--export {str(out)!r} exists and is not an empty directory; name a new one")


def _question_page(qs: QuestionSet, qid: str) -> str:
    """The question fragment with every sample's text put in its ``<details>`` (what the page's script fetches)."""
    def fill(m: re.Match) -> str:
        try:
            text = render.sample_fragment(qs, qid, int(m.group(1)), m.group(2))
        except ReachlensError as err:
            text = render.problem_fragment(str(err))
        return f'<details class="sample" data-side="{m.group(1)}" data-idx="{m.group(2)}">{m.group(3)}<pre>{text}</pre></details>'

    page = _LINK.sub("", render.question_fragment(qs, qid))  # the server's address of it: none here
    return _SAMPLE.sub(fill, page)


def _set_pages(qs: QuestionSet, folder: Path) -> int:
    """Set ``qs``'s list and question pages under ``folder``; the number of questions written."""
    (folder / "q").mkdir(parents=True)
    try:
        table = qs.table()
    except ReachlensError as err:
        (folder / "index.html").write_text(_page(qs.title, render.problem_fragment(str(err)), 2), encoding="utf-8")
        return 0
    ids = table["question_id"].tolist()[: render.ROWS_SHOWN]
    number = {q: i for i, q in enumerate(ids)}
    listing = render.list_fragment(qs, View(), href=lambda qid: f"q/{number[qid]}.html")
    (folder / "index.html").write_text(_page(qs.title, listing, 2), encoding="utf-8")
    for i, qid in enumerate(ids):
        back = '<p><a href="../index.html">back to the list</a></p>'
        (folder / "q" / f"{i}.html").write_text(_page(f"{qs.title}: {qid}", back + _question_page(qs, qid), 3),
                                                 encoding="utf-8")
    return len(ids)


def _size(qs: QuestionSet) -> int:
    try:
        return len(qs.table())
    except ReachlensError:
        return 0


def export(dirs: list[str | Path], out: str | Path) -> Path:
    """Write the static copy of the viewer over ``dirs`` into ``out``; return the path of its ``index.html``.

    Raises:
        ReachlensError: ``out`` is not new or empty, is inside a run directory, or the runs hold more than
            :data:`MAX_QUESTIONS` questions.
    """
    out = Path(out)
    _check_out(out, dirs)
    sets = question_sets(dirs)
    total = sum(_size(s) for s in sets)
    if total > MAX_QUESTIONS:
        raise ReachlensError(f"the runs hold {total} questions in all, more than an export writes ({MAX_QUESTIONS}); "
                             "serve them with `reachlens view`, or export a smaller run")
    out.mkdir(parents=True, exist_ok=True)
    items = []
    for n, qs in enumerate(sets):
        count = _set_pages(qs, out / "sets" / str(n))
        mark = "" if qs.problem is None else f' <span class="problem">{h(qs.problem)}</span>'
        items.append(f'<li><a href="sets/{n}/index.html">{h(qs.title)}</a> ({count} questions){mark}</li>')
    index = out / "index.html"
    index.write_text(_page("reachlens view", f'<h2>Question sets</h2><ul id="sets">{"".join(items)}</ul>', 0),
                     encoding="utf-8")
    return index
