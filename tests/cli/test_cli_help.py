"""Every option and argument of every ``reachlens`` command says what it is in ``--help``; the public API
exports what the CLI's verbs call."""

from __future__ import annotations

import argparse

import reachlens
from reachlens.cli.main import build_parser


def _undocumented(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> list[str]:
    """``command option`` for every action under ``parser`` (subcommands included) that has no help text.
    An action hidden on purpose (``help=argparse.SUPPRESS``, a retired flag kept for old command lines) is
    not listed."""
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += _undocumented(sub, (*path, name))
        elif not action.help or not action.help.strip():
            missing.append(f"{' '.join(path)} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_cli_option_has_help():
    parser, mods = build_parser()
    assert {"audit", "compare", "demo", "report", "route"} <= set(mods)
    assert _undocumented(parser, ("reachlens",)) == []


def test_the_walk_finds_an_option_without_help():
    parser = argparse.ArgumentParser(prog="x")
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("verb", help="a verb")
    p.add_argument("--documented", help="it says what it is")
    p.add_argument("--bare")
    p.add_argument("--hidden", help=argparse.SUPPRESS)
    nested = p.add_subparsers(dest="kind").add_parser("deeper", help="a nested verb")
    nested.add_argument("path")
    assert _undocumented(parser, ("x",)) == ["x verb --bare", "x verb deeper path"]


def test_compare_is_exported_like_audit():
    from reachlens.studies import compare

    assert reachlens.compare is compare and "compare" in reachlens.__all__
    assert reachlens.Comparison.kind == "comparison"
