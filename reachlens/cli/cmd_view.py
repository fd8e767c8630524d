"""``reachlens view DIR [DIR ...]``: a local, read-only web viewer of runs, question by question.

Every audit and comparison at or under each DIR (a training audit's pairs and checkpoints, a control's reruns, an
elicitation's audits) is a question set: its question list with filters (fate, status, an expression), a text
search and a sort, and any question opened with its prompt as the model saw it, its gold, and each side's deployment
and samples grouped by answer; a probe run's candidates by probe and arm, a routing run's routes, a recognition
run's options. The server binds 127.0.0.1, on port 8765 (the port a report's links name) when it is free, else on a
free one (``--port``, ``--host`` to change it), never writes into a run, and runs until Ctrl-C; the address is
printed, and opened in the browser unless ``--no-browser``. ``--export OUT`` writes a static copy of a small run
instead (pages with no script, opened from ``file://``).
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
    p.add_argument("--port", type=int, default=None,
                   help="port to bind (default 8765, the port a report's links name, when free; else a free one; "
                        "0: a free one)")
    p.add_argument("--no-browser", action="store_true", help="print the address without opening a browser")
    p.add_argument("--export", default=None, metavar="OUT",
                   help="write a static copy (no server; opens from file://) into the new directory OUT and exit")
    return p


def run(args: argparse.Namespace) -> int:
    import webbrowser

    from reachlens.cli._common import CLIError

    if args.export is not None:
        from reachlens.view.export import export

        echo(f"reachlens view: wrote {export(args.dirs, args.export)}")
        return 0
    if args.port is not None and not 0 <= args.port <= 65535:
        raise CLIError(f"--port {args.port} is out of range; use 0 (a free port) to 65535")
    server = _serve(args)
    echo(f"reachlens view: {server.url} ({len(server.sets)} question sets; Ctrl-C stops it)")
    if not args.no_browser:
        webbrowser.open(server.url)
    try:
        while True:
            time.sleep(3600)
    finally:
        server.shutdown()


def _serve(args: argparse.Namespace):
    """The server on ``--port``; with none given, on VIEW_PORT when it is free, else on a free port."""
    from reachlens.cli._common import CLIError
    from reachlens.view import serve
    from reachlens.store.view_address import VIEW_PORT

    port = VIEW_PORT if args.port is None else args.port
    try:
        return serve(args.dirs, args.host, port)
    except OSError as err:
        if args.port is None:  # 8765 taken (another viewer?): a free port
            return _serve(argparse.Namespace(**{**vars(args), "port": 0}))
        raise CLIError(f"cannot listen on {args.host}:{port} ({err.strerror}); use another --port, or 0") from None
