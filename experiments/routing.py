"""Layer routing on the zoo: does a structured route search beat random routes at a matched budget,
and does its gain survive answer-blind selection?

    python experiments/routing.py --models zoo:base zoo:grpo zoo:sft --tasks arith --n 50 --budget 32 \\
        --spaces skip native reorder --strategies random hill_climb genetic mcts --out runs/routing

A *cell* is a model x task x route space; in each cell every strategy searches every question with
the same budget K (route evaluations per question, duplicates included, the identity route first),
maximizing the answer-blind confidence objective. Each model is prompted in its native format (a zoo
checkpoint's ``training.json`` names it; the task's default otherwise) unless ``--prompt-format``
names one for all. Per cell the script reports

* O_K (reachable at budget K) of random routes and of each structured search, and their difference (random -
  structured) with a paired bootstrap 95% interval over questions; each structured search also runs in
  oracle mode (``STRATEGY+oracle``: the objective is correctness, read from the grader, as when routes
  are searched to make training labels), which bounds what search with the answer can find at K;
* the reach-vs-K curve (O_K at k = 1, 2, 4, ... K, read off the anytime searches);
* D (the deployment), each answer-blind selector (majority, logprob, DeepConf lowest window, self-verification, the
  search's own pick) and the gap recovery (S - G) / (O - G), "undefined" where O == G, with the
  median over cells;
* the space ceiling: reachable over *every* route of the space (spaces of at most --exhaustive-max
  routes are decoded exhaustively once; the searches then find their evaluations memoized, which
  changes their cost, not their budget);
* for reference, the same selectors on ordinary temperature samples from an audit (majority@K vs
  O_K at the same K).

``--report-only`` rebuilds every table and figure from what a run stored in --out (an interrupted run
keeps its finished cells; ceilings and audits are kept as they finish).

Outputs in --out: ``table.md`` (every table), ``cells.csv``, ``reach_curve.csv``, ``report.html``
(tables and figures), ``reach_vs_k.html``, ``gap_recovery.html``, ``oracle_difference.html`` (plotly),
and one stored routing result per cell and strategy under ``cells/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from reachlens.escape import html_text
from reachlens.records import markdown_table
from reachlens.store import write_csv

SELECTORS = ("majority", "logprob", "deepconf", "self_verify", "search")


def slug(spec: str) -> str:
    return spec.replace(":", "_").replace("/", "_")


def run(args: argparse.Namespace) -> None:
    # submodule imports: they work however the package was installed (see notes/routing.md)
    from reachlens.models import load_model
    from reachlens.protocol import Protocol
    from reachlens.routing import (
        RouteEvaluator,
        RoutingConfig,
        audit_selector_table,
        format_recovery,
        make_space,
        reach_curve,
        run_routing,
    )
    from reachlens.studies import audit
    from reachlens.tasks import load_task

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "command.txt").write_text(command_line(args.argv) + "\n")  # what --report-only quotes later
    t_start = time.time()
    cells, curves, audits, ceilings, log = [], [], [], [], []
    config = RoutingConfig(budget=args.budget, seed=args.seed, objective=args.objective, selectors=SELECTORS)
    tasks = {name: load_task(name, args.data, n=args.n) for name in args.tasks}
    # every cell's prompt format, settled before any decoding (a bad --prompt-format fails here)
    formats = {(spec, t): prompt_format_for(spec, tasks[t], args.prompt_format) for spec in args.models for t in tasks}
    model, loaded = None, None
    for (spec, task_name), fmt in formats.items():
        t_model = time.time()
        if spec != loaded:  # cells are model-major: each model is loaded once
            model, loaded = load_model(spec), spec
        n_layers = len(model.blocks)
        task = tasks[task_name]
        greedy = Protocol.greedy(task_name, max_new_tokens=args.max_new_tokens, prompt_format=fmt or "default")
        evaluator = RouteEvaluator(model, task, greedy)
        cell_task = f"{task_name}[{evaluator.protocol.prompt_format}]"
        cell_config = config
        options = {"skip": {"max_skip": args.max_skip}, "native": {"max_skip": args.max_skip,
                                                                   "max_repeat": args.max_repeat},
                   "reorder": {"window": args.reorder_window}}
        spaces = [make_space(name, n_layers, **options[name]) for name in args.spaces]
        small = [s for s in spaces if s.size() <= args.exhaustive_max]
        union = list(dict.fromkeys(r for s in small for r in s.enumerate()))
        if union:
            print(f"[{spec} {cell_task}] decoding {len(task)} questions along all {len(union)} routes of "
                  f"{', '.join(map(str, small))}", file=sys.stderr, flush=True)
            t = time.time()
            evaluator.prefetch(union, progress=lambda done: print(f"  {done}/{len(union)} routes "
                                                                   f"({time.time() - t:.0f}s)", file=sys.stderr,
                                                                   flush=True) if done % 20 < 4 else None)
        for space in spaces:
            ceiling = math.nan
            if space in small:
                routes = list(space.enumerate())
                hits = [any(e.correct for e in evaluator.evaluate([(qi, r) for r in routes]))
                        for qi in range(len(task))]
                ceiling = float(np.mean(hits))
            ceilings.append({"model": spec, "task": cell_task, "space": str(space), "routes": space.size(),
                             "space_ceiling": ceiling})
            write_csv(out / "ceilings.csv", pd.DataFrame(ceilings))  # kept for --report-only
            runs = [(s, s, cell_config) for s in args.strategies]
            if args.oracle_search:
                runs += [(s, f"{s}+oracle", dataclasses.replace(cell_config, oracle=True))
                         for s in args.strategies if s != "random"]
            for strategy, label, cfg in runs:
                t = time.time()
                r = run_routing(model, task, space, strategy, config=cfg, evaluator=evaluator,
                                out=out / "cells" / slug(spec) / slug(cell_task) / space.name / label.replace("+", "_"))
                s = r.summary()
                keys = {"model": spec, "task": cell_task, "space": str(space), "strategy": label}
                cells.append(cell_row(r, spec, cell_task, str(space), label, ceiling))
                curve = reach_curve(r.candidates)
                curves.append(curve.assign(**keys))
                print(f"[{spec} {cell_task}] {space} {label}: D={s['D']:.3f} O_{args.budget}="
                      f"{s['O_K']:.3f} majority={s['majority']:.3f} ({time.time() - t:.0f}s)",
                      file=sys.stderr, flush=True)
        if args.audit_k:
            t = time.time()
            proto = Protocol(task_name, k=args.audit_k, temperature=args.temperature,
                             max_new_tokens=args.max_new_tokens, seed=args.seed, prompt_format=evaluator.protocol.prompt_format)
            res = audit(model, task, proto)
            _, summ = audit_selector_table(res, ("majority", "logprob"))
            row = summ.iloc[0].to_dict()
            audits.append({"model": spec, "task": cell_task, "K": args.audit_k, "T": args.temperature, **row, "n": int(row["n"])})
            write_csv(out / "audits.csv", pd.DataFrame(audits))
            print(f"[{spec} {cell_task}] audit K={args.audit_k}: D={row['D']:.3f} O_K={row['O_K']:.3f} "
                  f"majority={row['majority']:.3f} ({time.time() - t:.0f}s)", file=sys.stderr, flush=True)
        log.append(f"{spec} {cell_task}: {evaluator.n_decoded} (question, route) pairs decoded in {time.time() - t_model:.0f}s")

    write_report(args, out, cells, curves, audits, ceilings, log, time.time() - t_start, format_recovery)


def prompt_format_for(spec: str, task, requested: str) -> str | None:
    """The prompt format a model is routed under: ``native`` = the one its zoo training recorded, if the
    task has it (else the task's default); ``default`` = the task's; any other name as given."""
    from reachlens.models.zoo import native_format

    if requested == "default":
        return None
    if requested == "native":
        fmt = native_format(spec)
        return fmt if fmt in task.prompt_formats else None
    task.format(requested)  # a LookupError naming the task's formats
    return requested


def cell_row(r, spec: str, task: str, space: str, label: str, ceiling: float) -> dict:
    """One cell's row of the accuracy table (with its per-question reachability, for the paired difference)."""
    s = r.summary()
    return {"model": spec, "task": task, "space": space, "strategy": label, **{k: s[k] for k in ("n", "D", "O_K", *SELECTORS)},
            **{f"recovery_{k}": s[f"recovery_{k}"] for k in SELECTORS},
            "unique_routes_per_q": s["unique_routes"] / s["n"], "space_ceiling": ceiling,
            "_reachable_q": r.questions.set_index("question_id")["reachable"]}


def command_line(argv: list[str]) -> str:
    return " ".join(["python", "experiments/routing.py", *argv])


def run_command(out: Path, args: argparse.Namespace) -> str:
    """The command that ran the cells in ``out`` (kept in ``command.txt``), and this one if it only rebuilt
    them, as Markdown code."""
    this = f"`{command_line(args.argv)}`"
    ran = (out / "command.txt").read_text().strip() if (out / "command.txt").is_file() else None
    if not args.report_only or not ran:
        return this
    return f"`{ran}` (tables rebuilt with {this})"


def report_only(args: argparse.Namespace) -> None:
    """Rebuild every table and figure from what a (possibly interrupted) run stored in --out."""
    from reachlens.routing import RoutingResult, format_recovery, reach_curve, space_from_spec

    out = Path(args.out)
    ceil = pd.read_csv(out / "ceilings.csv") if (out / "ceilings.csv").is_file() else pd.DataFrame(
        columns=["model", "task", "space", "routes", "space_ceiling"])
    audits = pd.read_csv(out / "audits.csv").to_dict("records") if (out / "audits.csv").is_file() else []
    lookup = {(r.model, r.task, r.space): r.space_ceiling for r in ceil.itertuples()}
    cells, curves, order = [], [], {s: i for i, s in enumerate(args.strategies)}
    for run in sorted((out / "cells").glob("*/*/*/*/run.json")):
        r = RoutingResult.load(run.parent)
        spec, space = r.record.model["spec"], str(space_from_spec(r.record.options["space"]))
        task = f"{r.protocol.task}[{r.protocol.prompt_format}]"
        label = r.strategy + ("+oracle" if r.config.oracle else "")
        cells.append(cell_row(r, spec, task, space, label, lookup.get((spec, task, space), math.nan)))
        curves.append(reach_curve(r.candidates).assign(model=spec, task=task, space=space, strategy=label))
    rank = {name: i for i, name in enumerate(args.spaces)}
    key = lambda c: (c["model"], c["task"], rank.get(c["space"].split("(")[0], 9), c["strategy"].endswith("+oracle"),  # noqa: E731
                     order.get(c["strategy"].replace("+oracle", ""), 9))
    cells.sort(key=key)
    write_report(args, out, cells, curves, audits, ceil.to_dict("records"),
                 [f"rebuilt from {len(cells)} stored cells (--report-only)"], math.nan, format_recovery)


def write_report(args, out, cells, curves, audits, ceilings, log, wall, format_recovery) -> None:
    from reachlens.stats import paired_bootstrap_ci

    cell_df = pd.DataFrame([{k: v for k, v in c.items() if k != "_reachable_q"} for c in cells])
    curve_df = pd.concat(curves, ignore_index=True) if curves else pd.DataFrame()
    write_csv(out / "cells.csv", cell_df)
    write_csv(out / "reach_curve.csv", curve_df)

    # O_K difference random - structured, paired over questions
    diffs = []
    by_cell: dict[tuple[str, str, str], dict[str, pd.Series]] = {}
    for c in cells:
        by_cell.setdefault((c["model"], c["task"], c["space"]), {})[c["strategy"]] = c["_reachable_q"]
    for (model, task, space), strat in by_cell.items():
        if "random" not in strat:
            continue
        for name, q in strat.items():
            if name == "random":
                continue
            d = (strat["random"] - q.reindex(strat["random"].index)).dropna().to_numpy(dtype=float)
            lo, hi = paired_bootstrap_ci(d)
            diffs.append({"model": model, "task": task, "space": space, "structured": name,
                          f"random O_{args.budget}": float(strat["random"].mean()),
                          f"structured O_{args.budget}": float(q.mean()),
                          "random - structured": float(d.mean()), "95% CI": f"[{lo:+.3f}, {hi:+.3f}]"})
    diff_df = pd.DataFrame(diffs)

    main_cols = ["model", "task", "space", "strategy", "n", "D", "O_K", *SELECTORS, "space_ceiling",
                 "unique_routes_per_q"]
    acc = cell_df[main_cols].rename(columns={"O_K": f"O_{args.budget}"})
    rec = cell_df[["model", "task", "space", "strategy"]].copy()
    for k in SELECTORS:
        rec[k] = cell_df[f"recovery_{k}"].map(format_recovery)
    med_rows = []
    blind = cell_df[~cell_df["strategy"].str.endswith("+oracle")]  # pools built without the grader
    for k in SELECTORS:
        vals = blind[f"recovery_{k}"].astype(float)
        med_rows.append({"selector": k, "median gap recovery": float(vals.median(skipna=True)) if vals.notna().any()
                         else math.nan, "cells defined": int(vals.notna().sum()),
                         "cells undefined": int(vals.isna().sum())})
    med_df = pd.DataFrame(med_rows)
    ceil_df = pd.DataFrame(ceilings)
    audit_df = pd.DataFrame(audits)

    sections = [
        f"# Layer routing: {', '.join(args.tasks)}, n={args.n}, K={args.budget}, objective={args.objective}\n",
        f"Command: {run_command(out, args)}  \n" +
        ("" if math.isnan(wall) else f"Wall time {wall / 60:.1f} min; ") + "; ".join(log) + ".\n",
        "## Accuracy per cell and strategy\n\nD = the deployment (full model, identity route, greedy); O_K = any of the "
        "K candidates correct; selector columns = accuracy of the answer-blind pick; space_ceiling = reachable "
        "over every route of the space (n/a: not recorded).\n\n" + markdown_table(acc, missing="n/a"),
        "## Oracle difference at matched K (random - structured)\n\nPositive: random routes reach more "
        "questions than the structured search at the same budget. 95% CI: paired bootstrap over questions. "
        "`+oracle` rows searched with the grader's verdict as objective (not answer-blind)."
        "\n\n" + (markdown_table(diff_df) if len(diff_df) else "(no random baseline run)"),
        "## Gap recovery (S - G) / (O - G) per cell\n\n" + markdown_table(rec),
        "## Median gap recovery over cells\n\nOver the answer-blind searches (the `+oracle` pools are left "
        "out).\n\n" + markdown_table(med_df),
        "## Route spaces\n\n" + markdown_table(ceil_df, missing="n/a"),
        "## Reach vs K (O_K at k)\n\n" + (markdown_table(curve_df.pivot_table(
            index=["model", "task", "space", "strategy"], columns="k", values="O_K").reset_index()
            .rename(columns=lambda c: f"k={c}" if isinstance(c, (int, np.integer)) else c))
            if len(curve_df) else ""),
    ]
    if len(audit_df):
        sections.append("## Reference: the same selectors on temperature samples (audit)\n\n" + markdown_table(
            audit_df[["model", "task", "K", "T", "n", "D", "O_K", "majority", "logprob",
                      "recovery_majority", "recovery_logprob"]]))
    text = "\n\n".join(sections) + "\n"
    (out / "table.md").write_text(text)
    print(text)
    if not args.no_figures:
        write_figures(out, curve_df, cell_df, diff_df, text)


def write_figures(out: Path, curve_df: pd.DataFrame, cell_df: pd.DataFrame, diff_df: pd.DataFrame, text: str) -> None:
    try:
        import plotly.express as px
    except ImportError:
        raise SystemExit("plotly is not installed: the figures need it (pip install plotly), or pass --no-figures "
                         f"(the tables are in {out / 'table.md'})") from None
    figs = {}
    if len(curve_df):
        curve_df = curve_df.assign(cell=curve_df["model"] + " / " + curve_df["task"] + " / " + curve_df["space"])
        figs["reach_vs_k"] = px.line(curve_df, x="k", y="O_K", color="strategy", facet_col="cell",
                                     facet_col_wrap=3, markers=True, log_x=True,
                                     labels={"k": "k (route evaluations per question, log scale)",
                                             "O_K": "O_K at k (share of questions reachable)"},
                                     title="Reach vs K: O_K at k of each search (same budget accounting)")
        ks = sorted(curve_df["k"].unique())
        figs["reach_vs_k"].update_xaxes(tickvals=ks, ticktext=[str(k) for k in ks])
    rec = cell_df.melt(id_vars=["model", "task", "space", "strategy"], value_vars=[f"recovery_{k}" for k in SELECTORS],
                       var_name="selector", value_name="gap_recovery")
    rec["selector"] = rec["selector"].str.replace("recovery_", "")
    rec["cell"] = rec["model"] + " / " + rec["task"] + " / " + rec["space"]
    figs["gap_recovery"] = px.bar(rec.dropna(), x="selector", y="gap_recovery", color="strategy", barmode="group",
                                  facet_col="cell", facet_col_wrap=3,
                                  labels={"gap_recovery": "gap recovery (S - G) / (O - G)"},
                                  title="Gap recovery (S - G) / (O - G) (undefined cells left out)")
    if len(diff_df):
        diff_df = diff_df.assign(model_task=diff_df["model"] + " / " + diff_df["task"])
        figs["oracle_difference"] = px.bar(diff_df, x="structured", y="random - structured", color="space",
                                           barmode="group", facet_col="model_task", facet_col_wrap=3,
                                           labels={"random - structured": "O_K, random - structured",
                                                   "structured": "structured search"},
                                           title="Oracle@K difference, random - structured (matched K)")
    for name, fig in figs.items():
        facets = {"reach_vs_k": curve_df, "gap_recovery": rec}.get(name)
        facets = diff_df["model_task"].nunique() if name == "oracle_difference" else facets["cell"].nunique()
        fig.update_layout(height=160 + 300 * math.ceil(facets / 3))  # one 300-px row per three facets
        fig.write_html(out / f"{name}.html", include_plotlyjs="directory")
    html_report(out, figs, text)


def html_report(out: Path, figs: dict, text: str) -> None:
    """One self-contained page: the Markdown tables as text, then every figure (plotly.js inlined once)."""
    from reachlens.report.page import write_page

    body = ["<pre style='white-space: pre-wrap'>" + html_text(text) + "</pre>"]
    body += [fig.to_html(full_html=False, include_plotlyjs=False) for fig in figs.values()]
    write_page(out / "report.html", "reachlens layer routing", "\n".join(body), figures=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["zoo:base"])
    ap.add_argument("--tasks", "--task", dest="tasks", nargs="+", default=["arith"],
                    help="tasks to route on (each with every model: a cell is model x task x space)")
    ap.add_argument("--prompt-format", default="native",
                    help="'native' (each zoo model's training format, else the task's default), 'default', "
                         "or a format name for every model")
    ap.add_argument("--data", default=None)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--budget", type=int, default=32)
    ap.add_argument("--spaces", nargs="+", default=["skip", "native", "reorder"])
    ap.add_argument("--strategies", nargs="+", default=["random", "hill_climb", "genetic", "mcts"])
    ap.add_argument("--objective", default="confidence")
    ap.add_argument("--max-skip", type=int, default=2)
    ap.add_argument("--max-repeat", type=int, default=1)
    ap.add_argument("--reorder-window", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--exhaustive-max", type=int, default=256, help="decode spaces of at most this many routes "
                                                                     "exhaustively (0: never)")
    ap.add_argument("--audit-k", type=int, default=None, help="also audit K temperature samples (default: --budget; "
                                                              "0: skip)")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-oracle-search", dest="oracle_search", action="store_false",
                    help="skip the oracle-mode runs of the structured searches (objective = correctness)")
    ap.add_argument("--no-figures", action="store_true")
    ap.add_argument("--report-only", action="store_true",
                    help="rebuild the tables and figures from the cells stored in --out (e.g. after an interruption)")
    ap.add_argument("--out", default="runs/routing")
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.audit_k is None:
        args.audit_k = args.budget
    torch.set_num_threads(args.threads)
    report_only(args) if args.report_only else run(args)


if __name__ == "__main__":
    main()
