"""``reachlens report DIR...``: the self-contained HTML report and Markdown summary of a training audit.

DIR is a study directory (written by ``reachlens demo`` or ``experiments/rlvr_audit.py``), or two or
more audit directories: the first is the base, each other one is compared with it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "report"
HELP = "write report.html and report.md for a study directory or a list of audit directories"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("dirs", nargs="+", help="a study directory, or audit directories (base first)")
    p.add_argument("--out", default=None, help="where to write the report (default: the study directory)")
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.cli._common import CLIError
    from reachlens.report import write_report
    from reachlens.studies.training_audit import load_training_audit, pairs_from_dirs

    for d in args.dirs:
        if not Path(d).is_dir():
            raise CLIError(f"{d!r} is not a directory")
    if len(args.dirs) == 1:
        if not (Path(args.dirs[0]) / "study.json").is_file():
            raise CLIError(f"{args.dirs[0]!r} has no study.json; pass a study directory or two or more audit directories")
        study = load_training_audit(args.dirs[0])
    else:
        study = pairs_from_dirs(args.dirs)
    out = args.out or (args.dirs[0] if len(args.dirs) == 1 else Path(args.dirs[0]).parent / "report")
    html_path, md_path = write_report(study, out)
    print(f"report: {html_path}\nsummary: {md_path}")
    return 0
