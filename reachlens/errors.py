"""The error class for user errors: bad input, a refused run, a missing file.

A :class:`ReachlensError` is something the user can fix; its message names the bad value with
``!r`` and says how to fix it. The CLI prints it as one line and exits with status 2. Anything else
that escapes is a bug and keeps its traceback. It is deliberately not a ``ValueError``: a
``ValueError`` or ``KeyError`` raised by a bug (in reachlens, pandas, torch) must never be mistaken
for a user error.

Two subclasses keep a standard class for Python callers who already catch it: a failed registry
lookup (an unknown task, grader, strategy) is an :class:`UnknownNameError`, also a ``LookupError``;
a missing input file is a :class:`MissingFileError`, also a ``FileNotFoundError``.

:class:`ReachlensWarning` is a note about something that ran but deserves a word (fewer questions
than asked for, an audit directory written before data identity was recorded); the CLI prints it as
one line.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

__all__ = ["DiskFullError", "MissingFileError", "ModelLoadError", "ReachlensError", "ReachlensWarning", "UnknownNameError", "disk_full",
           "regular_file"]

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
"""The ``errno`` of a write refused for want of space (the device is full, or the user's quota is)."""


class ReachlensError(Exception):
    """A user error: printed by the CLI as one line, exit status 2."""

    def __str__(self) -> str:
        # one line, whatever the arguments (a LookupError subclass would otherwise print its repr)
        return " ".join(str(a) for a in self.args).replace("\n", " ") if self.args else ""


class UnknownNameError(ReachlensError, LookupError):
    """A name that no registry knows (task, grader, prompt format, strategy, ...); also a ``LookupError``."""


class MissingFileError(ReachlensError, FileNotFoundError):
    """An input file or folder that does not exist; also a ``FileNotFoundError``."""

    def __init__(self, message: str) -> None:
        # FileNotFoundError(errno, strerror) would reformat a message; keep ours as the only argument
        Exception.__init__(self, message)


class DiskFullError(ReachlensError):
    """A write that found no space left: names the file and the space free beside it."""


def disk_full(path: str | os.PathLike | None, err: OSError | None = None) -> DiskFullError:
    """The one-line error for a write of ``path`` refused by a full device or quota (``err``).

    >>> str(disk_full("runs/x/run.json"))  # doctest: +SKIP
    "no space left to write 'runs/x/run.json' (0.0 MiB free there): ..."
    """
    where = Path(path) if path is not None else Path.cwd()
    folder = next((p for p in (where, *where.parents) if p.is_dir()), Path.cwd())
    try:
        free = f"{shutil.disk_usage(folder).free / (1 << 20):.1f} MiB free there"
    except OSError:
        free = "free space unknown"
    what = "quota exceeded" if err is not None and err.errno == errno.EDQUOT else "no space left"
    return DiskFullError(
        f"{what} to write {str(where)!r} ({free}); make room (or write elsewhere) and run the same command "
        "again: what was written before is kept"
    )


class ReachlensWarning(UserWarning):
    """A note for the user about a run that went ahead (the CLI prints it as one line)."""


def regular_file(path: str | os.PathLike, what: str, *, follow_links: bool = False,
                 fix: str = "reachlens writes none there: it was made by hand; remove it") -> Path:
    """``path`` if it is a regular file; a missing one is a :class:`MissingFileError`, anything else there (a
    link unless ``follow_links``, a FIFO, a device, a folder) a one-line error naming it and ``fix``: a run's files
    are regular files, so reading one never follows a link out of the run, blocks on a FIFO or reads
    ``/dev/zero`` forever.

    >>> regular_file("/dev/zero", "direction file", follow_links=True)  # doctest: +SKIP
    ReachlensError: direction file '/dev/zero' is not a regular file (a link, a FIFO, a device or a folder); ...
    """
    p = Path(path)
    try:
        mode = (os.stat if follow_links else os.lstat)(p).st_mode
    except FileNotFoundError:
        raise MissingFileError(f"{what} {str(p)!r} does not exist") from None
    except OSError as err:
        raise ReachlensError(f"{what} {str(p)!r} cannot be read ({err.strerror})") from None
    if not stat.S_ISREG(mode):
        raise ReachlensError(f"{what} {str(p)!r} is not a regular file (a link, a FIFO, a device or a folder); {fix}")
    return p


class ModelLoadError(ReachlensError):
    """A model spec that cannot be loaded; the message says why and what to do."""
