"""``reachlens view DIR [DIR ...]``: a local, read-only web viewer of runs, question by question.

Every audit and comparison at or under each DIR (a training audit's pairs and checkpoints, a control's reruns, an
elicitation's audits) is a question set: its question list with filters (fate, status, an expression), a text
search and a sort, and any question opened with its prompt as the model saw it, its gold, and each side's deployment
and samples grouped by answer. The server binds 127.0.0.1 on a free port (``--port``, ``--host`` to change it),
never writes into a run, and runs until Ctrl-C; the address is printed, and opened in the browser unless
``--no-browser``.
"""

from __future__ import annotations

import argparse
import time

from reachlens.cli._common import echo

NAME = "view"
HELP = "browse runs question by question in a local, read-only web viewer"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("dirs", nargs="+", help="run directories (a training audit, a comparison, audits, ...)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=0, help="port to bind (default: a free one)")
    p.add_argument("--no-browser", action="store_true", help="print the address without opening a browser")
    return p


def run(args: argparse.Namespace) -> int:
    import webbrowser

    from reachlens.cli._common import CLIError
    from reachlens.view import serve

    if not 0 <= args.port <= 65535:
        raise CLIError(f"--port {args.port} is out of range; use 0 (a free port) to 65535")
    try:
        server = serve(args.dirs, args.host, args.port)
    except OSError as err:
        raise CLIError(f"cannot listen on {args.host}:{args.port} ({err.strerror}); use another --port, or 0") from None
    echo(f"reachlens view: {server.url} ({len(server.sets)} question sets; Ctrl-C stops it)")
    if not args.no_browser:
        webbrowser.open(server.url)
    try:
        while True:
            time.sleep(3600)
    finally:
        server.shutdown()
