"""The ``reachlens`` command: a thin layer over the Python API.

Every subcommand lives in its own module ``reachlens/cli/cmd_*.py`` with ``NAME``, ``HELP``,
``register(subparsers)`` and ``run(args) -> int``; this module collects them. Bad arguments and
user errors (:class:`~reachlens.errors.ReachlensError`) exit with status 2 and one line saying what
is wrong and how to fix it; a :class:`~reachlens.errors.ReachlensWarning` is one ``note:`` line;
Ctrl-C is one line and exit status 130 (finished parts of an audit are on disk already); a full disk
is one line naming the file and the space left (exit 2); a reader that closed the pipe ends the
command quietly (exit 141, as SIGPIPE ends a Unix tool). Anything else is a bug and keeps its traceback.
What a command prints goes through :func:`reachlens.cli._common.echo` and these lines through
:func:`reachlens.escape.visible`: no control byte from a stored run reaches the terminal.

Library messages name the Python parameter to change (``data=PATH``, ``allow_other_model=True``,
``out=``, ``device='cpu'``); :func:`as_flags` maps them to the command's flags before printing. Every
run directory a command writes records the command line in its ``run.json``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import re
import signal
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

__all__ = ["main", "build_parser", "command_modules", "as_flags"]

# library parameter (as a message names it) -> the flag that sets it
_FLAGS = (
    (re.compile(r"\ballow_other_model=True\b"), "--allow-other-model"),
    (re.compile(r"\btrust_remote_code=True\b"), "--trust-remote-code"),
    (re.compile(r"\bforce=True\b"), "--force"),
    (re.compile(r"\bdata=PATH\b"), "--data PATH"),
    (re.compile(r"\bdata=(?=[)\s,;]|$)"), "--data"),
    (re.compile(r"\bout=(?=[)\s,;]|$)"), "--out"),
    (re.compile(r"\bdevice='([^']*)'"), r"--device \1"),
)


def as_flags(message: str) -> str:
    """A library message with the parameters it names written as this command's flags.

    >>> as_flags("pass a local file with data=PATH, or pass allow_other_model=True")
    'pass a local file with --data PATH, or pass --allow-other-model'
    """
    for pattern, flag in _FLAGS:
        message = pattern.sub(flag, message)
    return message


def command_modules() -> dict[str, ModuleType]:
    """``cmd_*`` modules of this package by command name, in name order."""
    import reachlens.cli as pkg

    mods = {}
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("cmd_"):
            mod = importlib.import_module(f"reachlens.cli.{info.name}")
            if mod.NAME in mods:
                raise RuntimeError(f"two CLI modules define the command {mod.NAME!r}")
            mods[mod.NAME] = mod
    return mods


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, ModuleType]]:
    from reachlens import __version__

    ap = argparse.ArgumentParser(prog="reachlens", description="Realized vs reachable audits of causal LMs.")
    ap.add_argument("--version", action="version", version=f"reachlens {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    mods = command_modules()
    for mod in mods.values():
        mod.register(sub)
    return ap, mods


def main(argv: Sequence[str] | None = None) -> int:
    parser, mods = build_parser()
    args = parser.parse_args(argv)
    from reachlens._verbosity import quiet_dependencies
    from reachlens.errors import DISK_FULL, ReachlensError, ReachlensWarning, disk_full
    from reachlens.escape import visible

    from reachlens.store import recording_command

    prefix = f"reachlens {args.command}"
    with warnings.catch_warnings():
        show = warnings.showwarning

        def one_line(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, ReachlensWarning):
                print(f"{prefix}: note: {visible(as_flags(str(message)), newlines=True)}", file=sys.stderr)
            else:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = one_line
        warnings.simplefilter("always", ReachlensWarning)
        try:
            command = ["reachlens", *(sys.argv[1:] if argv is None else [str(a) for a in argv])]
            with quiet_dependencies(), recording_command(command):  # the libraries stay quiet
                code = mods[args.command].run(args)
                sys.stdout.flush()  # a closed pipe (`reachlens show DIR | head`) shows here, not at exit
                return code
        except ReachlensError as err:
            print(f"{prefix}: error: {visible(as_flags(str(err)), newlines=True)}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"{prefix}: interrupted; finished work is saved (re-run the same command to resume)", file=sys.stderr)
            return 130
        except BrokenPipeError:  # the reader went away: stop quietly, as a Unix tool killed by SIGPIPE does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
            return 128 + signal.SIGPIPE
        except OSError as err:  # a full disk in a writer that did not say so itself
            if err.errno not in DISK_FULL:
                raise
            print(f"{prefix}: error: {visible(disk_full(err.filename, err), newlines=True)}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main())
