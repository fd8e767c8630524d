"""Hard or just unreached? The design of arXiv 2606.19636 in miniature on the zoo: activation grafts beside
temperature samples at matched compute.

    nice -n 10 python experiments/probes.py --models zoo:base zoo:grpo --tasks arith --n 60 --out runs/probes

Per model and task, one probe run (``reachlens.probe``) holds the greedy deployment and

* ``sampling:k=6``: 6 samples at T (0.8) — the decoding probe;
* ``graft:kind=...:layer=L``: one graft of each of the 7 kinds (zero, noise, direction, permute, bos, mean,
  prev_layer) at the last prompt token of block L, in the prefill only — an intervention;
* the same grafts at a seeded random prompt position (``placebo=true``) — the control.

and the script reports, with 95 % intervals (Wilson for rates, bootstrap over questions for differences and
Jaccard indices):

* realized (D), reachable under 6 samples, under greedy + the grafts, under greedy + the placebo grafts;
* budget-matched: 6 samples vs greedy + 5 grafts (every 5 of the 7 kinds) vs 3 samples + 3 grafts (every
  subset), reach and majority vote (ties averaged);
* recovery on the stratum that 6 samples never solve (pass@6 = 0): greedy + grafts against greedy + placebo;
* the Jaccard of the fix-sets (questions reached that greedy misses) of every pair of graft kinds.

Grafts are interventions, not decoding methods: every table names them so. Outputs in --out: one probe run
directory per model and task (``reachlens report DIR`` draws it; ``report.html`` is written beside), and
``table.md`` with every table and the command. Each model is prompted in its native format (its zoo
training.json), else the task's default.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

KINDS = ("zero", "noise", "direction", "permute", "bos", "mean", "prev_layer")


def slug(spec: str) -> str:
    return spec.replace(":", "_").replace("/", "_")


def native_format(spec: str, task) -> str:
    from reachlens.models.zoo import native_format as zoo_format

    fmt = zoo_format(spec) if spec.startswith("zoo:") else None
    return fmt if fmt in task.prompt_formats else "default"


def cell(spec: str, task_name: str, args: argparse.Namespace) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """One model on one task: its probe run, its headline row, its budget-matched and Jaccard tables."""
    from reachlens import ExecConfig, Protocol, load_model, load_task, probe
    from reachlens.probes import budget_matched, jaccard_table, reach
    from reachlens.report import report_run

    task = load_task(task_name, n=args.n)
    model = load_model(spec)
    grafts = f"graft:kind={','.join(KINDS)}:layer={args.layer}"
    placebo = f"{grafts}:placebo=true"
    sampling = f"sampling:k={args.k}:temperature={args.temperature:g}"
    protocol = Protocol.greedy(task_name, max_new_tokens=args.max_new_tokens, prompt_format=native_format(spec, task),
                               seed=args.seed)
    out = Path(args.out) / f"{slug(spec)}-{task_name}"
    t = time.time()
    run = probe(model, task, [sampling, grafts, placebo], protocol=protocol, out=out,
                exec_config=ExecConfig(max_batch_rows=args.max_batch_rows),
                unions=[f"greedy+{grafts}", f"greedy+{placebo}"])
    wall = time.time() - t
    report_run(run)
    bank, labels = run.candidates, run.probes
    sampling, grafts, placebo = labels
    half = args.k // 2
    matched = budget_matched(bank, {f"{args.k} samples": [(sampling, args.k)],
                                    f"greedy + {args.k - 1} grafts": [("greedy", 1), (grafts, args.k - 1)],
                                    f"greedy + {args.k - 1} placebo grafts": [("greedy", 1), (placebo, args.k - 1)],
                                    f"{half} samples + {args.k - half} grafts": [(sampling, half), (grafts, args.k - half)]})
    arms = [f"arm:graft:{k}@L{args.layer}" for k in KINDS]
    jac = jaccard_table(bank, arms)
    tables = run.analysis
    rec = tables["recovery"].set_index("source")
    reach_t = tables["reach"].set_index("source")
    g, p = f"O[greedy+{grafts}]", f"O[greedy+{placebo}]"
    row = {"model": spec, "task": task_name, "n": len(task), "D": _ci(reach_t, "greedy", "O"),
           f"O[{args.k} samples]": _ci(reach_t, sampling, "O"), "O[greedy+grafts] (intervention)": _ci(reach_t, g, "O"),
           "O[greedy+placebo] (intervention)": _ci(reach_t, p, "O"),
           "stratum pass@6=0": int(rec.loc[g, "stratum"]),
           "recovered by greedy+grafts": f"{int(rec.loc[g, 'recovered'])}: " + _ci(rec, g, "rate"),
           "recovered by greedy+placebo": f"{int(rec.loc[p, 'recovered'])}: " + _ci(rec, p, "rate"),
           "max Jaccard of graft kinds": f"{jac['jaccard'].max():.2f}", "wall_s": round(wall)}
    assert len(reach(bank, "greedy")) == len(task)
    return row, matched.assign(model=spec, task=task_name), jac.assign(model=spec, task=task_name)


def _ci(table: pd.DataFrame, source: str, col: str) -> str:
    v, lo, hi = table.loc[source, col], table.loc[source, f"{col}_lo"], table.loc[source, f"{col}_hi"]
    return "undefined" if pd.isna(v) else f"{v:.3f} [{lo:.3f}, {hi:.3f}]"


def _matched_rows(matched: pd.DataFrame) -> pd.DataFrame:
    cols = ["model", "task", "mixture", "kind", "budget", "subsets", "n"]
    out = matched[cols].copy()
    for col in ("O", "majority", "dO", "dmajority"):
        out[col] = [f"{v:+.3f} [{lo:+.3f}, {hi:+.3f}]" if col.startswith("d") else f"{v:.3f} [{lo:.3f}, {hi:.3f}]"
                    for v, lo, hi in zip(matched[col], matched[f"{col}_lo"], matched[f"{col}_hi"])]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["zoo:base", "zoo:grpo"], help="zoo models or model folders")
    ap.add_argument("--tasks", nargs="+", default=["arith"], help="registered tasks")
    ap.add_argument("--n", type=int, default=60, help="questions per task (the first N)")
    ap.add_argument("--k", type=int, default=6, help="samples (and the matched budget)")
    ap.add_argument("--temperature", type=float, default=0.8, help="sampling temperature")
    ap.add_argument("--layer", type=int, default=3, help="the block whose output is grafted")
    ap.add_argument("--max-new-tokens", type=int, default=96, help="decode length of every candidate")
    ap.add_argument("--max-batch-rows", type=int, default=256, help="completions decoded together")
    ap.add_argument("--seed", type=int, default=0, help="seed of samples and grafts")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: on a shared machine more threads spin against each other)")
    ap.add_argument("--out", default="runs/probes", help="output folder")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python", "experiments/probes.py", *(sys.argv[1:] if argv is None else argv)])
    t0 = time.time()
    rows, matched, jaccard = [], [], []
    for spec in args.models:
        for task_name in args.tasks:
            row, m, j = cell(spec, task_name, args)
            rows.append(row)
            matched.append(m)
            jaccard.append(j)
            print(f"[{spec} {task_name}] " + "  ".join(f"{k}={v}" for k, v in row.items() if k not in ("model", "task")),
                  file=sys.stderr, flush=True)
    from reachlens.records import markdown_table

    jac = pd.concat(jaccard, ignore_index=True)
    jac["jaccard"] = [f"{v:.2f} [{lo:.2f}, {hi:.2f}]" if v == v else "undefined"
                      for v, lo, hi in zip(jac["jaccard"], jac["jaccard_lo"], jac["jaccard_hi"])]
    text = "\n".join([f"`{command}` ({time.time() - t0:.0f} s)", "", "## Reach and recovery", "",
                      markdown_table(pd.DataFrame(rows)), "", "## Budget-matched", "",
                      markdown_table(_matched_rows(pd.concat(matched, ignore_index=True))), "",
                      "## Jaccard of graft-kind fix-sets", "",
                      markdown_table(jac[["model", "task", "a", "b", "fix_a", "fix_b", "both", "jaccard"]]), ""])
    (out / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
