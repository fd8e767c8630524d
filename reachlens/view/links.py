"""Addresses of the viewer, for the pages that link into it (``reachlens report``).

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

from pathlib import Path
from urllib.parse import urlencode

__all__ = ["VIEW_HOST", "VIEW_PORT", "set_key", "view_url"]

VIEW_HOST = "127.0.0.1"
VIEW_PORT = 8765
"""The port ``reachlens view`` listens on when it is free and no ``--port`` is given (else a free one), and the port
a report's links name."""


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
