"""``reachlens convert DIR...``: rewrite run directories written by an older reachlens in today's run format.

Every run directory under each DIR (DIR itself included) is brought to the current format version
(:mod:`reachlens.store.convert`): an audit directory whose header is ``protocol.json``, a training audit
whose plan is ``study.json``, every ``run.json`` without a ``format_version`` (its status, times and
execution settings are added; a training study's and a control's reruns are renamed by today's directory
rule; tables kept as CSV become parquet), and every ``run.json`` of an older format version (format 1: a
training study's K-sample prompt-format control is cut to the first sample of each question). Each directory is converted under its writer lock; one already in
today's format is left alone.
"""

from __future__ import annotations

import argparse

from reachlens.cli._common import echo

NAME = "convert"
HELP = "rewrite run directories written by an older reachlens in today's run format"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("dirs", nargs="+", help="run directories to convert (and every run directory under them)")
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.store.convert import convert

    for d in args.dirs:
        changed = convert(d)
        if changed:
            for path, what in changed:
                echo(f"{path}: converted ({what})")
        else:
            echo(f"{d}: already in the run format")
    return 0
