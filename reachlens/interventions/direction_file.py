"""A direction read from a file: the one reader of the vectors ``steer``, ``units`` and the steer probe take.

A ``.npy`` file holds one array of real numbers (integers or floats) and nothing else: its header is read and
checked before any data is (no pickle: ``allow_pickle=False``; no object, string, structured, complex, date or
time array; no ``.npz`` archive; no more than :data:`MAX_ELEMENTS` numbers, whatever size the header claims;
exactly the bytes the header promises), so a hostile or damaged file is one line naming it, never a traceback,
an allocation of terabytes or numpy's advice to unpickle it. A ``.json`` file holds a list of numbers. Either
must be a regular file (``/dev/zero`` is not one), and every number finite.

>>> read_direction("v.npy").shape  # doctest: +SKIP
(64,)
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from reachlens.errors import ReachlensError, regular_file

__all__ = ["MAX_ELEMENTS", "read_direction"]

MAX_ELEMENTS = 1 << 22
"""The most numbers a direction file may hold (a direction is one vector of a model's width)."""
_REAL_KINDS = "iuf"
"""numpy dtype kinds of real numbers: signed and unsigned integers, floats."""


def read_direction(path: str | os.PathLike, what: str = "direction file") -> np.ndarray:
    """The numbers of ``path`` (``.npy`` or ``.json``) as a float64 array of the shape it stores, checked as the
    module says."""
    p = regular_file(path, what, follow_links=True, fix="give a .npy or .json file of one vector")
    if p.suffix == ".npy":
        v = _read_npy(p, what)
    elif p.suffix == ".json":
        v = _read_json(p, what)
    else:
        raise ReachlensError(f"{what} {str(p)!r}: use .npy or .json (a list of numbers)")
    if not v.size or not np.isfinite(v).all():
        raise ReachlensError(f"{what} {str(p)!r} holds no numbers, or a NaN or infinite one; give a finite vector")
    return v


def _read_npy(p: Path, what: str) -> np.ndarray:
    """The array of a ``.npy`` file, its header checked before its data is read."""
    fix = "save one vector of real numbers with numpy.save"
    try:
        with open(p, "rb") as f:
            version = np.lib.format.read_magic(f)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read_header(f, max_header_size=1 << 16)
            start = f.tell()
            _check_header(p, what, shape, dtype, os.fstat(f.fileno()).st_size - start, fix)
            v = np.load(p, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        reason = " ".join(str(err).split())[:120]
        raise ReachlensError(f"{what} {str(p)!r} is not a .npy array ({reason}); {fix}") from None
    return np.asarray(v, dtype=np.float64)


def _check_header(p: Path, what: str, shape: tuple, dtype: np.dtype, data_bytes: int, fix: str) -> None:
    """Refuse, from its header alone, an array that is not real numbers or not of a vector's size."""
    if dtype.hasobject or dtype.names is not None or dtype.subdtype is not None or dtype.kind not in _REAL_KINDS:
        raise ReachlensError(f"{what} {str(p)!r} holds an array of {dtype.str!r} ({dtype}), not real numbers; {fix}")
    count = math.prod(shape)
    if count > MAX_ELEMENTS:
        raise ReachlensError(f"{what} {str(p)!r} claims {count:,} numbers (shape {shape}), more than a direction's "
                             f"{MAX_ELEMENTS:,} at most; {fix}")
    if count * dtype.itemsize != data_bytes:
        raise ReachlensError(f"{what} {str(p)!r} claims {count * dtype.itemsize:,} bytes of data and holds "
                             f"{data_bytes:,}: it is damaged; {fix}")


def _read_json(p: Path, what: str) -> np.ndarray:
    """The list of numbers of a ``.json`` file."""
    if p.stat().st_size > MAX_ELEMENTS * 32:
        raise ReachlensError(f"{what} {str(p)!r} is larger than a direction of {MAX_ELEMENTS:,} numbers")
    try:
        values = json.loads(p.read_text(encoding="utf-8"))
        if not isinstance(values, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                   for x in values):
            raise ValueError("not a flat list of numbers")
        return np.asarray(values, dtype=np.float64)
    except (ValueError, RecursionError, OSError, UnicodeDecodeError) as err:
        reason = "it nests too deeply" if isinstance(err, RecursionError) else " ".join(str(err).split())[:120]
        raise ReachlensError(f"{what} {str(p)!r} is not a list of numbers ({reason})") from None
