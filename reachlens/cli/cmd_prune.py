"""``reachlens prune MODEL --layers L --fraction F --out FOLDER``: magnitude-prune layers into a new checkpoint."""

from __future__ import annotations

import argparse

from reachlens.cli._common import comma_list, echo
from reachlens.cli.flags import MODEL_HELP

NAME = "prune"
HELP = "unstructured magnitude pruning of chosen layers, saved as a loadable HuggingFace folder"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--layers", type=comma_list("--layers", int), required=True, help="e.g. 3 or 2,3")
    p.add_argument("--fraction", type=float, default=0.5, help="share of each matrix's smallest |w| set to zero")
    p.add_argument("--components", type=comma_list("--components", str), default=["mlp"], help="mlp, attn and/or layer (both)")
    p.add_argument("--out", required=True, help="new folder for the pruned checkpoint (must be empty)")
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.models.pruning import PruneConfig, prune_checkpoint

    config = PruneConfig(tuple(args.layers), args.fraction, tuple(args.components))
    out = prune_checkpoint(args.model, args.out, config)
    echo(f"pruned {config.fraction:.0%} of {', '.join(config.components)} weights in layer(s) "
          f"{', '.join(map(str, config.layers))} of {args.model}   -> {out} (load it with reachlens.load_model)")
    return 0
