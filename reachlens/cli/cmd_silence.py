"""``reachlens silence MODEL --sets DIR --out DIR``: zero-ablate each layer's MLP / attention / both.

Also holds the argument helpers that ``steer`` and ``units`` share (the model, the sets, the output).
"""

from __future__ import annotations

import argparse

from reachlens.cli._common import add_model_args

NAME = "silence"
HELP = "zero-ablate MLP / attention / whole layer per layer; repair (failure set) and break (healthy panel)"


def comma_list(name: str, kind):
    """An argparse type: ``"0,1,2"`` -> ``[0, 1, 2]`` with ``kind`` applied to each item."""

    def parse(s: str) -> list:
        try:
            return [kind(x) for x in s.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a comma-separated list, got {s!r}") from None

    return parse


def add_study_args(p: argparse.ArgumentParser) -> None:
    """MODEL, ``--sets`` (a sets.json or the recognize directory), ``--out``, ``--allow-other-model``."""
    add_model_args(p)
    p.add_argument("--sets", required=True, help="sets.json written by `reachlens recognize` (or its directory)")
    p.add_argument("--allow-other-model", action="store_true",
                   help="use the sets on a model other than the one they were chosen on")
    p.add_argument("--out", required=True, help="output directory for the tables")


def open_study(args: argparse.Namespace):
    """(model, task, sets) for a causal command: the sets' task rebuilt, the model loaded and checked."""
    from reachlens.cli._common import CLIError
    from reachlens.models import load_model
    from reachlens.studies.recognition import EvalSets

    sets = EvalSets.load(args.sets)
    if sets.task is None:
        raise CLIError(f"{args.sets!r} does not say which task it was chosen on; re-run `reachlens recognize`")
    task = sets.task.load()
    model = load_model(args.model, device=args.device, trust_remote_code=args.trust_remote_code)
    if not args.allow_other_model:
        sets.check_model(model)
    return model, task, sets


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    add_study_args(p)
    p.add_argument("--layers", type=comma_list("--layers", int), default=None, help="e.g. 0,1,2 (default: all)")
    p.add_argument("--components", type=comma_list("--components", str), default=["mlp", "attn", "layer"])
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.studies.causal import best_layer, markdown_table, silence_sweep

    model, task, sets = open_study(args)
    result = silence_sweep(model, task, sets, layers=args.layers, components=args.components, allow_other_model=True)
    result.save(args.out)
    print(markdown_table(result.table.drop(columns=["condition"])))
    if "mlp" in args.components:
        print(f"best MLP layer (repair - break): {best_layer(result.table)}   -> {args.out}")
    return 0
