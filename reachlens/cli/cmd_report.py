"""``reachlens report DIR...``: the self-contained HTML report and Markdown summary of any run.

DIR is any run directory, rendered by its kind (:func:`reachlens.report.report_run`): a training audit
(``reachlens demo``, ``experiments/rlvr_audit.py``), a comparison (``reachlens compare --out``), one audit,
a routing run, a recognition run, a causal sweep or a control; or two or more audit directories: the first
is the base, each other one is compared with it. The report is written into DIR (or ``--out``), atomically; a
``report.html`` or ``report.md`` there that reachlens did not write is refused unless ``--force``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from reachlens.cli._common import echo

NAME = "report"
HELP = "write report.html and report.md for any run directory, or for audit directories (base first)"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("dirs", nargs="+", help="a run directory (audit, comparison, routing, recognition, study, ...), "
                                           "or audit directories (base first)")
    p.add_argument("--out", default=None, help="where to write the report (default: the run directory)")
    p.add_argument("--force", action="store_true",
                   help="replace a report.html / report.md there that reachlens did not write")
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.cli._common import CLIError
    from reachlens.report import report_run, write_report
    from reachlens.store import read_record
    from reachlens.studies import StudyView

    for d in args.dirs:
        if not Path(d).is_dir():
            raise CLIError(f"{d!r} is not a directory")
    if len(args.dirs) > 1:
        study = StudyView.of_audits(args.dirs)
        unfinished = [s for s in (read_record(d).status for d in args.dirs) if s != "complete"]
        html_path, md_path = write_report(study, args.out or Path(args.dirs[0]).parent / "report", force=args.force,
                                          status=unfinished[0] if unfinished else "complete")
    else:
        html_path, md_path = report_run(args.dirs[0], args.out, force=args.force)
    echo(f"report: {html_path}\nsummary: {md_path}")
    return 0
