"""The README's figure: the "Realized vs reachable" chart of a training study's report, as a PNG.

    reachlens demo --out runs/demo
    python docs/_figure.py runs/demo docs/img/realized-vs-reachable.png

It draws the report's own figure (:func:`reachlens.report.accuracy_bars` over the study's lineage, the
checkpoints its pairs compare) and writes it with plotly's static export, which renders the figure in headless
Chromium through kaleido.
"""

from __future__ import annotations

import sys

from reachlens import read_run
from reachlens.report import accuracy_bars


def main(study_dir: str, png: str) -> int:
    study = read_run(study_dir)
    lineage = {name: study.audits[name] for name in study.plan.paired_models}
    fig = accuracy_bars(lineage)
    fig.update_layout(margin=dict(l=70, r=30, t=70, b=60), legend=dict(orientation="h", y=-0.16),
                      title=f"Realized vs reachable per checkpoint ({study.protocol.task}, n={study.plan.n}, "
                            f"K={study.protocol.k}; 95 % Wilson intervals)")
    fig.write_image(png, width=1000, height=480, scale=1)
    print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
