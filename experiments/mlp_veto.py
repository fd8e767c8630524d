"""The MLP-veto case study: a model recognizes the right answer but generates a wrong one; which block vetoes it?

    python experiments/mlp_veto.py --model zoo:base --task arith_mc --n 300 --out runs/mlp_veto \\
        --prune-layers 2 --prune-fraction 0.7 --planted zoo:veto

For each case (each ``--model``, plus a magnitude-pruned copy of the first one when
``--prune-layers`` is given):

1. recognition (lm-eval ``acc`` over the four ``arith_mc`` worked solutions) and greedy generation of
   every question; the failure set (recognized, generated wrong) and the healthy panel (right both
   ways) are fixed by the rule before any intervention and saved (``CASE/sets.json``);
2. a zero-ablation sweep over every layer's MLP, attention and whole layer: repair (failures now
   generated right) and break (healthy questions now wrong); the best layer is the MLP ablation with
   the largest repair minus break;
3. steering at the best layer's MLP output along the mean-difference direction, ``-alpha v``
   (rescue) and ``+alpha v`` (induction), alpha in multiples of the difference's norm, with a random
   unit vector as control;
4. the top-k MLP units of the best layer (ranked by their share of the difference along v): repair
   of silencing only them, as a fraction of the whole-MLP repair, beside k random units.

The planted case (``--planted zoo:veto``, the positive control built by
``experiments/zoo/plant_veto.py``): a model with one known MLP block trained to suppress the correct answer
on a defined subset (its ``training.json`` names the block and the subset). Its failure set is the failures
the plant caused: subset questions the planted model recognizes but does not realize while its parent
realizes them; its healthy panel is the usual one. The same zero-ablation sweep must find the block:
repair >= 80% of those failures at the planted MLP, <= 10% at every other block (``OUT/planted.md``).

Writes ``OUT/cases.md`` / ``cases.csv`` (one row per case), per-case directories (``CASE/sets.json``, and
one run directory per sweep: ``CASE/silence``, ``CASE/steer``, ``CASE/units``) with every table,
and ``OUT/report.md`` + ``OUT/figures.html`` (plotly, self-contained). One torch thread by default
(the machine is shared); ``--max-failures`` / ``--max-healthy`` cap the sets to bound the run time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from reachlens.models.pruning import PruneConfig, prune_checkpoint
from reachlens.models import load_model
from reachlens.protocol import Protocol
from reachlens.records import markdown_table
from reachlens.report.page import html_table, write_page
from reachlens.store import write_csv
from reachlens.studies.causal import (
    best_alpha,
    best_layer,
    default_alphas,
    mean_difference_direction,
    silence_sweep,
    steer_sweep,
    units_sweep,
)
from reachlens.studies.recognition import (
    FailureRule,
    FailureSetTooSmall,
    TaskSpec,
    compare_modes,
    select_sets,
)


def floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x.strip()]


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def run_case(name: str, spec: str, task_spec: TaskSpec, args: argparse.Namespace, out: Path) -> dict:
    """Every measurement of one model; returns its row of the case table and its tables for figures."""
    t0 = time.perf_counter()
    task = task_spec.load()
    model = load_model(spec)
    result = compare_modes(model, task, Protocol.greedy(task_spec.name, max_new_tokens=args.max_new_tokens))
    case_dir = out / name
    case_dir.mkdir(parents=True, exist_ok=True)
    write_csv(case_dir / "questions.csv", result.questions.drop(columns=["deployed_text"]))
    s = result.summary()
    row = {"case": name, "model": spec, "n": s["n"], "acc": s["acc"], "acc_norm": s["acc_norm"],
           "D": s["D"], "recognized_not_realized": s["recognized_not_realized"]}
    rule = FailureRule("acc", args.min_failures, args.max_failures, args.max_healthy)
    try:
        sets = select_sets(result, rule, task_spec)
    except FailureSetTooSmall as err:
        print(f"[{name}] {err}", flush=True)
        return {"row": {**row, "failure_set": s["recognized_not_realized"], "note": "failure set below the minimum"}}
    sets.save(case_dir / "sets.json")
    print(f"[{name}] acc={s['acc']:.3f} D={s['D']:.3f} failure={len(sets.failure)} "
          f"healthy={len(sets.healthy)} ({time.perf_counter() - t0:.0f}s)", flush=True)

    sweep = silence_sweep(model, task, sets)
    sweep.save(case_dir / "silence")
    layer = best_layer(sweep.table, "mlp")
    at = sweep.table[sweep.table["layer"] == layer].set_index("component")
    print(f"[{name}] silence sweep done, best MLP layer {layer} ({time.perf_counter() - t0:.0f}s)", flush=True)

    direction = mean_difference_direction(model, task, sets, layer, "mlp_out")
    steer = steer_sweep(model, task, sets, layer, alphas=default_alphas(direction, args.alpha_multiples),
                        direction=direction, control_seed=0)
    steer.save(case_dir / "steer")
    alpha = best_alpha(steer.table)
    st = steer.table[(steer.table["vector"] == "direction") & (steer.table["alpha"] == alpha)].iloc[0]
    print(f"[{name}] steering done, best alpha {alpha:.3g} ({time.perf_counter() - t0:.0f}s)", flush=True)

    units = units_sweep(model, task, sets, layer, ks=args.ks, block_repair=float(at.loc["mlp", "repair"]))
    units.save(case_dir / "units")
    k_main = 32 if 32 in args.ks else args.ks[-1]
    u = units.table.set_index("k").loc[k_main]
    row.update({
        "failure_set": len(sets.failure), "healthy_panel": len(sets.healthy), "best_layer": layer,
        "repair_mlp": float(at.loc["mlp", "repair"]), "repair_attn": float(at.loc["attn", "repair"]),
        "repair_layer": float(at.loc["layer", "repair"]), "healthy_break_mlp": float(at.loc["mlp", "break"]),
        f"top{k_main}_recovery": float(u["recovery"]), f"random{k_main}_recovery": float(u["random_recovery"]),
        "best_alpha_rel": float(st["alpha_rel"]), "rescue": float(st["rescue"]), "rescue_break": float(st["rescue_break"]),
        "induction": float(st["induction"]), "seconds": round(time.perf_counter() - t0),
    })
    print(f"[{name}] done ({row['seconds']}s)", flush=True)
    return {"row": row, "sweep": sweep.table, "steer": steer.table, "units": units.table}


SUBSETS = {"answer < 0": lambda q: int(q.gold) < 0}
"""The subset rules a planted model's ``training.json`` may name (``planted.subset``)."""


