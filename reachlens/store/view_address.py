"""Addresses of the viewer, for the pages that link into it (``reachlens report``), and the names in them: a
comparison's fate filters (:data:`FATE_FILTERS`) and a probe family's column prefix (:func:`family_column`). They
sit below both the report and the viewer, which import them from here.

A report is a file; the viewer is a server. A report's links name the viewer of its run directory as
``reachlens view DIR`` serves it: on :data:`VIEW_PORT` of this machine (the port ``reachlens view`` takes when it is
free), the set named by the run's place under DIR, the question or the filter in the address, as the viewer's own
address bar holds them. The report says so beside its links: they open while ``reachlens view DIR`` runs.

>>> view_url("0/comparisons/base--grpo", filter='realized_fate == "gained"')
'http://127.0.0.1:8765/?set=0%2Fcomparisons%2Fbase--grpo&filter=realized_fate+%3D%3D+%22gained%22'
>>> set_key(Path("runs/demo"), Path("runs/demo/comparisons/base--grpo"))
'0/comparisons/base--grpo'
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlencode

__all__ = ["FATE_FILTERS", "VIEW_HOST", "VIEW_PORT", "family_column", "set_key", "view_url"]

VIEW_HOST = "127.0.0.1"
VIEW_PORT = 8765
"""The port ``reachlens view`` listens on when it is free and no ``--port`` is given (else a free one), and the port
a report's links name."""

FATE_FILTERS = {
    "gained, already base-reachable": 'realized_fate == "gained" and base_reachable',
    "gained, outside base-reachable": 'realized_fate == "gained" and not base_reachable',
    "lost": 'realized_fate == "lost"', "kept": 'realized_fate == "kept"', "never realized": 'realized_fate == "never"',
    "left the reachable set": 'reach_fate == "left"', "entered the reachable set": 'reach_fate == "entered"',
}
"""A comparison's fate filters: what the viewer's menu says, and the expression it writes in the address."""


def family_column(family: str) -> str:
    """A probe family's name as a column prefix a filter can name (``weight_noise``, ``fewshot``)."""
    return re.sub(r"\W", "_", family)


def set_key(root: Path, run: Path, index: int = 0) -> str:
    """The viewer's name for the set of the run at ``run`` when the viewer was given ``root`` as its
    ``index``-th directory (:func:`reachlens.view.question_sets`)."""
    rel = Path(run).resolve().relative_to(Path(root).resolve()).as_posix()
    return f"{index}/{rel}".rstrip("/.")


def view_url(key: str, *, question: str | None = None, filter: str | None = None, port: int = VIEW_PORT) -> str:
    """The viewer's address of set ``key``: its list under ``filter``, or its ``question``."""
    query = {"set": key}
    if filter:
        query["filter"] = filter
    if question is not None:
        query["question"] = question
    return f"http://{VIEW_HOST}:{port}/?{urlencode(query)}"
