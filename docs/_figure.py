"""The README's figures: the "Realized vs reachable" chart of a training study's report, or of audits, as a PNG.

    reachlens demo --out runs/demo
    python docs/_figure.py runs/demo docs/img/realized-vs-reachable.png
    python docs/_figure.py --audits base=runs/real/base grpo=runs/real/grpo sft=runs/real/sft \\
        --title "SmolLM2-135M-Instruct" docs/img/real-realized-vs-reachable.png
    python docs/_figure.py --trace --audits base=runs/trace/base grpo=runs/trace/grpo ... docs/img/trace-reach.png

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


def verified_bars(audits: dict):
    """D and O_K beside D^trace and O_K^trace (a right answer on a valid worked solution; hatched) per checkpoint,
    with 95 % Wilson intervals, and each O_K's lucky-guess null (its mean as a black tick)."""
    import plotly.graph_objects as go

    names = list(audits)
    s = {n: audits[n].summary() for n in names}
    k = next(iter(audits.values())).k
    fig = go.Figure()
    bars = (("D", "D: deployed (greedy)", "#31a354", ""),
            ("D_trace", "D^trace: deployed, valid solution", "#31a354", "/"),
            (f"O_K", f"O_{k}: an answer reached in {k} samples", "#3182bd", ""),
            ("O_K_trace", f"O_{k}^trace: a valid solution reached", "#3182bd", "/"))
    for key, label, color, hatch in bars:
        vals = [s[n][key] for n in names]
        lo, hi = zip(*(s[n][f"{key}_ci"] for n in names))
        fig.add_trace(go.Bar(name=label, x=names, y=vals, marker_color=color, marker_pattern_shape=hatch,
                             offsetgroup=key, error_y=dict(type="data", symmetric=False, thickness=1.2, width=4,
                                                           array=[h - v for v, h in zip(vals, hi)],
                                                           arrayminus=[v - x for v, x in zip(vals, lo)]),
                             text=[f"{v:.0%}" for v in vals], textposition="inside", insidetextanchor="end",
                             textangle=0))
    fig.add_trace(go.Bar(name=f"lucky-guess null of O_{k} (another question's gold)", x=names, offsetgroup="O_K",
                         y=[s[n]["O_K_null"] for n in names], marker_color="rgba(0,0,0,0.55)", width=0.12,
                         showlegend=True))
    fig.update_layout(barmode="group", xaxis_title="checkpoint", yaxis_title="share of questions",
                      yaxis_tickformat=".0%", uniformtext=dict(minsize=9, mode="hide"))
    return fig


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+", help="STUDY_DIR OUT.png, or OUT.png with --audits")
    ap.add_argument("--audits", nargs="+", metavar="NAME=DIR", help="audit directories to draw, base first")
    ap.add_argument("--title", default="", help="a prefix of the figure's title (the model, say)")
    ap.add_argument("--trace", action="store_true", help="draw D^trace and O_K^trace beside D and O_K, and the "
                    "lucky-guess null (audits trace-graded: an arith or gsm8k task's, or after rescore --trace)")
    args = ap.parse_args(argv)
    if args.audits:
        (png,) = args.paths
        lineage, what = audit_lineage(args.audits)
    else:
        study_dir, png = args.paths
        lineage, what = study_lineage(study_dir)
    fig = verified_bars(lineage) if args.trace else accuracy_bars(lineage)
    head = f"{args.title}: realized" if args.title else "Realized"
    by = "<br>by answers and by verified solutions" if args.trace else ""
    fig.update_layout(margin=dict(l=70, r=30, t=90 if args.trace else 70, b=60), legend=dict(orientation="h", y=-0.16),
                      title=f"{head} vs reachable per checkpoint{by} ({what}; 95 % Wilson intervals)")
    fig.write_image(png, width=1000, height=480, scale=1)
    print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
