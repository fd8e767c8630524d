"""Argument types and the user-error convention shared by every ``reachlens`` subcommand."""

from __future__ import annotations

import argparse

from reachlens.cli._types import comma_list, nonneg_float, positive_int
from reachlens.cli.flags import ExecutionFlags, ModelFlags, ProtocolFlags, TaskFlags, add_flags
from reachlens.errors import ReachlensError
from reachlens.escape import visible
from reachlens.execution import DTYPES

__all__ = [
    "CLIError", "DTYPES", "add_model_args", "add_protocol_args", "add_stop_arg", "add_study_args", "add_task_args",
    "comma_list", "echo", "load_model_from_args", "nonneg_float", "open_study", "positive_int", "protocol_from_args",
    "read_vector", "stops_from_args",
]


class CLIError(ReachlensError):
    """A user error in the command line: printed as one line, exit status 2."""


def echo(*parts: object, file=None) -> None:
    """``print`` for what a command shows: lines of text, every control character but newline and tab written
    as its escape (:func:`reachlens.escape.visible`), so a string from a shared run (a model spec, a question id,
    a folder name) never drives the terminal."""
    print(visible(" ".join(map(str, parts)), newlines=True), file=file)


def add_task_args(p: argparse.ArgumentParser) -> None:
    """The task group of the flag table (:class:`~reachlens.cli.flags.TaskFlags`)."""
    add_flags(p, TaskFlags)


def add_protocol_args(p: argparse.ArgumentParser) -> None:
    """The protocol group of the flag table (:class:`~reachlens.cli.flags.ProtocolFlags`): budget, temperature,
    top-p, decode length, prompt format, seed, stops."""
    add_flags(p, ProtocolFlags)


def add_format_args(p: argparse.ArgumentParser) -> None:
    """``--prompt-format`` (the task's, or ``chat[:NAME]``: the model's chat template) and ``--system``."""
    add_flags(p, ProtocolFlags, only=("prompt_format", "system"))


def add_stop_arg(p: argparse.ArgumentParser) -> None:
    """``--stop STR`` (repeatable): stop strings added to the task's own (:func:`stops_from_args`)."""
    add_flags(p, ProtocolFlags, only=("stop",))


def _unescaped(s: str) -> str:
    """``s`` with its escapes (``\\n``, ``\\t``, ``\\x41``) decoded; a broken one is a one-line error."""
    try:
        return s.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError as err:
        raise CLIError(f"--stop {s!r} holds a broken escape ({err.reason}); write a backslash as \\\\ or complete "
                       "the escape (\\n, \\t, \\x41)") from None


def stops_from_args(args: argparse.Namespace, task) -> tuple[str, ...] | None:
    """The task's stop strings followed by ``--stop``'s (None when no ``--stop`` was given: the task's)."""
    if not args.stop:
        return None
    extra = [_unescaped(s) if "\\" in s else s for s in args.stop]
    if any(not s for s in extra):
        raise CLIError("--stop '' is empty; give the text to stop at")
    return tuple(dict.fromkeys((*task.stop, *extra)))




def add_model_args(p: argparse.ArgumentParser) -> None:
    """The model group of the flag table (:class:`~reachlens.cli.flags.ModelFlags`)."""
    add_flags(p, ModelFlags)


def load_model_from_args(args: argparse.Namespace):
    """The model named by :func:`add_model_args`' flags, loaded on ``--device`` in ``--dtype``."""
    from reachlens.models import ModelSource

    return ModelSource(args.model, device=args.device, dtype=args.dtype,
                       trust_remote_code=args.trust_remote_code).load()


def protocol_from_args(args: argparse.Namespace, task):
    """The resolved protocol of :func:`add_protocol_args`' flags; a chat format is bound to the chat
    template of ``args.model``'s tokenizer (read without the weights: a model without one is refused here)."""
    from reachlens.protocol import Protocol
    from reachlens.tasks.chat import bind_chat, chat_inner

    protocol = Protocol(
        task=args.task, split=args.split, k=args.k, temperature=args.temperature, top_p=args.top_p,
        max_new_tokens=args.max_new_tokens or task.max_new_tokens or 256,
        prompt_format=args.prompt_format, seed=args.seed, stop=stops_from_args(args, task),
        backend=getattr(args, "backend", "engine"), system=getattr(args, "system", None),
    ).resolved(task)
    if chat_inner(protocol.prompt_format) is not None and getattr(args, "model", None):
        from reachlens.models import load_tokenizer

        tokenizer = load_tokenizer(args.model, trust_remote_code=getattr(args, "trust_remote_code", False))
        protocol = bind_chat(protocol, tokenizer, model=args.model)
    return protocol


def add_study_args(p: argparse.ArgumentParser) -> None:
    """MODEL, ``--sets`` (a sets.json or the recognize directory), ``--out``, ``--allow-other-model``, and the
    execution group (a sweep decodes on the runner: ``--workers``, ``--ray``, ``--max-batch-rows``)."""
    add_model_args(p)
    add_flags(p, ExecutionFlags)
    p.add_argument("--sets", required=True, help="sets.json written by `reachlens recognize` (or its directory)")
    p.add_argument("--allow-other-model", action="store_true",
                   help="use the sets on a model other than the one they were chosen on")
    p.add_argument("--out", required=True, help="run directory (decoded slices are kept: a re-run resumes it)")


def open_study(args: argparse.Namespace):
    """(model, task, sets) for a causal command: the sets' task rebuilt, the model loaded and checked, the sets' batch
    rows ``--max-batch-rows``."""
    import dataclasses

    from reachlens.cli._common import CLIError
    from reachlens.studies.recognition import EvalSets

    from reachlens.store import RunDir

    RunDir(args.out).check_target()  # a file or a folder of other files: refused before the model loads
    sets = EvalSets.load(args.sets)
    if sets.task is None:
        raise CLIError(f"{args.sets!r} does not say which task it was chosen on; re-run `reachlens recognize`")
    task = sets.task.load()
    model = load_model_from_args(args)
    if not args.allow_other_model:
        sets.check_model(model)
    config = dataclasses.replace(sets.config, max_batch_rows=args.max_batch_rows)
    return model, task, dataclasses.replace(sets, config=config)


def read_vector(path: str):
    """A 1-D float vector from ``.npy`` (no pickles) or ``.json`` (a list of numbers), checked by
    :func:`~reachlens.interventions.direction_file.read_direction`."""
    import torch

    from reachlens.interventions.direction_file import read_direction

    return torch.as_tensor(read_direction(path).astype("float32")).flatten()
