"""The one table of the flags commands share: each group a frozen dataclass whose fields are its flags.

A field is one flag: its name the ``args`` attribute (``dest``), its default the flag's default, its metadata the
flag's spelling, type, help and argparse action (:func:`flag`), as :mod:`reachlens.probes.spec` reads a probe
family's keys from its fields. A command names the groups it takes (:func:`add_flags`, all of a group or ``only``
some of its flags), so a flag means one thing, with one type and one default, in every command that takes it
(``tests/cli/test_flags.py`` checks every subcommand's parser against it):

* :class:`ModelFlags`: the model and where it runs (``MODEL``, ``--device``, ``--dtype``, ``--trust-remote-code``);
* :class:`TaskFlags`: the questions (``--task``, ``--data``, ``--split``, ``--n``);
* :class:`ProtocolFlags`: how a question is decoded, the :class:`~reachlens.protocol.Protocol`'s fields: the budget
  ``--k`` (the one spelling of a budget K, samples or route evaluations), ``--temperature``, ``--top-p``,
  ``--max-new-tokens`` (default: the task's own, else 256, in every command), ``--prompt-format``, ``--system``,
  ``--stop`` and ``--seed``, the seed of the sample stream and nothing else (a seed of anything else is named for
  what it seeds: ``--search-seed``, ``--task-seed``, ``--train-seed``, ``--control-seed``);
* :class:`ExecutionFlags`: who decodes and in what batches, the :class:`~reachlens.execution.ExecConfig`'s fields
  (``--max-batch-rows``, default ExecConfig's; ``--workers``, ``--ray``, ``--gpus-per-worker``), for every command
  whose study decodes on the runner; :class:`BackendFlags` (``--backend``, ``--device-map``) where one model loads.

A command that presets a shared flag to another default (the demo's ``--n 300``) says so in its module's ``PRESETS``
(flag -> why). An old spelling stays a hidden alias that sets the new flag and notes the new name once
(:func:`renamed`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Any

from reachlens.cli._types import nonneg_float, positive_int
from reachlens.execution import DTYPES, ExecConfig

__all__ = ["BackendFlags", "ExecutionFlags", "GROUPS", "ModelFlags", "ProtocolFlags", "TaskFlags", "add_flags", "flag",
           "flag_of", "renamed"]

MODEL_HELP = ("zoo:NAME, real:NAME (`reachlens zoo real`), a local HuggingFace folder, a GGUF file, a PEFT adapter "
              "folder (on the base its adapter_config.json names), or a hub name")
_EXEC = {f.name: f.default for f in dataclasses.fields(ExecConfig)}


def flag(default: Any, help: str, *, name: str | None = None, **argparse_kwargs: Any) -> Any:
    """A field of a flag group: ``default``, ``help`` and how argparse reads it (``type``, ``action``, ``choices``,
    ``metavar``, ``required``, ``nargs``, ``const``); ``name`` the flag (default ``--`` and the field's name with
    dashes), ``positional`` for an argument without dashes."""
    return field(default=default, metadata={"help": help, "name": name, "argparse": argparse_kwargs})


@dataclass(frozen=True)
class ModelFlags:
    """The model and where it runs."""

    model: str | None = flag(None, MODEL_HELP, name="model")
    device: str = flag(_EXEC["device"], "where the model runs: cpu, cuda, cuda:1, mps (default cpu)")
    dtype: str = flag(_EXEC["dtype"], "weights and activations (default float32; bfloat16 on a GPU halves memory)",
                      choices=DTYPES)
    trust_remote_code: bool = flag(False, "allow the model's own code to run", action="store_true")


@dataclass(frozen=True)
class TaskFlags:
    """The questions."""

    task: str | None = flag(None, "task name (arith, arith_hard, gsm8k, arc, math500, piqa, logiqa, jsonl, csv)",
                            required=True)
    data: str | None = flag(None, "a local data file (or a copy of the hub dataset's folder); without it gsm8k, arc, "
                                  "math500, piqa and logiqa are read from the Hugging Face hub, as lm-eval-harness "
                                  "reads them")
    split: str = flag("test", "the split to read (default test)")
    n: int | None = flag(None, "use the first N questions (default all)", type=positive_int("--n"))


@dataclass(frozen=True)
class ProtocolFlags:
    """How a question is decoded and graded (the protocol's fields)."""

    k: int = flag(64, "the budget K of O_K: samples per question (route evaluations in `route`; default 64)",
                  type=positive_int("--k"))
    temperature: float = flag(0.8, "sampling temperature of the K samples (default 0.8; the deployment is greedy)",
                              type=nonneg_float("--temperature"))
    top_p: float = flag(1.0, "nucleus sampling of the K samples (default 1.0: off)", type=float)
    max_new_tokens: int | None = flag(None, "decode length of every completion (default: the task's own, else 256)",
                                      type=positive_int("--max-new-tokens"))
    prompt_format: str = flag("default", "the task's prompt format (default: its own); chat: its text as the user "
                                         "turn of the model's chat template (chat:NAME: format NAME's text), as an "
                                         "instruct model is deployed")
    system: str | None = flag(None, "system turn of --prompt-format chat (default: the chat template's own)")
    stop: list[str] | None = flag(None, "also stop at STR (repeatable; added to the task's own stop strings; escapes "
                                        "such as \\n are decoded)", action="append", metavar="STR")
    seed: int = flag(0, "seed of the sample stream: sample j of question q depends on (seed, q, j) alone; a probe "
                        "that names no seed of its own takes it (default 0)", type=int)


@dataclass(frozen=True)
class ExecutionFlags:
    """Who decodes, and in what batches (the execution settings)."""

    max_batch_rows: int = flag(_EXEC["max_batch_rows"], f"most completions decoded together (memory bound; fixes the "
                               f"slices a resumed run decodes; default {_EXEC['max_batch_rows']})",
                               type=positive_int("--max-batch-rows"))
    workers: int | None = flag(None, "processes decoding side by side, one model replica and one torch thread each "
                                     "(with --ray: Ray actors, default 2; without: default 1, this process)",
                               type=positive_int("--workers"))
    ray: str | None = flag(None, "send the question slices to Ray actors: a cluster's address (HOST:PORT, auto), or "
                                 "none to start a local cluster (needs reachlens[ray])",
                           nargs="?", const="local", metavar="ADDRESS")
    gpus_per_worker: float = flag(0.0, "with --ray: GPUs each actor reserves (default 0: CPU)", type=float,
                                  metavar="G")


@dataclass(frozen=True)
class BackendFlags:
    """Who draws the completions, and a model spread over several devices."""

    backend: str = flag("engine", "who draws the completions: reachlens' engine (hooks live) or vLLM (no hooks; see "
                                  "docs/scale.md for its install); part of the run's identity",
                        choices=("engine", "vllm"))
    device_map: str | None = flag(None, "spread a model larger than one GPU over several (HuggingFace device_map, "
                                        "e.g. auto); replaces --device", metavar="MAP")


GROUPS: tuple[type, ...] = (ModelFlags, TaskFlags, ProtocolFlags, ExecutionFlags, BackendFlags)
"""Every group of the table."""


def _spelling(f: dataclasses.Field) -> str:
    return f.metadata["name"] or "--" + f.name.replace("_", "-")


def flag_of(name: str) -> dataclasses.Field | None:
    """The table's field of the flag spelled ``name`` (``--max-batch-rows``, ``model``); None when no group has it."""
    for group in GROUPS:
        for f in dataclasses.fields(group):
            if _spelling(f) == name:
                return f
    return None


def add_flags(p: argparse.ArgumentParser, group: type, *, only: tuple[str, ...] | None = None,
              defaults: dict[str, Any] | None = None, help: dict[str, str] | None = None) -> None:
    """Add ``group``'s flags (those named in ``only``, by field name, when given) to ``p``: each with the table's
    spelling, type and help. ``defaults`` presets some to another default (the command lists them in its
    ``PRESETS``); ``help`` words some for the command (what its K counts, say), never their meaning."""
    fields = dataclasses.fields(group)
    unknown = set(only or ()) - {f.name for f in fields}
    if unknown:
        raise RuntimeError(f"{group.__name__} has no flag {sorted(unknown)}")
    for f in fields:
        if only is not None and f.name not in only:
            continue
        kwargs = dict(f.metadata["argparse"])
        if f.name in (defaults or {}):
            kwargs.pop("required", None)  # a preset default: the flag may be left out
        default = (defaults or {}).get(f.name, f.default)
        text = (help or {}).get(f.name, f.metadata["help"])
        if f.metadata["name"] == f.name:  # a positional argument
            p.add_argument(f.name, help=text)
        else:
            p.add_argument(_spelling(f), dest=f.name, default=default, help=text, **kwargs)


def renamed(p: argparse.ArgumentParser, old: str, new: str, *, type: Any = None) -> None:
    """Keep ``old`` as a hidden alias of ``new`` (a flag this parser has): it sets ``new``'s value and notes the new
    spelling, one line on stderr."""
    target = next(a for a in p._actions if new in a.option_strings)

    class Alias(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            print(f"{parser.prog}: note: {old} is now {new}; use {new}", file=sys.stderr)
            setattr(namespace, target.dest, values)

    p.add_argument(old, dest=target.dest, action=Alias, type=type or target.type, default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS, metavar=target.metavar)

