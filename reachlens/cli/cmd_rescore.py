"""``reachlens rescore DIR``: re-grade stored samples without sampling."""

from __future__ import annotations

import argparse

from reachlens.cli._common import echo

NAME = "rescore"
HELP = "re-grade a stored audit without sampling"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("dir", help="the audit directory to re-grade (rewritten in place)")
    p.add_argument("--grader", default=None, help="grader to use instead of the protocol's")
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.studies import rescore

    result = rescore(args.dir, grader=args.grader)
    echo(f"rescored {args.dir}: D={result.D:.3f}  O_{result.k}={result.O_K:.3f}  gap={result.gap:+.3f}")
    return 0