def run_planted_case(spec: str, task_spec: TaskSpec, args: argparse.Namespace, out: Path) -> dict:
    """The positive control: the sweep on a model whose veto block is known (see the module docstring)."""
    import dataclasses

    from reachlens.models.zoo import zoo_root

    t0 = time.perf_counter()
    folder = zoo_root() / spec.removeprefix("zoo:") if spec.startswith("zoo:") else Path(spec)
    training = json.loads((folder / "training.json").read_text())
    plant = training["planted"]
    parent_spec = f"zoo:{Path(training['parent']).name}"
    in_subset = SUBSETS[plant["subset"]]
    task = task_spec.load()
    model = load_model(spec)
    parent = load_model(parent_spec)
    protocol = Protocol.greedy(task_spec.name, max_new_tokens=args.max_new_tokens)
    result = compare_modes(model, task, protocol)
    before = compare_modes(parent, task, protocol)
    name = "planted-" + spec.replace("zoo:", "").replace("/", "_").strip("_.")
    case_dir = out / name
    case_dir.mkdir(parents=True, exist_ok=True)
    q = result.questions.set_index("question_id")
    p = before.questions.set_index("question_id")
    subset = [x.question_id for x in task.questions if in_subset(x)]
    rows = []
    for label, ids in (("subset", subset), ("rest", [x.question_id for x in task.questions if not in_subset(x)])):
        rows.append({"questions": label, "n": len(ids),
                     "parent recognition": float(p.loc[ids, "rec_correct"].mean()),
                     "planted recognition": float(q.loc[ids, "rec_correct"].mean()),
                     "parent D": float(p.loc[ids, "realized"].mean()),
                     "planted D": float(q.loc[ids, "realized"].mean())})
    effect = pd.DataFrame(rows)
    caused = [i for i in subset if q.loc[i, "rec_correct"] and q.loc[i, "deployed_scored"] and not q.loc[i, "realized"]
              and p.loc[i, "realized"]]
    rule = FailureRule("acc", args.min_failures, args.max_failures, args.max_healthy)
    sets = select_sets(result, rule, task_spec)
    sets = dataclasses.replace(sets, failure=tuple(caused[: args.max_failures]),
                               counts={**sets.counts, "n_failure": len(caused[: args.max_failures]),
                                       "n_failure_candidates": len(caused), "failure_rule": "planted: subset "
                                       f"({plant['subset']}), recognized, not realized, realized by the parent"})
    sets.save(case_dir / "sets.json")
    print(f"[{name}] subset {len(subset)}, failures the plant caused {len(caused)}, healthy {len(sets.healthy)} "
          f"({time.perf_counter() - t0:.0f}s)", flush=True)
    sweep = silence_sweep(model, task, sets)
    sweep.save(case_dir / "silence")
    t = sweep.table
    mlp = t[(t["component"] == "mlp") & (t["layer"] >= 0)].set_index("layer")
    planted_layer = int(plant["layer"])
    others = mlp.drop(index=planted_layer)
    verdict = {
        "case": name, "model": spec, "parent": parent_spec, "planted_layer": planted_layer, "subset": plant["subset"],
        "n_subset": len(subset), "failures_caused": len(caused), "failure_set": len(sets.failure),
        "healthy_panel": len(sets.healthy), "repair_planted": float(mlp.loc[planted_layer, "repair"]),
        "break_planted": float(mlp.loc[planted_layer, "break"]), "max_repair_elsewhere": float(others["repair"].max()),
        "best_layer_found": best_layer(t, "mlp"),
    }
    verdict["found"] = bool(verdict["repair_planted"] >= 0.8 and verdict["max_repair_elsewhere"] <= 0.1)
    md = ["# Planted veto (positive control)", "", f"Model `{spec}` (parent `{parent_spec}`): {plant['construction']}.", "",
          "## What the plant did (arith_mc test questions)", "", markdown_table(effect, missing="-"), "",
          f"## Zero-ablation sweep on the failures the plant caused (n={len(sets.failure)}) and the healthy panel "
          f"(n={len(sets.healthy)})", "", markdown_table(t.drop(columns=["condition"]), missing="-"), "",
          "## Verdict", "", markdown_table(pd.DataFrame([verdict]), missing="-"), ""]
    (case_dir / "planted.md").write_text("\n".join(md))
    (out / "planted.md").write_text("\n".join(md))
    write_csv(case_dir / "effect.csv", effect)
    print(f"[{name}] repair at the planted MLP L{planted_layer}: {verdict['repair_planted']:.3f}, elsewhere at most "
          f"{verdict['max_repair_elsewhere']:.3f}; found={verdict['found']} ({time.perf_counter() - t0:.0f}s)", flush=True)
    return {"row": {"case": name, "model": spec, "n": len(task), "acc": result.summary()["acc"],
                    "D": result.summary()["D"], "failure_set": len(sets.failure),
                    "healthy_panel": len(sets.healthy), "best_layer": verdict["best_layer_found"],
                    "repair_mlp": float(mlp.loc[verdict["best_layer_found"], "repair"]),
                    "healthy_break_mlp": float(mlp.loc[verdict["best_layer_found"], "break"]),
                    "note": f"planted at L{planted_layer}; found={verdict['found']}"},
            "sweep": t, "verdict": verdict, "effect": effect}


