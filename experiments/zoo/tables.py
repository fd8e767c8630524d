"""The zoo's lineage and trajectory tables, with intervals, from the model cards' per-question audits.

    python experiments/zoo/tables.py --task arith_hard --out runs/zoo-tables

Reads every card's audit of ``--task`` (``card.json``: n=300 test questions, greedy deployment, K=64 at
T=0.8, each reproduced by ``check_cards.py``) and writes

* ``lineage.md``: each model beside its parent: D, O_64 and pass@1 with 95% Wilson intervals (pass@1: the
  question-resampling bootstrap), and the paired differences to the parent with paired bootstrap 95%
  intervals over questions (the same questions on both sides); a model trained in another prompt format
  (the SFT line, "verbose") has a second row ``NAME [verbose]`` measured in it, compared with its parent
  in the parent's native format (the prompt-format control);
* ``trajectory.md`` and ``trajectory.html``: the GRPO run's snapshots (``grpo-sN``), the base as step 0
  and ``grpo`` as its last step: D, O_64, pass@1 and pass@8 against the RL step, with intervals
  ("realization and reachability over training");

and prints both tables. No model is run: the numbers are the cards'.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from reachlens.models.zoo import zoo_entries
from reachlens.studies.metrics import pass_at_k
from reachlens.stats import paired_bootstrap_ci, wilson_interval


def wilson(successes: int, n: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion, as floats."""
    lo, hi = wilson_interval(successes, n)
    return float(lo), float(hi)


def per_question(card: dict) -> pd.DataFrame:
    q = pd.DataFrame(card["questions"])
    q["reachable"] = q["n_correct"] > 0
    q["pass1"] = q["n_correct"] / card["k"]
    q["pass8"] = [pass_at_k(card["k"], int(c), 8) for c in q["n_correct"]]
    return q.set_index("question_id")


def fmt_ci(value: float, lo: float, hi: float, signed: bool = False) -> str:
    s = f"{value:+.3f}" if signed else f"{value:.3f}"
    return f"{s} [{lo:+.3f}, {hi:+.3f}]" if signed else f"{s} [{lo:.3f}, {hi:.3f}]"


def level(q: pd.DataFrame, col: str, seed: int = 0) -> str:
    if q[col].dtype == bool:
        return fmt_ci(float(q[col].mean()), *wilson(int(q[col].sum()), len(q)))
    lo, hi = paired_bootstrap_ci(q[col].to_numpy(float), n_boot=4000, seed=seed)
    return fmt_ci(float(q[col].mean()), lo, hi)


def delta(q: pd.DataFrame, ref: pd.DataFrame, col: str, seed: int = 0) -> str:
    d = q[col].astype(float) - ref.loc[q.index, col].astype(float)
    lo, hi = paired_bootstrap_ci(d.to_numpy(), n_boot=4000, seed=seed)
    return fmt_ci(float(d.mean()), lo, hi, signed=True)


