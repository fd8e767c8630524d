"""``reachlens silence MODEL --sets DIR --out DIR``: zero-ablate each layer's MLP / attention / both."""

from __future__ import annotations

import argparse

from reachlens.cli._common import add_study_args, comma_list, echo, open_study

PRESETS = {"--components": "a sweep silences each kind of component, one condition each (prune: the MLPs)"}
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
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.engine.sites import sites_of
    from reachlens.cli._progress import RunProgress
    from reachlens.records import markdown_table
    from reachlens.studies.causal import best_layer, silence_sweep

    model, task, sets = open_study(args)
    with RunProgress(f"silence {args.model}"):  # every condition in one decode: its tokens
        result = silence_sweep(model, task, sets, layers=args.layers, components=args.components,
                               allow_other_model=True)
    result.save(args.out)
    echo(markdown_table(result.table.drop(columns=["condition"]), missing="-"))
    mlp = next((c for c in args.components if sites_of(c) == ("mlp_out",)), None)
    if mlp is not None:
        echo(f"best MLP layer (repair - break): {best_layer(result.table, mlp)}   -> {args.out}")
    return 0
