"""``reachlens zoo list``: the shipped checkpoints with their measured D and O_64."""

from __future__ import annotations

import argparse

from reachlens.cli._common import echo

NAME = "zoo"
HELP = "list the shipped model zoo"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("action", choices=["list"], help="list: print the table of zoo checkpoints")
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.cli._common import CLIError
    from reachlens.models.zoo import zoo_root, zoo_table

    table = zoo_table()
    if table.empty:
        raise CLIError(f"no zoo checkpoints under {zoo_root()}; build them with `make zoo`")
    echo(table.to_string(index=False, float_format=lambda x: f"{x:.3f}", na_rep="-"))
    return 0
