"""Audit directories: the run directory of an audit, written as questions finish.

An audit directory is a :class:`~reachlens.store.RunDir` of kind ``audit``::

    DIR/run.json                 the run record: protocol, model identity, data identity, exec, status, ...
    DIR/parts/NNNNN.*.parquet    one pair (questions, samples) per finished batch of questions
    DIR/questions.parquet        all finished questions (written when a run completes)
    DIR/samples.parquet          all raw samples, text kept so they can be re-scored
    DIR/summary.json             D, O_K, gap, n, k, protocol_hash, model (when a run completes)

A finished batch is appended as a part (samples first, so a part's questions imply their samples),
so a run killed at any moment resumes from its last finished batch: a re-run of the same command into
the same directory reads what is there and skips finished questions. When the run completes, the runner
writes the whole tables and :meth:`AuditDir.finish` removes the parts they replace (only those).

A question is finished only with all its K samples (``sample_idx`` 0 .. K-1, K the protocol's): one whose
samples are missing (a part deleted or lost) is not finished, so a resume decodes it again, and a complete
audit lacking samples is refused when read, naming the question and the fix (resume it). A damaged table
file is one line naming it and the fix, never a traceback.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.store.files import fsync_dir, read_parquet, write_parquet
from reachlens.store.run_dir import RunDir

__all__ = ["AuditDir"]

_PART_RE = re.compile(r"\d{5}\.(questions|samples)\.parquet")


class AuditDir(RunDir):
    """One audit directory.

    >>> store = AuditDir("runs/base")  # doctest: +SKIP
    >>> with store.writer():  # doctest: +SKIP
    ...     store.start(record)
    ...     store.append(questions, samples)
    """

    kind = "audit"

    def _temp_folders(self) -> list[Path]:
        return [self.path, self.path / "parts"]

    def _after_commit(self) -> None:
        for p in self._parts("questions") + self._parts("samples"):
            p.unlink(missing_ok=True)

    # --- tables ----------------------------------------------------------------------------------
    def _parts_folder(self) -> Path | None:
        """``parts/`` (None when there is none yet); anything there but a folder (a link: its parts would be read,
        written and deleted elsewhere) is refused in one line."""
        parts = self.path / "parts"
        if not os.path.lexists(parts):
            return None
        if parts.is_symlink() or not parts.is_dir():
            raise ReachlensError(f"{str(parts)!r} is not a folder (a link or a file), and reachlens writes a folder "
                                 "there: it was made by hand; remove it")
        return parts

    def _parts(self, kind: str) -> list[Path]:
        parts = self._parts_folder()
        if parts is None:
            return []
        return sorted(p for p in parts.glob(f"*.{kind}.parquet") if _PART_RE.fullmatch(p.name))

    def append(self, questions: pd.DataFrame, samples: pd.DataFrame) -> None:
        """Record a finished batch of questions (samples first, so questions imply their samples)."""
        self._require_lock()
        parts = self._parts_folder() or self.path / "parts"
        parts.mkdir(exist_ok=True)
        idx = len(self._parts("questions"))
        while (parts / f"{idx:05d}.questions.parquet").exists() or (parts / f"{idx:05d}.samples.parquet").exists():
            idx += 1
        write_parquet(parts / f"{idx:05d}.samples.parquet", samples)
        write_parquet(parts / f"{idx:05d}.questions.parquet", questions)

    def _read(self, kind: str) -> pd.DataFrame:
        whole = self.path / f"{kind}.parquet"
        resume = "re-run the same audit command into this directory to redo its questions"
        frames = [read_parquet(whole, f"delete it and {resume}")] if os.path.lexists(whole) else []
        frames += [read_parquet(p, f"delete it (and the other {p.name[:5]}.* part) and {resume}")
                   for p in self._parts(kind)]
        frames = [f for f in frames if len(f)]
        if not frames:
            return pd.DataFrame()
        df = pd.concat(frames, ignore_index=True)
        key = ["question_id"] if kind == "questions" else ["question_id", "sample_idx"]
        missing = [c for c in key if c not in df.columns]
        if missing:
            raise ReachlensError(f"{kind} tables in {str(self.path)!r} lack the column(s) {missing}; "
                                 "they were not written by reachlens")
        return df.drop_duplicates(key, keep="last").reset_index(drop=True)

    def tables(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """``(questions, samples)`` of every finished question (the whole tables and the parts written since): a
        question with all K samples. One lacking samples is left out of an unfinished audit (a resume redoes it)
        and refused in a complete one, naming it."""
        q, s = self._read("questions"), self._read("samples")
        if not len(q):
            return q, s.iloc[0:0] if len(s) else s
        k = self.protocol().k
        whole = set()
        if len(s):
            idx = s.groupby("question_id")["sample_idx"].agg(["nunique", "min", "max"])
            whole = set(idx.index[(idx["nunique"] == k) & (idx["min"] == 0) & (idx["max"] == k - 1)])
        short = [qid for qid in q["question_id"] if qid not in whole]
        if short and self._stored().status == "complete":
            have = int((s["question_id"] == short[0]).sum()) if len(s) else 0
            raise ReachlensError(
                f"audit directory {str(self.path)!r} is complete but question {short[0]!r} has {have} of its {k} "
                f"samples ({len(short)} question(s) lack samples; the samples table was cut or edited); re-run the "
                "same audit command into this directory to redo them")
        q = q[q["question_id"].isin(whole)].reset_index(drop=True)
        s = s[s["question_id"].isin(set(q["question_id"]))].reset_index(drop=True) if len(s) else s
        return q, s

    def questions(self) -> pd.DataFrame:
        """Every finished question (:meth:`tables`)."""
        return self.tables()[0]

    def samples(self) -> pd.DataFrame:
        """The samples of every finished question (:meth:`tables`; a batch interrupted mid-write is ignored)."""
        return self.tables()[1]

    def finished_ids(self) -> set[str]:
        q = self.questions()
        return set(q["question_id"]) if len(q) else set()

    def finish(self, summary: Mapping[str, Any]) -> None:
        """Mark the audit complete (its whole tables are written), then remove the parts they replace
        (only those)."""
        super().finish(summary)
        parts = self.path / "parts"
        for p in self._parts("questions") + self._parts("samples"):
            p.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            parts.rmdir()  # only if empty: a file someone else put there stays
        fsync_dir(self.path)
