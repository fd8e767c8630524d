"""A report's links into ``reachlens view``: each fate of a pair to the viewer's list filtered to it, each gained
question to its page, and a run's per-question tables' question ids to their pages.

A report is a file and the viewer a server, so the links name the viewer as ``reachlens view DIR`` serves the run
directory the report is of (:mod:`reachlens.store.view_address`: this machine, port 8765, the set by its place under DIR);
the section says so. A pair whose comparison is not saved in the run (audits given to ``reachlens report`` one by
one) has no set in the viewer, and no links.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reachlens.escape import html_text as esc

__all__ = ["GAINED_SHOWN", "pair_keys", "question_links", "viewer_section"]

GAINED_SHOWN = 200
"""The most gained questions a pair lists by id (the fate's link lists them all)."""


def pair_keys(run: Any, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The viewer's set of each of ``pairs`` (the report's) of ``run`` as ``reachlens view DIR`` names it (DIR: the
    run's directory): a training audit's saved comparisons, a comparison itself; none for other runs."""
    from reachlens.store.view_address import set_key

    if run.location is None:
        return {}
    root = Path(run.location)
    if run.kind == "comparison":
        return {pair: "0" for pair in pairs}
    if run.kind != "training_audit":
        return {}
    from reachlens.studies.training_audit import StudyLayout

    layout = StudyLayout(root)
    return {(a, b): set_key(root, layout.comparison(a, b)) for a, b in pairs
            if (layout.comparison(a, b) / "run.json").is_file()}


def question_links(key: str = "0"):
    """A cell function: a question id -> its page in the viewer (set ``key``)."""
    from reachlens.store.view_address import view_url

    return lambda qid: view_url(key, question=qid)


def viewer_section(comparisons: dict[tuple[str, str], Any], keys: dict[tuple[str, str], str], where: str) -> str:
    """The report's section of links into the viewer, one list per pair with a set there (empty: none has)."""
    from reachlens.store.filter_expr import matches
    from reachlens.store.view_address import VIEW_PORT, view_url
    from reachlens.store.view_address import FATE_FILTERS

    parts = []
    for (a, b), cmp in comparisons.items():
        key = keys.get((a, b))
        if key is None:
            continue
        q = cmp.questions
        fates = "".join(f'<li><a href="{esc(view_url(key, filter=expr))}">{esc(words)}</a>: '
                        f"{int(matches(q, expr).sum())}</li>" for words, expr in FATE_FILTERS.items())
        gained = q.loc[q["realized_fate"] == "gained", "question_id"].tolist()
        ids = ", ".join(f'<a href="{esc(view_url(key, question=qid))}">{esc(qid)}</a>' for qid in gained[:GAINED_SHOWN])
        more = f" (the first {GAINED_SHOWN} of {len(gained)})" if len(gained) > GAINED_SHOWN else ""
        parts.append(f"<h3>{esc(a)} → {esc(b)}</h3><ul>{fates}</ul><p class=note>gained{esc(more)}: "
                     f"{ids or '(none)'}</p>")
    if not parts:
        return ""
    return ("<h2>Questions in the viewer</h2><p class=note>Each fate opens the viewer's question list filtered to it, "
            f"each question id its page, while <code>reachlens view {esc(where)}</code> runs (it listens on "
            f"127.0.0.1:{VIEW_PORT} when that port is free).</p>" + "".join(parts))
