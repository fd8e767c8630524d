"""One table of shared flags (issue 55, item 2): a flag name means one thing across every subcommand.

Before: ``--seed`` seeded four things, the budget was ``--k``, ``--budget`` and ``--budget-k``, ``--max-batch-rows`` had
two defaults, ``route`` and ``recognize`` decoded 96 tokens where ``audit`` and ``probe`` took the task's own. Now
the shared flags come from :mod:`reachlens.cli.flags` and every subcommand's parser is checked against it here.
"""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from reachlens.cli.flags import GROUPS, flag_of
from reachlens.cli.main import build_parser, main


def _subparsers() -> dict[str, tuple[argparse.ArgumentParser, object]]:
    """Every subcommand's parser by name, a nested one too (``control temperature``), with its command's module."""
    parser, mods = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    found = {}
    for name, p in sub.choices.items():
        found[name] = (p, mods[name])
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                found.update({f"{name} {inner}": (q, mods[name]) for inner, q in a.choices.items()})
    return found


def _flags(p: argparse.ArgumentParser):
    """Each visible option of a parser, by each of its spellings (hidden aliases of renamed flags left out)."""
    for a in p._actions:
        if a.dest == "help" or a.help == argparse.SUPPRESS:
            continue
        for name in a.option_strings or [a.dest]:
            yield name, a


def test_a_table_flag_has_the_table_dest_type_and_default_in_every_command():
    checked = 0
    for command, (p, mod) in _subparsers().items():
        presets = getattr(mod, "PRESETS", {})
        for name, a in _flags(p):
            f = flag_of(name)
            if f is None:
                continue
            checked += 1
            assert a.dest == f.name, (command, name)
            assert a.type is f.metadata["argparse"].get("type"), f"{command} {name}: its own type, not the table's"
            if name in presets:
                assert a.default != f.default, f"{command} presets {name} to the table's own default; drop it"
            else:
                assert a.default == f.default, f"{command} {name} defaults to {a.default!r}, the table {f.default!r}"
    assert checked > 50


def test_a_shared_flag_outside_the_table_means_one_thing_too():
    """A flag several commands define themselves has one dest and one kind of type everywhere, and one default
    across the commands that do not preset it."""
    by_name: dict[str, list[tuple[str, str, str, object, bool]]] = {}
    for command, (p, mod) in _subparsers().items():
        for name, a in _flags(p):
            if flag_of(name) is None:
                kind = getattr(a.type, "__qualname__", repr(a.type))
                by_name.setdefault(name, []).append((command, a.dest, kind, a.default, name in getattr(mod, "PRESETS", {})))
    shared = {name: uses for name, uses in by_name.items() if len(uses) > 1}
    assert {"--out", "--layer", "--direction", "--control-seed", "--sets"} <= set(shared)
    for name, uses in shared.items():
        assert len({(dest, kind) for _, dest, kind, _, _ in uses}) == 1, (name, uses)
        defaults = {repr(default) for _, _, _, default, preset in uses if not preset}
        assert len(defaults) <= 1, (name, uses)


def test_every_preset_names_a_flag_the_command_has():
    for command, (p, mod) in _subparsers().items():
        names = {n for n, _ in _flags(p)}
        assert set(getattr(mod, "PRESETS", {})) <= names, command


def test_seed_is_the_sample_stream_and_other_seeds_are_named_for_what_they_seed():
    subs = _subparsers()
    for command, (p, _) in subs.items():
        for name, a in _flags(p):
            if name == "--seed":
                assert command in ("audit", "elicit", "probe"), f"{command} takes --seed without a sample stream"
                assert "sample stream" in a.help
    assert {"--search-seed"} <= {n for n, _ in _flags(subs["route"][0])}
    assert {"--task-seed"} <= {n for n, _ in _flags(subs["recognize"][0])}


def test_the_budget_is_spelled_k_and_decode_length_defaults_to_the_task_in_every_command():
    for command, (p, _) in _subparsers().items():
        names = {n for n, _ in _flags(p)}
        assert not names & {"--budget", "--budget-k", "--batch-size"} - ({"--batch-size"} if command == "recognize"
                                                                          else set()), command
        for name, a in _flags(p):
            if name == "--max-new-tokens":
                assert a.default is None, f"{command} decodes {a.default} tokens by default, not the task's own"


def test_every_command_whose_study_decodes_on_the_runner_takes_the_execution_group():
    execution = {("--" + f.name.replace("_", "-")) for f in dataclasses.fields(GROUPS[3])}
    for command in ("audit", "probe", "elicit", "demo", "control temperature", "control length"):
        names = {n for n, _ in _flags(_subparsers()[command][0])}
        assert execution <= names, (command, execution - names)


@pytest.mark.parametrize("argv, note, dest, value", [
    (["route", "zoo:base", "--task", "arith", "--space", "skip", "--search", "random", "--budget", "3", "--out", "x"],
     "--budget is now --k", "k", 3),
    (["route", "zoo:base", "--task", "arith", "--space", "skip", "--search", "random", "--seed", "5", "--out", "x"],
     "--seed is now --search-seed", "search_seed", 5),
    (["recognize", "zoo:base", "--task", "arith_mc", "--seed", "4", "--out", "x"], "--seed is now --task-seed",
     "task_seed", 4),
    (["units", "zoo:base", "--sets", "s", "--layer", "1", "--k", "8,16", "--out", "x"], "--k is now --units",
     "units", [8, 16]),
    (["demo", "--budget-k", "64"], "--budget-k is now --extended-k", "extended_k", 64),
])
def test_an_old_spelling_still_works_and_names_the_new_one(capsys, argv, note, dest, value):
    parser, _ = build_parser()
    args = parser.parse_args(argv)
    assert getattr(args, dest) == value
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and note in err[0]


def test_elicit_takes_workers_and_ray(monkeypatch, tmp_path):
    parser, _ = build_parser()
    args = parser.parse_args(["elicit", "zoo:locked", "--task", "arith", "--workers", "2", "--out", str(tmp_path)])
    from reachlens.cli._scale_args import exec_from_args

    assert exec_from_args(args).workers == 2 and exec_from_args(args).max_batch_rows == 1024
    assert main(["elicit", "zoo:locked", "--task", "arith", "--gpus-per-worker", "1", "--out", str(tmp_path)]) == 2
