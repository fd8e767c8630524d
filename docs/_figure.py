"""The README's figures: the "Realized vs reachable" chart of a training study's report, or of audits, as a PNG.

    reachlens demo --out runs/demo
    python docs/_figure.py runs/demo docs/img/realized-vs-reachable.png
    python docs/_figure.py --audits base=runs/real/base grpo=runs/real/grpo sft=runs/real/sft \\
        --title "SmolLM2-135M-Instruct" docs/img/real-realized-vs-reachable.png

It draws the report's own figure (:func:`reachlens.report.accuracy_bars`) over the study's lineage, the
checkpoints its pairs compare, read from the study's audits (so it can be drawn as soon as those audits are
complete, while the study's controls still run), or over audit directories named on the command line (base
first; their protocols must match, as ``reachlens compare`` requires), and writes it with plotly's static
export, which renders the figure in headless Chromium through kaleido.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reachlens import read_run
from reachlens.report import accuracy_bars
from reachlens.store import read_record
from reachlens.studies import StudyPlan
from reachlens.studies.training_audit import StudyLayout


def study_lineage(study_dir: str) -> tuple[dict, str]:
    record = read_record(study_dir)
    plan = StudyPlan.from_dict({**record.options, "protocol": record.protocol.to_dict()})
    lineage = {name: read_run(StudyLayout(Path(study_dir)).audit(name)) for name in plan.paired_models}
    return lineage, f"{plan.protocol.task}, n={plan.n}, K={plan.protocol.k}"


def audit_lineage(pairs: list[str]) -> tuple[dict, str]:
    lineage = {}
    for pair in pairs:
        name, sep, folder = pair.partition("=")
        if not sep:
            raise SystemExit(f"--audits takes NAME=DIR, got {pair!r}")
        lineage[name] = read_run(folder)
    first = next(iter(lineage.values()))
    for name, run in lineage.items():
        if run.protocol != first.protocol:
            raise SystemExit(f"--audits: {name}'s protocol differs from the first audit's; draw only comparable runs")
    return lineage, f"{first.protocol.task}, n={first.summary()['n']}, K={first.protocol.k}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+", help="STUDY_DIR OUT.png, or OUT.png with --audits")
    ap.add_argument("--audits", nargs="+", metavar="NAME=DIR", help="audit directories to draw, base first")
    ap.add_argument("--title", default="", help="a prefix of the figure's title (the model, say)")
    args = ap.parse_args(argv)
    if args.audits:
        (png,) = args.paths
        lineage, what = audit_lineage(args.audits)
    else:
        study_dir, png = args.paths
        lineage, what = study_lineage(study_dir)
    fig = accuracy_bars(lineage)
    head = f"{args.title}: realized" if args.title else "Realized"
    fig.update_layout(margin=dict(l=70, r=30, t=70, b=60), legend=dict(orientation="h", y=-0.16),
                      title=f"{head} vs reachable per checkpoint ({what}; 95 % Wilson intervals)")
    fig.write_image(png, width=1000, height=480, scale=1)
    print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
