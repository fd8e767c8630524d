"""Durable files: every file of a run is written to a unique temporary name, flushed to disk (``fsync``),
renamed into place, and its directory entry synced, so a ``kill -9`` or a power cut leaves whole files
only. JSON is written with ``NaN`` and infinities as ``null`` (a summary.json nobody can parse is worse
than an undefined number)."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import re
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.errors import DISK_FULL, MissingFileError, ReachlensError, disk_full, regular_file
from reachlens.escape import csv_safe

__all__ = [
    "JSON_BYTES", "TEMP_RE", "fsync_dir", "json_text", "present", "read_json", "read_parquet", "regular_file",
    "rerun_name", "single_name", "write_csv", "write_durably", "write_json", "write_parquet",
]

JSON_BYTES = 64 << 20
"""The largest JSON file of a run reachlens reads (a record or a summary is a few KiB)."""

TEMP_RE = re.compile(r"\..+\.\d+\.[0-9a-f]{8}\.tmp")
"""The names of temporary files (``.NAME.PID.RANDOM.tmp``): a dead writer's are removed by the next."""


def fsync_dir(path: Path) -> None:
    """Sync a directory's entries (a rename into it is durable after this)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # a platform that cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def single_name(name: Any, what: str) -> str:
    """``name`` if it is one path component (a folder name inside a run: a checkpoint's name, a rerun's); a name
    that could lead elsewhere (``..``, ``a/b``, an absolute path, empty) is a one-line error naming it, so
    nothing a record holds makes a reader leave the run's directory.

    >>> single_name("grpo--k=8", "checkpoint name")
    'grpo--k=8'
    """
    if not isinstance(name, str) or name in ("", ".", "..") or any(c in name for c in "/\\\0") or \
            Path(name).is_absolute():
        raise ReachlensError(f"{what} {name!r} is not a plain folder name (no '/', '\\', '..' or absolute path); a "
                             "run's names are single path components: rename it")
    return name


def rerun_name(name: str, change: Mapping[str, Any]) -> str:
    """The directory name of ``name`` rerun with ``change``: ``name--field=value--...`` in field order; a
    question subset is written as its size and the first 8 hex digits of its ids' SHA-256.

    >>> rerun_name("grpo", {"temperature": 0.6, "questions": ["arith-3", "arith-7"]})
    'grpo--questions=2q-e8a52b11--temperature=0.6'
    """
    parts = [name]
    for key in sorted(change):
        value = change[key]
        if key == "questions":
            ids = sorted(value)
            value = f"{len(ids)}q-{hashlib.sha256(chr(10).join(ids).encode()).hexdigest()[:8]}"
        elif key == "system":  # a system turn's text is no file name: its digest
            value = "none" if value is None else hashlib.sha256(str(value).encode()).hexdigest()[:8]
        elif isinstance(value, float):
            value = f"{value:g}"
        parts.append(f"{key}={value}")
    return "--".join(parts)


def _temp_name(path: Path) -> Path:
    """A temporary name beside ``path``, unique to this process and call."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def write_durably(path: Path, write: Callable[[Path], None], *, replace: bool = True) -> Path:
    """``write`` a unique temporary file, fsync it, rename it to ``path`` (unless ``replace`` is
    False: then return the synced temporary file) and fsync the directory."""
    tmp = _temp_name(path)
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        if not replace:
            return tmp
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError) and err.errno in DISK_FULL:
            raise disk_full(path, err) from None
        raise
    fsync_dir(path.parent)
    return path


def _nan_to_none(obj: Any) -> Any:
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "shape", None) == ():  # a numpy scalar
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Mapping):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_nan_to_none(v) for v in obj]
    return obj


def json_text(obj: Any) -> str:
    """``obj`` as the JSON text reachlens writes (sorted keys, NaN as null)."""
    # allow_nan=False: a NaN that slipped past _nan_to_none is a bug, not a file nobody can read
    return json.dumps(_nan_to_none(obj), indent=2, sort_keys=True, allow_nan=False, default=str) + "\n"


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as JSON, durably and atomically; ``NaN`` and infinities become ``null``."""
    text = json_text(obj)
    write_durably(Path(path), lambda tmp: tmp.write_text(text))


def write_parquet(path: str | os.PathLike, df: pd.DataFrame) -> None:
    """Write ``df`` as parquet (no index), durably and atomically."""
    write_durably(Path(path), lambda tmp: df.to_parquet(tmp, index=False))


def write_csv(path: str | os.PathLike, df: pd.DataFrame) -> None:
    """Write ``df`` as CSV (no index), durably and atomically, every text cell safe to open in a spreadsheet
    (:func:`reachlens.escape.csv_safe`: no cell starts a formula) and quoted (a line break or a carriage return
    inside a cell never splits its row)."""
    safe = csv_safe(df)
    write_durably(Path(path), lambda tmp: safe.to_csv(tmp, index=False, quoting=csv.QUOTE_NONNUMERIC))


def present(path: str | os.PathLike, what: str) -> bool:
    """Whether a run's file is at ``path``: True for a regular file, False for nothing there; anything else (a
    link, a FIFO, a device, a folder) is the one-line error of :func:`regular_file`, never taken for no file."""
    if not os.path.lexists(path):
        return False
    regular_file(path, what)
    return True


def read_parquet(path: str | os.PathLike, fix: str) -> pd.DataFrame:
    """A parquet table; a missing, truncated or corrupt file (or one that is not a regular file) is a
    :class:`ReachlensError` naming it and ``fix`` (what to do about it), never a traceback from the parquet reader."""
    import pyarrow

    try:
        p = regular_file(path, "table")
    except ReachlensError as err:
        raise type(err)(f"{err}; {fix}") from None
    try:
        return pd.read_parquet(p)
    except FileNotFoundError:
        raise MissingFileError(f"table {str(p)!r} does not exist; {fix}") from None
    except (pyarrow.ArrowException, OSError, ValueError) as err:
        if isinstance(err, OSError) and err.errno in DISK_FULL:
            raise
        reason = " ".join(str(err).split())[:120]
        raise ReachlensError(f"table {str(p)!r} is damaged ({type(err).__name__}: {reason}); {fix}") from None


def read_json(path: str | os.PathLike, what: str = "file") -> Any:
    """Parse a JSON file; a missing, corrupt, too large or too deeply nested file, or one that is not a regular
    file, is a :class:`ReachlensError` naming it."""
    p = regular_file(path, what)
    try:
        with open(p, "rb") as f:
            data = f.read(JSON_BYTES + 1)
        if len(data) > JSON_BYTES:
            raise ReachlensError(f"{what} {str(p)!r} is larger than {JSON_BYTES >> 20} MiB, which no run file is; it "
                                 "was damaged or made by hand: restore it, or start again in a new directory")
        return json.loads(data.decode("utf-8"))
    except FileNotFoundError:
        raise MissingFileError(f"{what} {str(p)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ReachlensError(f"{what} {str(p)!r} cannot be read ({err})") from None
    except (ValueError, RecursionError) as err:
        reason = "it nests too deeply" if isinstance(err, RecursionError) else str(err)
        raise ReachlensError(
            f"{what} {str(p)!r} is not valid JSON ({reason}); it was damaged or edited by hand: "
            "restore it, or start again in a new directory"
        ) from None
