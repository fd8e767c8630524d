"""MkDocs hooks of reachlens' site: pages made from what the package itself holds, so nothing is copied.

* ``zoo-cards.md`` is generated from every shipped ``MODEL_CARD.md`` (``reachlens/assets/zoo/NAME``), each card's
  headings one level down, in the zoo's order;
* ``<!-- reachlens:zoo-table -->`` on a page becomes :func:`reachlens.models.zoo.zoo_table` (what
  ``reachlens zoo list`` prints, read from the cards' ``card.json``);
* ``<!-- reachlens:cli-help -->`` becomes the ``--help`` of every command and subcommand, from the parser itself.
"""

from __future__ import annotations

import argparse
import os
import re

from mkdocs.structure.files import File

os.environ.setdefault("COLUMNS", "100")  # argparse wraps its help at the terminal's width: fix it

_FENCE = re.compile(r"^\s*(```|~~~)")


def _shift_headings(text: str) -> str:
    """Every ATX heading outside code fences one level down (``#`` -> ``##``)."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,5} ", line):
            line = "#" + line
        out.append(line)
    return "\n".join(out) + "\n"


def _cards_page() -> str:
    from reachlens.models.zoo import zoo_entries, zoo_root

    parts = ["# Model cards\n",
             "Each shipped checkpoint's `MODEL_CARD.md`, as it lies in the package "
             f"(`reachlens/assets/zoo/NAME/`, {len(zoo_entries())} checkpoints under `{zoo_root().name}/`): how it was "
             "made, with the exact command, and what its audits measured, with the command that reproduces them.\n"]
    for entry in zoo_entries():
        card = entry.path / "MODEL_CARD.md"
        if card.is_file():
            parts.append(_shift_headings(card.read_text()))
    return "\n".join(parts)


def _zoo_table() -> str:
    from reachlens.models.zoo import zoo_table
    from reachlens.records import markdown_table

    table = zoo_table()
    table["parent"] = table["parent"].replace("", "-")
    table["parameters"] = [f"{int(v):,}" for v in table["parameters"]]
    table["train_s"] = [f"{v:,.0f}" for v in table["train_s"]]
    table["MB"] = [f"{v:.1f}" for v in table["MB"]]
    return markdown_table(table, missing="-")


def _cli_help() -> str:
    from reachlens.cli.main import build_parser

    parser, _ = build_parser()
    blocks = []

    def walk(p: argparse.ArgumentParser, path: str) -> None:
        blocks.append(f"### `{path}`\n\n```text\n{p.format_help().rstrip()}\n```\n")
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")

    walk(parser, "reachlens")
    return "\n".join(blocks)


_MARKERS = {"<!-- reachlens:zoo-table -->": _zoo_table, "<!-- reachlens:cli-help -->": _cli_help}


def on_files(files, config):
    files.append(File.generated(config, "zoo-cards.md", content=_cards_page()))
    return files


def on_page_markdown(markdown, page, config, files):
    for marker, make in _MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown
