"""Run directories written in parts: every finished slice of a run is a part, until the run completes.

A run the runner writes (an audit, a probe run; :func:`reachlens.runner.run_jobs`) is a list of fixed slices of
its task's questions, each decoded anywhere and appended here by the driver as it finishes::

    DIR/parts/U.S.NAME.parquet   table NAME of one finished slice: U the slice's unit (0 for an audit; a probe
                                 run's units are its decoders), S the index of its first question in the task

``U`` and ``S`` are plain decimal numbers of any width, read back as numbers: the 100th unit's part
``100.0.candidates.parquet`` and the slice at question 100,000 resume like the first. A slice's tables are
written samples (or candidates) first, each durably (temporary name, fsync, rename), so a ``kill -9`` leaves
whole files; a part is read through :func:`~reachlens.store.files.read_parquet`, so a damaged one is one line
naming it and the fix. Which parts make a whole run is the job's to say (an audit's question needs its K
samples: :func:`audit_tables`; a probe run's every candidate of every probe): :meth:`PartsDir.parts` gives them as
they are.

When the run completes, its whole tables are written (``DIR/NAME.parquet``), then :meth:`PartsDir.finish` marks
it complete and removes the parts (only those: a file someone else put in ``parts/`` stays).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.errors import MissingFileError, ReachlensError
from reachlens.store.files import fsync_dir, read_parquet, write_parquet
from reachlens.store.run_dir import RunDir

__all__ = ["PART_RE", "PartKey", "PartsDir", "audit_tables", "part_name"]

PART_RE = re.compile(r"(\d+)\.(\d+)\.([a-z][a-z_]*)\.parquet")
"""The name of a part file: unit, slice start and table name (numbers of any width)."""
PartKey = tuple[int, int]
"""A part's key: (unit, the index of the slice's first question)."""


def part_name(key: PartKey, table: str) -> str:
    """The file name of table ``table`` of the part ``key``.

    >>> part_name((12, 100000), "candidates")
    '12.100000.candidates.parquet'
    """
    return f"{key[0]}.{key[1]}.{table}.parquet"


class PartsDir(RunDir):
    """A run directory whose slices are appended as parts while it runs.

    >>> store = PartsDir("runs/base")  # doctest: +SKIP
    >>> with store.writer():  # doctest: +SKIP
    ...     store.start(record)
    ...     store.append((0, 0), {"samples": samples, "questions": questions})
    """

    @property
    def parts_folder(self) -> Path:
        """``parts/``; anything there but a folder (a link: its parts would be read, written and deleted
        elsewhere) is refused in one line."""
        parts = self.path / "parts"
        if os.path.lexists(parts) and (parts.is_symlink() or not parts.is_dir()):
            raise ReachlensError(f"{str(parts)!r} is not a folder (a link or a file), and reachlens writes a folder "
                                 "there: it was made by hand; remove it")
        return parts

    def _temp_folders(self) -> list[Path]:
        return [self.path, self.parts_folder]

    def _after_commit(self) -> None:
        self._remove_parts()

    def part_files(self) -> dict[PartKey, dict[str, Path]]:
        """Every part on disk: key -> {table name: file}, in key order (numeric)."""
        folder = self.parts_folder
        found: dict[PartKey, dict[str, Path]] = {}
        if folder.is_dir() and not folder.is_symlink():
            for p in folder.iterdir():
                m = PART_RE.fullmatch(p.name)
                if m and p.is_file() and not p.is_symlink():
                    found.setdefault((int(m.group(1)), int(m.group(2))), {})[m.group(3)] = p
        return dict(sorted(found.items()))

    def parts(self, fix: str) -> dict[PartKey, dict[str, pd.DataFrame]]:
        """Every part read back (key -> {table: DataFrame}); a damaged file is one line naming it and ``fix``."""
        return {key: {name: read_parquet(path, f"delete it and {fix}") for name, path in files.items()}
                for key, files in self.part_files().items()}

    def append(self, key: PartKey, tables: Mapping[str, pd.DataFrame]) -> None:
        """Record one finished slice (durably), its tables in the order given: the one whose rows the others
        imply last (an audit's questions after their samples). A part of the same key is replaced."""
        self._require_lock()
        self.parts_folder.mkdir(exist_ok=True)
        for name, df in tables.items():
            write_parquet(self.parts_folder / part_name(key, name), df)

    def drop(self, key: PartKey) -> None:
        """Remove the part ``key`` (a slice to decode again)."""
        self._require_lock()
        for path in self.part_files().get(key, {}).values():
            path.unlink(missing_ok=True)

    def finish(self, summary: Mapping[str, Any]) -> None:
        """Mark the run complete (its whole tables are written), then remove the parts they replace."""
        super().finish(summary)
        self._remove_parts()

    def _remove_parts(self) -> None:
        for files in self.part_files().values():
            for path in files.values():
                path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.parts_folder.rmdir()  # only if empty: a file someone else put there stays
        fsync_dir(self.path)


_RESUME = "re-run the same audit command into this directory to redo its questions"


def _gathered(store: PartsDir, name: str, key: list[str], parts: dict) -> pd.DataFrame:
    """Table ``name`` of an audit directory: its whole table and the parts written since, the last of each key."""
    whole = store.path / f"{name}.parquet"
    if not os.path.lexists(whole) and store.is_complete():
        raise MissingFileError(f"run {str(store.path)!r} is complete but has no {name} table ({whole.name}); "
                               "restore it from a copy, or run it again into a new directory")
    frames = [read_parquet(whole, f"delete it and {_RESUME}")] if os.path.lexists(whole) else []
    frames += [tables[name] for tables in parts.values() if name in tables]
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames, ignore_index=True)
    missing = [c for c in key if c not in df.columns]
    if missing:
        raise ReachlensError(f"{name} tables in {str(store.path)!r} lack the column(s) {missing}; "
                             "they were not written by reachlens")
    return df.drop_duplicates(key, keep="last").reset_index(drop=True)


def audit_tables(store: PartsDir) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(questions, samples)`` of every finished question of an audit directory (its whole tables and the parts
    written since): a question with all K samples (candidates ``0 .. K - 1``). One lacking samples is left out of
    an unfinished audit (a resume redoes it) and refused in a complete one, naming it."""
    parts = store.parts(_RESUME)
    q = _gathered(store, "questions", ["question_id"], parts)
    s = _gathered(store, "samples", ["question_id", "candidate_idx"], parts)
    if not len(q):
        return q, s.iloc[0:0] if len(s) else s
    k = store.protocol().k
    whole = set()
    if len(s):
        idx = s.groupby("question_id")["candidate_idx"].agg(["nunique", "min", "max"])
        whole = set(idx.index[(idx["nunique"] == k) & (idx["min"] == 0) & (idx["max"] == k - 1)])
    short = [qid for qid in q["question_id"] if qid not in whole]
    if short and store.is_complete():
        have = int((s["question_id"] == short[0]).sum()) if len(s) else 0
        raise ReachlensError(
            f"audit directory {str(store.path)!r} is complete but question {short[0]!r} has {have} of its {k} "
            f"samples ({len(short)} question(s) lack samples; the samples table was cut or edited); {_RESUME}")
    q = q[q["question_id"].isin(whole)].reset_index(drop=True)
    s = s[s["question_id"].isin(set(q["question_id"]))].reset_index(drop=True) if len(s) else s
    return q, s
