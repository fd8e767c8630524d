"""The README's figure: the "Realized vs reachable" chart of a training study's report, as a PNG.

    reachlens demo --out runs/demo
    python docs/_figure.py runs/demo docs/img/realized-vs-reachable.png

It draws the report's own figure (:func:`reachlens.report.accuracy_bars`) over the study's lineage, the
checkpoints its pairs compare, read from the study's audits (so it can be drawn as soon as those audits are
complete, while the study's controls still run), and writes it with plotly's static export, which renders the
figure in headless Chromium through kaleido.
"""

from __future__ import annotations

import sys
from pathlib import Path

from reachlens import read_run
from reachlens.report import accuracy_bars
from reachlens.store import read_record
from reachlens.studies import StudyPlan
from reachlens.studies.training_audit import StudyLayout


def main(study_dir: str, png: str) -> int:
    record = read_record(study_dir)
    plan = StudyPlan.from_dict({**record.options, "protocol": record.protocol.to_dict()})
    lineage = {name: read_run(StudyLayout(Path(study_dir)).audit(name)) for name in plan.paired_models}
    fig = accuracy_bars(lineage)
    fig.update_layout(margin=dict(l=70, r=30, t=70, b=60), legend=dict(orientation="h", y=-0.16),
                      title=f"Realized vs reachable per checkpoint ({plan.protocol.task}, n={plan.n}, "
                            f"K={plan.protocol.k}; 95 % Wilson intervals)")
    fig.write_image(png, width=1000, height=480, scale=1)
    print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
