"""``reachlens silence MODEL --sets DIR --out DIR``: zero-ablate each layer's MLP / attention / both."""

from __future__ import annotations

import argparse

from reachlens.cli._common import add_study_args, comma_list, echo, open_study

PRESETS = {"--components": "a sweep silences each kind of component, one condition each (prune: the MLPs)",
           "--control-seed": "every zero-ablation is read against its null by default (steer and units draw a "
                             "control only when given a seed)"}
"""Shared flags this command presets to another default (:mod:`reachlens.cli.flags`), and why."""

NAME = "silence"
HELP = "zero-ablate MLP / attention / whole layer per layer; repair (failure set) and break (healthy panel)"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    add_study_args(p)
    p.add_argument("--layers", type=comma_list("--layers", int), default=None, help="e.g. 0,1,2 (default: all)")
    p.add_argument("--sites", "--components", dest="components", metavar="SITES", type=comma_list("--sites", str),
                   default=["mlp", "attn", "layer"],
                   help="what to zero, one condition per item: TransformerLens sites (mlp_out, attn_out, mlp_post, "
                        "resid_pre, ...; sites joined by '+' are zeroed together) or components: mlp (= mlp_out), "
                        "attn (= attn_out), layer (= attn_out+mlp_out, the block's whole contribution). "
                        "Default: mlp,attn,layer")
    p.add_argument("--control-seed", type=int, default=0,
                   help="seed of the null: each site also moved as far as zeroing moves it, along a random direction "
                        "(default 0)")
    p.add_argument("--no-control", action="store_true",
                   help="skip the null (halves the work; a repair rate then has nothing to be read against)")
    return p


def shown_columns(table):
    """The sweep's table as printed: each rate with its interval in one cell, its control's beside it."""
    import pandas as pd

    def cell(rate, lo, hi):
        return "-" if pd.isna(rate) else f"{rate:.2f} [{lo:.2f}, {hi:.2f}]"

    out = table[["layer", "component", "n_failure", "n_healthy"]].copy()
    for name in ("repair", "break"):
        out[name] = [cell(*v) for v in zip(table[name], table[f"{name}_lo"], table[f"{name}_hi"])]
        if f"control_{name}" in table:
            out[f"control_{name}"] = [cell(*v) for v in zip(table[f"control_{name}"], table[f"control_{name}_lo"],
                                                          table[f"control_{name}_hi"])]
    out["flip"] = table["flip"].round(2)
    if "control_flip" in table:
        out["control_flip"] = table["control_flip"].round(2)
    return out


def run(args: argparse.Namespace) -> int:
    from reachlens.cli._scale_args import sweep_running
    from reachlens.cli._progress import RunProgress
    from reachlens.engine.sites import sites_of
    from reachlens.records import markdown_table
    from reachlens.studies.causal import best_layer, silence_sweep

    model, task, sets = open_study(args)
    with RunProgress(f"silence {args.model}", "questions") as bar:
        result = silence_sweep(model, task, sets, layers=args.layers, components=args.components,
                               allow_other_model=True, control_seed=None if args.no_control else args.control_seed,
                               **sweep_running(args, bar))
    echo(markdown_table(shown_columns(result.table), missing="-"))
    mlp = next((c for c in args.components if sites_of(c) == ("mlp_out",)), None)
    if mlp is not None:
        echo(f"best MLP layer (repair - break): {best_layer(result.table, mlp)}   -> {args.out}")
    return 0