def figures(cases: dict[str, dict]) -> list:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figs = []
    for name, c in cases.items():
        if "sweep" not in c:
            continue
        t = c["sweep"][c["sweep"]["layer"] >= 0]
        fig = make_subplots(rows=1, cols=2, subplot_titles=("repair (failure set)", "break (healthy panel)"))
        for comp in ("mlp", "attn", "layer"):
            tc = t[t["component"] == comp]
            fig.add_bar(x=tc["layer"], y=tc["repair"], name=comp, legendgroup=comp, row=1, col=1)
            fig.add_bar(x=tc["layer"], y=tc["break"], name=comp, legendgroup=comp, showlegend=False, row=1, col=2)
        fig.update_layout(title=f"{name}: zero-ablation by layer and component", barmode="group",
                          xaxis_title="layer", xaxis2_title="layer", height=380)
        figs.append(fig)
        if "steer" not in c:  # the planted case: the sweep only
            continue
        s = c["steer"]
        fig = go.Figure()
        for vec, dash in (("direction", "solid"), ("random", "dot")):
            sv = s[s["vector"] == vec]
            fig.add_scatter(x=sv["alpha_rel"], y=sv["rescue"], name=f"rescue -alpha {vec}", line={"dash": dash})
            fig.add_scatter(x=sv["alpha_rel"], y=sv["induction"], name=f"induction +alpha {vec}", line={"dash": dash})
        fig.update_layout(title=f"{name}: steering at the best layer's MLP output", xaxis_title="alpha / ||mean difference||",
                          yaxis_title="rate", height=380)
        figs.append(fig)
        u = c["units"]
        fig = go.Figure()
        fig.add_scatter(x=u["k"], y=u["recovery"], name="top-k units", mode="lines+markers")
        fig.add_scatter(x=u["k"], y=u["random_recovery"], name="random k units", mode="lines+markers")
        fig.update_layout(title=f"{name}: share of the whole-MLP repair recovered by k units", xaxis_title="k",
                          xaxis_type="log", yaxis_title="recovery", height=380)
        figs.append(fig)
    return figs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", required=True, help="zoo:NAME or a folder (repeatable)")
    ap.add_argument("--task", default="arith_mc")
    ap.add_argument("--data", default=None)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--min-failures", type=int, default=8)
    ap.add_argument("--max-failures", type=int, default=64)
    ap.add_argument("--max-healthy", type=int, default=64)
    ap.add_argument("--alpha-multiples", type=floats, default=[0.5, 1.0, 2.0, 4.0, 8.0],
                    help="alphas as multiples of the mean difference's norm (the unhooked baseline is the "
                         "silence sweep's 'none' row)")
    ap.add_argument("--ks", type=ints, default=[8, 32])
    ap.add_argument("--prune-layers", type=ints, default=None, help="also study the first model with these layers pruned")
    ap.add_argument("--prune-fraction", type=float, default=0.5)
    ap.add_argument("--prune-components", default="mlp")
    ap.add_argument("--planted", action="append", default=[],
                    help="a planted-veto model (zoo:veto) to run as the positive control beside the cases (repeatable)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    task_spec = TaskSpec(args.task, args.data, "test", args.n)
    specs = {m.replace("zoo:", "").replace("/", "_").strip("_.") or m: m for m in args.model}
    if args.prune_layers:
        config = PruneConfig(tuple(args.prune_layers), args.prune_fraction, tuple(args.prune_components.split(",")))
        tag = f"pruned-L{'-'.join(map(str, config.layers))}-{config.fraction:g}"
        folder = out / "models" / tag
        if not (folder / "pruning.json").is_file():
            prune_checkpoint(args.model[0], folder, config)
        specs[tag] = str(folder)
    cases = {name: run_case(name, spec, task_spec, args, out) for name, spec in specs.items()}
    for spec in args.planted:
        c = run_planted_case(spec, task_spec, args, out)
        cases[c["row"]["case"]] = c
    table = pd.DataFrame([c["row"] for c in cases.values()])
    write_csv(out / "cases.csv", table)
    md = markdown_table(table, missing="-")
    (out / "cases.md").write_text(md + "\n")
    figs = figures(cases)
    body = ["<h1>MLP veto</h1>", html_table(table)]
    body += [f.to_html(full_html=False, include_plotlyjs=False) for f in figs]
    write_page(out / "figures.html", "mlp_veto", "\n".join(body), figures=True)
    report = ["# MLP veto: recognition vs generation", "", f"Command: `python experiments/mlp_veto.py {' '.join(sys.argv[1:] if argv is None else argv)}`", "",
              "## Cases", "", md, ""]
    for name, c in cases.items():
        if "verdict" in c:
            report += [f"## {name} (positive control)", "", (out / "planted.md").read_text().split("\n", 2)[2], ""]
        elif "sweep" in c:
            report += [f"## {name}", "", "### Zero-ablation sweep", "", markdown_table(c["sweep"].drop(columns=["condition"]), missing="-"),
                       "", "### Steering", "", markdown_table(c["steer"], missing="-"), "", "### Top-k units", "",
                       markdown_table(c["units"], missing="-"), ""]
    report += ["Figures: `figures.html` (plotly, self-contained).", ""]
    (out / "report.md").write_text("\n".join(report))
    (out / "run.json").write_text(json.dumps({"argv": sys.argv[1:] if argv is None else argv, "args": vars(args)}, indent=2, default=str) + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
