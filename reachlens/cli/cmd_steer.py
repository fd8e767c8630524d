"""``reachlens steer MODEL --sets DIR --layer L [--site SITE] --out DIR``: rescue (-alpha v) and induction (+alpha v).

``--site`` is a TransformerLens site (:mod:`reachlens.engine.sites`): ``mlp_out``, ``attn_out``, ``resid_post``
(the block's output), ...
"""

from __future__ import annotations

import argparse

from reachlens.cli._common import add_study_args, comma_list, echo, read_vector


NAME = "steer"
HELP = "steer one site of a block along v: rescue on the failure set (-alpha v), induction on the healthy panel"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    add_study_args(p)
    p.add_argument("--layer", type=int, required=True, help="the block whose site is steered (0-based)")
    p.add_argument("--site", default="mlp_out",
                   help="the TransformerLens site v is added to: mlp_out (default), attn_out, resid_post (the "
                        "block's output), resid_pre, mlp_post, ...")
    p.add_argument("--alphas", type=comma_list("--alphas", float), default=None,
                   help="absolute alphas, e.g. 0,1,2,4 (default: 0, 0.5, 1, 2, 4, 8 x the mean difference's norm)")
    p.add_argument("--direction", default=None,
                   help="a .npy or .json file with a vector of the site's width (d_model for mlp_out, attn_out, "
                        "resid_*; default: mean(failure) - mean(healthy) at the site)")
    p.add_argument("--control-seed", type=int, default=None, help="also steer along a random unit vector (seeded)")
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.cli._common import open_study
    from reachlens.cli._scale_args import sweep_running
    from reachlens.cli._progress import RunProgress
    from reachlens.records import markdown_table
    from reachlens.studies.causal import steer_sweep

    model, task, sets = open_study(args)
    direction = read_vector(args.direction) if args.direction else None
    with RunProgress(f"steer {args.model} L{args.layer} {args.site}", "questions") as bar:
        result = steer_sweep(model, task, sets, args.layer, alphas=args.alphas, direction=direction,
                             site=args.site, control_seed=args.control_seed, allow_other_model=True,
                             **sweep_running(args, bar))
    echo(markdown_table(result.table, missing="-"))
    echo(f"direction: {result.meta['direction_source']} at {result.meta['hook']} (norm {result.meta['direction_norm']:.3f})"
          f"   -> {args.out}")
    return 0
