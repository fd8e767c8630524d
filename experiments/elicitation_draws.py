"""Training-based elicitation over draws of demonstrations: the table and figure of issue 57, item 4.

    python experiments/elicitation_draws.py --cell gold='/work/eli10/gold-s*' --cell weak='/work/eli10/weak-s*' \
        --out runs/elicitation-draws

Each ``--cell NAME=GLOB`` names the elicitation runs of one cell (``reachlens elicit``, one run a draw: the same
model, control, test questions and budget, another ``--train-seed``: other demonstrations and fine-tune seed). For
each cell and metric (D, O_K, and both by verified solutions) it prints and writes (``draws.md``, ``draws.csv``):
the model's uplift, the control's, and their difference, each as the mean over draws with the between-draw sd and
the t interval over draws (:func:`reachlens.studies.draws.draws_table`), the draws' values, and the smallest
difference between two cells of this design that the measured sd lets 80 % power detect. ``draws.html`` is the
figure: per cell, each draw's difference (model minus control) and the mean with its interval, in D and in D by
verified solutions.
"""

from __future__ import annotations

import argparse
import glob
import sys
from pathlib import Path

import pandas as pd

from reachlens import read_run
from reachlens.studies.draws import DRAW_SIDES, draws_table

FIGURE_METRICS = ("D", "D^trace")


def cells_of(specs: list[str]) -> dict[str, list]:
    cells = {}
    for spec in specs:
        name, sep, pattern = spec.partition("=")
        paths = sorted(glob.glob(pattern), key=lambda p: (len(p), p))  # -s2 before -s10
        paths = [p for p in paths if Path(p, "run.json").is_file()]
        if not sep or len(paths) < 2:
            raise SystemExit(f"--cell {spec!r}: needs NAME=GLOB matching at least 2 elicitation runs, found {len(paths)}")
        cells[name] = [read_run(p) for p in paths]
    return cells


def formatted(table: pd.DataFrame) -> pd.DataFrame:
    """The table for reading: each side as mean (sd) [interval], the draws' values, the MDE."""
    out = table[["cell", "n_demos", "metric", "n_draws"]].copy()
    for side in DRAW_SIDES:
        out[side] = [f"{m:+.3f} ({s:.3f}) [{lo:+.3f}, {hi:+.3f}]" for m, s, lo, hi in
                     zip(table[side], table[f"{side}_sd"], table[f"{side}_lo"], table[f"{side}_hi"])]
    out["difference per draw"] = [", ".join(f"{v:+.2f}" for v in vs) for vs in table["difference_draws"]]
    out["MDE between two cells"] = [f"{v:.3f}" if v == v else "-" for v in table["difference_mde"]]
    return out


def figure(table: pd.DataFrame, control: str):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    metrics = [m for m in FIGURE_METRICS if m in set(table["metric"])]
    fig = make_subplots(rows=1, cols=len(metrics), shared_yaxes=True,
                        subplot_titles=[f"{m}: model minus {control}" for m in metrics])
    for col, metric in enumerate(metrics, start=1):
        t = table[table["metric"] == metric]
        for row in t.itertuples():
            label = f"{row.cell} ({row.n_demos} demos)"
            fig.add_trace(go.Scatter(x=row.difference_draws, y=[label] * row.n_draws, mode="markers",
                                     marker=dict(color="#9ca3af", size=7), name="one draw",
                                     showlegend=col == 1 and row.Index == t.index[0]), row=1, col=col)
        fig.add_trace(go.Scatter(x=t["difference"], y=[f"{c} ({n} demos)" for c, n in zip(t["cell"], t["n_demos"])],
                                 mode="markers", marker=dict(color="black", symbol="diamond", size=10),
                                 name="mean over draws (95 % t interval)", showlegend=col == 1,
                                 error_x=dict(type="data", symmetric=False, array=t["difference_hi"] - t["difference"],
                                              arrayminus=t["difference"] - t["difference_lo"])), row=1, col=col)
        fig.add_vline(x=0, line_color="#888", row=1, col=col)
    n = int(table["n_draws"].max())
    fig.update_layout(title=f"Elicitation over {n} draws of demonstrations: uplift minus {control}'s", height=260 + 45 * table["cell"].nunique(), width=1150,
                      legend=dict(orientation="h", yanchor="bottom", y=1.12, xanchor="right", x=1),
                      margin=dict(l=170, r=30, t=120, b=70))
    fig.update_xaxes(title_text="difference in uplift (share of questions)")
    return fig


def main(argv: list[str] | None = None) -> pd.DataFrame:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cell", action="append", required=True, help="NAME=GLOB of a cell's elicitation runs")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    cells = cells_of(args.cell)
    table = draws_table(cells)
    controls = {r.summary().get("control", "control") for runs in cells.values() for r in runs}
    control = controls.pop() if len(controls) == 1 else "the control"
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "draws.csv", index=False)
    shown = formatted(table)
    (args.out / "draws.md").write_text(f"`python experiments/elicitation_draws.py {' '.join(argv)}`\n\n"
                                       + shown.to_markdown(index=False) + "\n")
    figure(table, control).write_html(args.out / "draws.html", include_plotlyjs=True, config={"displayModeBar": False})
    print(shown.to_string(index=False), flush=True)
    return table


if __name__ == "__main__":
    main()
