"""``reachlens report DIR...``: the self-contained HTML report and Markdown summary of a training audit.

DIR is a study directory (written by ``reachlens demo`` or ``experiments/rlvr_audit.py``), a comparison
directory (written by ``reachlens compare --out``), or two or more audit directories: the first is the
base, each other one is compared with it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "report"
HELP = "write report.html and report.md for a study directory or a list of audit directories"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("dirs", nargs="+", help="a study or comparison directory, or audit directories (base first)")
    p.add_argument("--out", default=None,
                   help="where to write the report (default: the study or comparison directory)")
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.cli._common import CLIError
    from reachlens.report import write_report
    from reachlens.studies.training_audit import load_training_audit, pairs_from_dirs

    for d in args.dirs:
        if not Path(d).is_dir():
            raise CLIError(f"{d!r} is not a directory")
    if len(args.dirs) == 1:
        one = Path(args.dirs[0])
        if (one / "study.json").is_file():
            study = load_training_audit(one)
        elif (one / "comparison.json").is_file():
            study = _comparison_study(one)
        else:
            raise CLIError(f"{args.dirs[0]!r} has neither study.json nor comparison.json; pass a study directory, "
                           "a `reachlens compare --out` directory, or two or more audit directories")
    else:
        study = pairs_from_dirs(args.dirs)
    out = args.out or (args.dirs[0] if len(args.dirs) == 1 else Path(args.dirs[0]).parent / "report")
    html_path, md_path = write_report(study, out)
    print(f"report: {html_path}\nsummary: {md_path}")
    return 0


def _comparison_study(folder: Path):
    """The study view of a ``reachlens compare --out`` directory: its two audits, cut to the same k."""
    import json

    from reachlens.cli._common import CLIError
    from reachlens.studies.training_audit import pairs_from_dirs

    meta = json.loads((folder / "comparison.json").read_text())
    if "base_dir" not in meta:
        raise CLIError(f"{str(folder)!r} was written by an older `reachlens compare` that did not record its audit "
                       "directories; pass the two audit directories instead (base first)")
    if meta.get("allow"):
        raise CLIError(f"the comparison in {str(folder)!r} let protocol fields {meta['allow']} differ; the report "
                       "renders audits under one protocol (see `reachlens compare` for the join itself)")
    return pairs_from_dirs([meta["base_dir"], meta["trained_dir"]], k=meta.get("k_cut"))
