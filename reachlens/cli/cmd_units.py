"""``reachlens units MODEL --sets DIR --layer L --out DIR``: silence the top-k MLP units along v."""

from __future__ import annotations

import argparse

from reachlens.cli._common import add_study_args, comma_list, echo
from reachlens.cli.flags import renamed

NAME = "units"
HELP = "rank a block's MLP units by their contribution along v; silence the top k; recovery of the block's repair"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    add_study_args(p)
    p.add_argument("--layer", type=int, required=True, help="the block whose MLP units are ranked (0-based)")
    p.add_argument("--units", type=comma_list("--units", int), default=[32],
                   help="numbers of units to silence, e.g. 8,16,32,64 (default 32)")
    p.add_argument("--direction", default=None, help="a .npy or .json d_model vector (default: mean difference)")
    p.add_argument("--control-seed", type=int, default=None, help="seed of the random-units control (default 0)")
    p.add_argument("--no-control", action="store_true", help="skip the random-units control")
    renamed(p, "--k", "--units")  # --k is the budget K in every other command
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.cli._common import open_study, read_vector
    from reachlens.cli._scale_args import sweep_running
    from reachlens.cli._progress import RunProgress
    from reachlens.records import markdown_table
    from reachlens.studies.causal import units_sweep

    model, task, sets = open_study(args)
    direction = read_vector(args.direction) if args.direction else None
    with RunProgress(f"units {args.model} L{args.layer}", "questions") as bar:
        result = units_sweep(model, task, sets, args.layer, ks=args.units, direction=direction,
                             control_seed=None if args.no_control else (args.control_seed or 0), allow_other_model=True,
                             **sweep_running(args, bar))
    echo(markdown_table(result.table, missing="-"))
    echo(f"top units of block {args.layer}: {result.meta['top_units'][:10]} ...   -> {args.out}")
    return 0