def markdown(df: pd.DataFrame) -> str:
    head = "| " + " | ".join(df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    return "\n".join([head, rule, *("| " + " | ".join(map(str, r)) + " |" for r in df.itertuples(index=False))])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="arith_hard", choices=["arith", "arith_hard"])
    ap.add_argument("--out", default="runs/zoo-tables")
    args = ap.parse_args(argv)
    entries = {e.name: e for e in zoo_entries() if args.task in e.card.get("audits", {})}
    qs = {name: per_question(e.card["audits"][args.task]) for name, e in entries.items()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    # the prompt-format control: a model trained in another format, measured in it too (card key TASK@FORMAT),
    # compared with its parent in the parent's own native format
    native = {name: e.training.get("prompt_format", "qa") for name, e in entries.items()}
    for name, e in entries.items():
        key = f"{args.task}@{native[name]}"
        if key in e.card["audits"]:
            qs[f"{name} [{native[name]}]"] = per_question(e.card["audits"][key])

    rows = []
    for name in qs:
        base_name = name.split(" [")[0]
        e = entries[base_name]
        if "snapshot_step" in e.training:
            continue
        parent = Path(e.training.get("parent", "")).name if e.training.get("parent") else ""
        if parent and " [" in name and native.get(parent, "qa") != "qa":
            parent = f"{parent} [{native[parent]}]"
        q = qs[name]
        row = {"model": name, "recipe": e.training.get("recipe", "?"), "parent": parent or "-",
               "D": level(q, "realized"), "O_64": level(q, "reachable"), "pass@1": level(q, "pass1")}
        for col, label in (("realized", "ΔD"), ("reachable", "ΔO_64"), ("pass1", "Δpass@1")):
            row[label] = delta(q, qs[parent], col) if parent in qs else "-"
        rows.append(row)
    lineage = pd.DataFrame(rows)

    steps = {"base": 0}
    for name, e in entries.items():
        if e.training.get("trajectory_of") == "grpo":
            steps[name] = e.training["snapshot_step"]
    if "grpo" in entries:
        steps["grpo"] = entries["grpo"].training["steps"]
    traj_rows, plot = [], []
    for name, step in sorted(steps.items(), key=lambda kv: kv[1]):
        if name not in qs:
            continue
        q = qs[name]
        traj_rows.append({"step": step, "model": name, "D": level(q, "realized"), "O_64": level(q, "reachable"),
                          "pass@1": level(q, "pass1"), "pass@8": level(q, "pass8"),
                          "ΔD vs base": delta(q, qs["base"], "realized") if name != "base" else "-",
                          "ΔO_64 vs base": delta(q, qs["base"], "reachable") if name != "base" else "-"})
        point = {"step": step}
        for col in ("realized", "reachable"):
            point[col] = float(q[col].mean())
            point[col + "_lo"], point[col + "_hi"] = wilson(int(q[col].sum()), len(q))
        for col in ("pass1", "pass8"):
            point[col] = float(q[col].mean())
            point[col + "_lo"], point[col + "_hi"] = paired_bootstrap_ci(q[col].to_numpy(float), n_boot=4000, seed=0)
        plot.append(point)
    trajectory = pd.DataFrame(traj_rows)

    title = {"arith": "arith test split (three tiers)", "arith_hard": "arith_hard test split (3-6 operations)"}[args.task]
    note = (f"{title}, n=300, \"qa\" prompts, greedy deployment (D), K=64 samples at T=0.8 (O_64, pass@k); "
            "95% intervals: Wilson for D and O_64, question bootstrap for pass@k, paired question bootstrap for Δ.")
    (out / "lineage.md").write_text(f"{note}\n\n{markdown(lineage)}\n")
    (out / "trajectory.md").write_text(f"{note}\n\n{markdown(trajectory)}\n")
    if plot:
        write_figure(pd.DataFrame(plot), out / "trajectory.html", note, args.task)
    print(note, "\n\nLineage\n\n" + markdown(lineage) + f"\n\nTrajectory (the GRPO run, on {args.task})\n\n"
          + markdown(trajectory))
    return 0


def write_figure(p: pd.DataFrame, path: Path, note: str, task: str) -> None:
    import plotly.graph_objects as go

    fig = go.Figure()
    names = {"realized": "D (realized, greedy)", "reachable": "O_64 (reachable, 64 samples)",
             "pass1": "pass@1 (T=0.8)", "pass8": "pass@8"}
    for col, name in names.items():
        fig.add_scatter(x=p["step"], y=p[col], name=name, mode="lines+markers",
                        error_y={"type": "data", "symmetric": False, "array": p[col + "_hi"] - p[col],
                                 "arrayminus": p[col] - p[col + "_lo"]})
    fig.update_layout(title=f"Realization and reachability over training (the GRPO run, on {task})",
                      xaxis_title="RL optimizer step (0 = base)", yaxis_title="share of 300 test questions",
                      yaxis_range=[0, 1], height=500, width=820,
                      annotations=[{"text": note.replace("; 95%", ";<br>95%"), "xref": "paper", "yref": "paper",
                                    "x": 0, "y": -0.42,
                                    "showarrow": False, "font": {"size": 10}, "align": "left"}],
                      margin={"b": 150})
    path.write_text(fig.to_html(include_plotlyjs=True, full_html=True))


if __name__ == "__main__":
    raise SystemExit(main())
