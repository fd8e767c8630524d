"""Hard or just unreached? arXiv 2606.19636's design in miniature on the zoo, with a locked model and a null.

Activation probes (grafts, embedding noise, steering) beside temperature samples at matched compute, a placebo
for the grafts, a null control, and a password-locked model whose hidden answers are known.

    nice -n 5 python experiments/probes.py --models zoo:base zoo:grpo zoo:locked --tasks arith arith_null --n 100 --out runs/probes

Per cell (model, task, prompt format), one probe run (``reachlens.probe``) holds the greedy deployment and

* ``sampling:k=6``: 6 samples at T (0.8) — the decoding probe;
* ``graft:kind=...:layer=L``: one graft of each of the 7 kinds (zero, noise, direction, permute, bos, mean,
  prev_layer) at the last prompt token of block L, in the prefill only — an intervention;
* the same grafts at a seeded random prompt position (``placebo=true``) — their control;
* ``embedding_noise:ratio=R:k=6`` (``--noise``) and ``steer:layer=L:alphas=...`` along a seeded random
  direction (``--steer``) — the other two activation probes (``--noise none`` / ``--steer none`` drop them).

A model whose zoo card records a password lock (``zoo:locked``) also runs its lock task (``arith_hard``), and
runs every task twice: in its native prompt format (no password) and in the lock's unlocked format (the
password line first). The question the locked model asks: does any probe reach, without the password, the
answers the password unlocks, beyond the graft placebo? ``arith_null`` is the null control: golds no prompt can
imply, where every probe should reach about 0.

Tables (95 % intervals: Wilson for rates, bootstrap over questions for differences, budget-matched means and
Jaccard indices): reach of each probe alone and with the deployment; recovery on the stratum 6 samples never
solve (pass@6 = 0); grafts against their placebo (paired, McNemar); the selection gap of each probe; the
budget-matched mixtures (6 samples vs greedy + 5 of a probe vs 3 samples + 3 of it, every subset, majority
vote with ties averaged); the Jaccard of the probes' fix-sets; each graft kind alone. Activation probes are
interventions, not decoding methods: every table names them so. Outputs in --out: one probe run directory
per cell (``reachlens report DIR`` draws it; ``report.html`` is written beside) and ``table.md`` with every
table and the command. Each model is prompted in its native format (its zoo training.json), else the task's
default.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

KINDS = ("zero", "noise", "direction", "permute", "bos", "mean", "prev_layer")
SHORT = {"sampling": "samples", "graft": "grafts", "placebo": "placebo grafts", "embedding_noise": "noise",
         "steer": "steer"}


@dataclass(frozen=True)
class Cell:
    """One probe run: a model, a task, a prompt format (None: the model's native one)."""

    model: str
    task: str
    prompt_format: str | None = None

    @property
    def slug(self) -> str:
        name = f"{self.model.replace(':', '_').replace('/', '_')}-{self.task}"
        return name if self.prompt_format is None else f"{name}-{self.prompt_format}"


def zoo_lock(spec: str) -> dict | None:
    """The lock a zoo card records (task, unlocked_format, ...), or None."""
    from reachlens.models.zoo import zoo_root

    if not spec.startswith("zoo:"):
        return None
    card = zoo_root() / spec.removeprefix("zoo:") / "card.json"
    return json.loads(card.read_text()).get("lock") if card.is_file() else None


def plan_cells(models: list[str], tasks: list[str], lock_cells: bool = True) -> list[Cell]:
    """Every (model, task) in its native format; a locked model also on its lock task, and every task again
    with the password (the lock's unlocked format).

    >>> [c.slug for c in plan_cells(["zoo:locked"], ["arith_null"])]
    ['zoo_locked-arith_null', 'zoo_locked-arith_hard', 'zoo_locked-arith_null-password', 'zoo_locked-arith_hard-password']
    """
    cells = []
    for spec in models:
        lock = zoo_lock(spec) if lock_cells else None
        names = list(tasks) + ([lock["task"]] if lock and lock["task"] not in tasks else [])
        cells += [Cell(spec, t) for t in names]
        if lock:
            cells += [Cell(spec, t, lock["unlocked_format"]) for t in names]
    return cells


def native_format(spec: str, task) -> str:
    from reachlens.models.zoo import native_format as zoo_format

    fmt = zoo_format(spec) if spec.startswith("zoo:") else None
    return fmt if fmt in task.prompt_formats else "default"


def probe_specs(args: argparse.Namespace) -> list[str]:
    grafts = f"graft:kind={','.join(KINDS)}:layer={args.layer}"
    specs = [f"sampling:k={args.k}:temperature={args.temperature:g}", grafts, f"{grafts}:placebo=true"]
    if args.noise != "none":
        specs.append(f"embedding_noise:ratio={args.noise}:k={args.k}")
    if args.steer != "none":
        specs.append(f"steer:layer={args.layer}:alphas={args.steer}")
    return specs


def run_cell(cell: Cell, args: argparse.Namespace):
    """The cell's probe run (resumed or read when its directory holds one), its report written beside."""
    from reachlens import ExecConfig, Protocol, load_model, load_task, probe
    from reachlens.report import report_run

    task = load_task(cell.task, n=args.n)
    fmt = cell.prompt_format or native_format(cell.model, task)
    protocol = Protocol.greedy(cell.task, max_new_tokens=args.max_new_tokens, prompt_format=fmt, seed=args.seed)
    specs = probe_specs(args)
    unions = [f"greedy+{s}" for s in specs[1:]]
    run = probe(load_model(cell.model), task, specs, protocol=protocol, out=Path(args.out) / cell.slug,
                exec_config=ExecConfig(max_batch_rows=args.max_batch_rows), unions=unions)
    report_run(run)
    return run


def _ci(v: float, lo: float, hi: float, signed: bool = False) -> str:
    if pd.isna(v):
        return "undefined"
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"{f.format(v)} [{f.format(lo)}, {f.format(hi)}]"


def _name(label: str) -> str:
    """A probe's short column name (interventions marked)."""
    from reachlens.probes.bank import family_of

    family = family_of(label)
    return SHORT.get(family, label) + ("" if family == "sampling" else " [int]")


def cell_tables(cell: Cell, run, seconds: float, layer: int) -> dict[str, pd.DataFrame]:
    """The cell's rows of every table of table.md."""
    from reachlens.power import mde_verdict

    head = {"model": cell.model, "task": cell.task, "format": run.protocol.prompt_format}
    t = run.analysis
    reach = t["reach"].set_index("source")
    labels = run.probes
    rows = {"reach": [{**head, "n": int(reach.loc["greedy", "n"]), "D": _ci(*reach.loc["greedy", ["O", "O_lo", "O_hi"]]),
                       **{_name(x): _ci(*reach.loc[x, ["O", "O_lo", "O_hi"]]) for x in labels}, "wall_s": round(seconds)}],
            "with_greedy": [{**head, **_with_greedy(reach, t["recovery"].set_index("source"), labels)}]}
    rows["placebo"] = [{**head, "O grafts": f"{r.O_graft:.3f}", "O placebo": f"{r.O_placebo:.3f}",
                        "fix-set grafts": r.fix_graft, "fix-set placebo": r.fix_placebo,
                        "grafts - placebo": _ci(r.dO, r.dO_lo, r.dO_hi, True), "McNemar p": f"{r.mcnemar_p:.2g}",
                        "detectable (80 % power)": mde_verdict((r.dO_lo, r.dO_hi), r.dO_mde),
                        "recovery grafts": f"{r.recovery_graft:.3f}", "recovery placebo": f"{r.recovery_placebo:.3f}",
                        "recovery: grafts - placebo": _ci(r.drecovery, r.drecovery_lo, r.drecovery_hi, True),
                        "recovery: detectable (80 % power)": mde_verdict((r.drecovery_lo, r.drecovery_hi),
                                                                         r.drecovery_mde)}
                       for r in t["placebo"].itertuples()]
    rows["selectors"] = [{**head, "probe": _name(r.probe), "O": f"{r.O:.3f}", "majority": f"{r.majority:.3f}",
                          "logprob": f"{r.logprob:.3f}", "best": r.best, "selection gap": _ci(r.gap, r.gap_lo, r.gap_hi, True)}
                         for r in t["selectors"].itertuples()]
    rows["matched"] = [{**head, **r} for r in _matched(run)]
    rows["overlap"] = [{**head, "a": _name(r.a), "b": _name(r.b), "fix a": r.fix_a, "fix b": r.fix_b, "both": r.both,
                        "Jaccard": _ci(r.jaccard, r.jaccard_lo, r.jaccard_hi)} for r in t["overlap"].itertuples()]
    rows["kinds"] = [{**head, "grafts": where, **{x: f"{reach.loc[f'arm:{pre}graft:{x}@L{layer}', 'O']:.3f}" for x in KINDS}}
                     for where, pre in (("last token", ""), ("placebo", "placebo:"))]
    rows["kind_jaccard"] = [{**head, **_kind_overlap(run.candidates, layer)}]
    return {name: pd.DataFrame(r) for name, r in rows.items()}


def _with_greedy(reach: pd.DataFrame, rec: pd.DataFrame, labels: list[str]) -> dict[str, str]:
    """O[greedy + probe] per probe, and the recovery of greedy and of each on the pass@K = 0 stratum."""
    row = {f"greedy + {_name(x)}": _ci(*reach.loc[f"O[greedy+{x}]", ["O", "O_lo", "O_hi"]]) for x in labels[1:]}
    row["stratum pass@K=0"] = str(int(rec["stratum"].iloc[0]))
    for source, name in [("greedy", "greedy"), *((f"O[greedy+{x}]", f"greedy + {_name(x)}") for x in labels[1:])]:
        r = rec.loc[source]
        row[f"recovered: {name}"] = f"{int(r['recovered'])}: {_ci(r['rate'], r['rate_lo'], r['rate_hi'])}"
    return row


def _matched(run) -> list[dict]:
    """K samples against greedy + K-1 of each other probe and against K/2 samples + K/2 of it."""
    from reachlens.probes import budget_matched

    labels = run.probes
    sampling = labels[0]
    k = int(run.candidates[run.candidates["probe"] == sampling].groupby("question_id").size().min())
    mixtures = {f"{k} samples": [(sampling, k)]}
    mixtures.update({f"greedy + {k - 1} {_name(x)}": [("greedy", 1), (x, k - 1)] for x in labels[1:]})
    mixtures.update({f"{k // 2} samples + {k - k // 2} {_name(x)}": [(sampling, k // 2), (x, k - k // 2)]
                     for x in labels[1:]})
    m = budget_matched(run.candidates, mixtures)
    return [{"mixture": r.mixture, "kind": r.kind, "subsets": r.subsets, "O": _ci(r.O, r.O_lo, r.O_hi),
             "dO": "—" if i == 0 else _ci(r.dO, r.dO_lo, r.dO_hi, True),
             "majority": _ci(r.majority, r.majority_lo, r.majority_hi),
             "d majority": "—" if i == 0 else _ci(r.dmajority, r.dmajority_lo, r.dmajority_hi, True)}
            for i, r in enumerate(m.itertuples())]


def _kind_overlap(bank: pd.DataFrame, layer: int) -> dict[str, str]:
    """The fix-set size of each graft kind, and the pair of kinds whose fix-sets overlap most."""
    from reachlens.probes import fix_sets, jaccard_table

    arms = [f"arm:graft:{x}@L{layer}" for x in KINDS]
    sizes = fix_sets(bank, arms)
    jac = jaccard_table(bank, arms).dropna(subset=["jaccard"]).sort_values("jaccard", ascending=False, kind="stable")
    top = "no two kinds fix anything" if jac.empty else "no two kinds share a fix" if jac["both"].max() == 0 else (
        f"{jac['a'].iloc[0][10:]} / {jac['b'].iloc[0][10:]}: {jac['jaccard'].iloc[0]:.2f} "
        f"({int(jac['both'].iloc[0])} shared)")
    return {"fix-set size per kind": ", ".join(f"{x} {len(sizes[a])}" for x, a in zip(KINDS, arms)),
            "largest Jaccard of two kinds": top}


SECTIONS = {"reach": "Reach: O of each probe's candidates alone ([int]: an intervention)",
            "with_greedy": "With the deployment: O[greedy + probe], and recovery on the stratum K samples never solve (pass@K = 0)",
            "placebo": "Grafts against their placebo (paired over questions; detectable: the smallest difference the "
                        "exact McNemar test detects with 80 % power at two-sided 5 % at this n)",
            "selectors": "Selection gap: O minus the best answer-blind selector (majority with ties averaged, logprob)",
            "matched": "Budget-matched: K candidates each, every subset averaged (d: minus K samples, paired)",
            "overlap": "Overlap: Jaccard of the probes' fix-sets (questions reached that greedy misses)",
            "kinds": "Each graft kind alone (O of its one candidate)",
            "kind_jaccard": "Graft kinds' fix-sets"}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["zoo:base", "zoo:grpo"], help="zoo models or model folders")
    ap.add_argument("--tasks", nargs="+", default=["arith"], help="registered tasks")
    ap.add_argument("--n", type=int, default=60, help="questions per task (the first N)")
    ap.add_argument("--k", type=int, default=6, help="samples, noise draws (and the matched budget)")
    ap.add_argument("--temperature", type=float, default=0.8, help="sampling temperature")
    ap.add_argument("--layer", type=int, default=3, help="the block grafted and steered")
    ap.add_argument("--noise", default="0.3", help="embedding-noise norm ratio (none: no noise probe)")
    ap.add_argument("--steer", default="-8,-4,-2,2,4,8", help="steering alphas along a random unit direction, in "
                    "resid_post units (none: no steering probe); write --steer=-2,2 (a leading '-' is read as an option)")
    ap.add_argument("--no-lock-cells", action="store_true", help="no extra cells for a password-locked model")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="decode length of every candidate")
    ap.add_argument("--max-batch-rows", type=int, default=256, help="completions decoded together")
    ap.add_argument("--seed", type=int, default=0, help="seed of samples and interventions")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: on a shared machine more threads spin against each other)")
    ap.add_argument("--out", default="runs/probes", help="output folder")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    import torch

    from reachlens.records import markdown_table

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python", "experiments/probes.py", *(sys.argv[1:] if argv is None else argv)])
    t0 = time.time()
    tables: dict[str, list[pd.DataFrame]] = {name: [] for name in SECTIONS}
    for cell in plan_cells(args.models, args.tasks, not args.no_lock_cells):
        t = time.time()
        run = run_cell(cell, args)
        for name, df in cell_tables(cell, run, time.time() - t, args.layer).items():
            tables[name].append(df)
        print(f"[{cell.slug}] " + "  ".join(f"{k}={v}" for k, v in tables["reach"][-1].iloc[0].items()),
              file=sys.stderr, flush=True)
    parts = [f"`{command}` ({time.time() - t0:.0f} s)", ""]
    for name, title in SECTIONS.items():
        parts += [f"## {title}", "", markdown_table(pd.concat(tables[name], ignore_index=True)), ""]
    text = "\n".join(parts)
    (out / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
