"""``reachlens steer MODEL --sets DIR --layer L --out DIR``: rescue (-alpha v) and induction (+alpha v)."""

from __future__ import annotations

import argparse

from reachlens.cli._common import add_study_args, comma_list, read_vector

NAME = "steer"
HELP = "steer a block's output along v: rescue on the failure set (-alpha v), induction on the healthy panel"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    add_study_args(p)
    p.add_argument("--layer", type=int, required=True)
    p.add_argument("--component", choices=("mlp", "attn", "layer"), default="mlp")
    p.add_argument("--alphas", type=comma_list("--alphas", float), default=None,
                   help="absolute alphas, e.g. 0,1,2,4 (default: 0, 0.5, 1, 2, 4, 8 x the mean difference's norm)")
    p.add_argument("--direction", default=None,
                   help="a .npy or .json file with a d_model vector (default: mean(failure) - mean(healthy))")
    p.add_argument("--control-seed", type=int, default=None, help="also steer along a random unit vector (seeded)")
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.cli._common import open_study
    from reachlens.studies.causal import markdown_table, steer_sweep

    model, task, sets = open_study(args)
    direction = read_vector(args.direction) if args.direction else None
    result = steer_sweep(model, task, sets, args.layer, alphas=args.alphas, direction=direction,
                         component=args.component, control_seed=args.control_seed, allow_other_model=True)
    result.save(args.out)
    print(markdown_table(result.table))
    print(f"direction: {result.meta['direction_source']} at {result.meta['hook']} (norm {result.meta['direction_norm']:.3f})"
          f"   -> {args.out}")
    return 0
