"""``reachlens convert DIR``: rewrite an audit directory written before run.json into today's format.

Its header ``protocol.json`` becomes ``run.json`` (kind ``audit``; the same protocol, model and data
identity); its tables and summary are already in today's format and are left as they are. Reading
such a directory needs no conversion (every command reads it as an audit); converting records it in
the one format. Under the directory's writer lock; a directory that has run.json is left alone.
"""

from __future__ import annotations

import argparse

NAME = "convert"
HELP = "rewrite an audit directory written before run.json (protocol.json) in today's run format"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("dirs", nargs="+", help="audit directories to convert")
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.store import RunDir

    for d in args.dirs:
        run = RunDir(d)
        changed = run.convert()
        print(f"{d}: {'converted: protocol.json -> run.json' if changed else 'already in the run format'}")
    return 0
