"""``reachlens report DIR...``: the self-contained HTML report and Markdown summary of any run.

DIR is any run directory: a training audit (``reachlens demo``, ``experiments/rlvr_audit.py``), a
comparison (``reachlens compare --out``), one audit, a routing run, a recognition run or a causal
sweep; or two or more audit directories: the first is the base, each other one is compared with it.
The report is written into DIR (or ``--out``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "report"
HELP = "write report.html and report.md for any run directory, or for audit directories (base first)"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("dirs", nargs="+", help="a run directory (audit, comparison, routing, recognition, study), "
                                           "or audit directories (base first)")
    p.add_argument("--out", default=None, help="where to write the report (default: the run directory)")
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.cli._common import CLIError
    from reachlens.report import write_report, write_run_report
    from reachlens.store import RunDir
    from reachlens.studies.training_audit import load_training_audit, pairs_from_dirs, single_audit

    for d in args.dirs:
        if not Path(d).is_dir():
            raise CLIError(f"{d!r} is not a directory")
    if len(args.dirs) > 1:
        study = pairs_from_dirs(args.dirs)
        out = args.out or Path(args.dirs[0]).parent / "report"
    else:
        one = Path(args.dirs[0])
        out = args.out or one
        if (one / "study.json").is_file():  # a training audit (also one written before run.json)
            study = load_training_audit(one)
        elif (one / "comparison.json").is_file():  # a comparison written before run.json
            study = _legacy_comparison_study(one)
        else:
            record = RunDir(one).record()  # not a run directory: one line naming it
            if record.kind == "audit":
                study = single_audit(one)
            elif record.kind == "comparison":
                study = _comparison_study(one, record.options)
            else:
                html_path, md_path = write_run_report(one, out)
                print(f"report: {html_path}\nsummary: {md_path}")
                return 0
    html_path, md_path = write_report(study, out)
    print(f"report: {html_path}\nsummary: {md_path}")
    return 0


def _comparison_study(folder: Path, options: dict):
    """The study view of a comparison: its two audits, cut to the same k."""
    from reachlens.cli._common import CLIError
    from reachlens.studies.training_audit import pairs_from_dirs

    if options.get("allow"):
        raise CLIError(f"the comparison in {str(folder)!r} let protocol fields {options['allow']} differ; the report "
                       "renders audits under one protocol (see `reachlens compare` for the join itself)")
    return pairs_from_dirs([options["base_dir"], options["trained_dir"]], k=options.get("k_cut"))


def _legacy_comparison_study(folder: Path):
    """A ``compare --out`` directory written before run.json (its ``comparison.json``)."""
    from reachlens.cli._common import CLIError
    from reachlens.store import read_json

    meta = read_json(folder / "comparison.json", "comparison file")
    if "base_dir" not in meta:
        raise CLIError(f"{str(folder)!r} was written by an older `reachlens compare` that did not record its audit "
                       "directories; pass the two audit directories instead (base first)")
    return _comparison_study(folder, meta)
