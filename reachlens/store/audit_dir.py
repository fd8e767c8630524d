"""Audit directories: what one audit leaves on disk, written as questions finish.

Layout::

    DIR/protocol.json       protocol, model identity, task source, protocol hash
    DIR/parts/NNNNN.*.parquet   one pair (questions, samples) per finished batch of questions
    DIR/questions.parquet   all finished questions (written when a run completes)
    DIR/samples.parquet     all raw samples, text kept so they can be re-scored
    DIR/summary.json        D, O_K, gap, n, k, protocol_hash, model (when a run completes)

Every file is written to a temporary name and renamed into place, so an interrupted run leaves only
whole files. A re-run of the same command into the same directory reads what is there and skips
finished questions. A run with another protocol or another model is refused with the differing
fields named: a directory never mixes two protocols.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.protocol import Protocol, ProtocolMismatch

__all__ = ["AuditDir", "write_json", "write_parquet"]


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def write_parquet(path: Path, df: pd.DataFrame) -> None:
    tmp = path.with_name(path.name + ".tmp")
    df.to_parquet(tmp, index=False)
    os.replace(tmp, path)


class AuditDir:
    """One audit directory.

    >>> store = AuditDir("runs/base")  # doctest: +SKIP
    >>> store.open(protocol, model={"spec": "zoo:base", "fingerprint": "..."})  # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    # --- header ----------------------------------------------------------------------------------
    @property
    def header_path(self) -> Path:
        return self.path / "protocol.json"

    def exists(self) -> bool:
        return self.header_path.is_file()

    def read_header(self) -> dict[str, Any]:
        if not self.exists():
            raise FileNotFoundError(f"{str(self.path)!r} is not an audit directory (no protocol.json)")
        return json.loads(self.header_path.read_text())

    def protocol(self) -> Protocol:
        return Protocol.from_dict(self.read_header()["protocol"])

    def open(self, protocol: Protocol, model: dict[str, str], extra: dict[str, Any] | None = None) -> None:
        """Create the directory, or check that an existing one holds the same protocol and model."""
        if self.exists():
            header = self.read_header()
            diffs = Protocol.from_dict(header["protocol"]).diff(protocol)
            for key in ("spec", "fingerprint"):
                if header["model"].get(key) != model.get(key):
                    diffs[f"model.{key}"] = (header["model"].get(key), model.get(key))
            if diffs:
                raise ProtocolMismatch(
                    diffs, what=f"audit directory {str(self.path)!r} holds another run: its settings differ",
                    fix="audit into a new directory, or delete this one to redo it (nothing in it was changed)",
                )
            return
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "parts").mkdir(exist_ok=True)
        write_json(self.header_path, {
            "protocol": protocol.to_dict(), "protocol_hash": protocol.hash, "model": model, **(extra or {}),
        })

    # --- tables ----------------------------------------------------------------------------------
    def _parts(self, kind: str) -> list[Path]:
        parts = self.path / "parts"
        return sorted(parts.glob(f"*.{kind}.parquet")) if parts.is_dir() else []

    def append(self, questions: pd.DataFrame, samples: pd.DataFrame) -> None:
        """Record a finished batch of questions (samples first, so questions imply their samples)."""
        parts = self.path / "parts"
        parts.mkdir(exist_ok=True)
        idx = len(self._parts("questions"))
        while (parts / f"{idx:05d}.questions.parquet").exists():
            idx += 1
        write_parquet(parts / f"{idx:05d}.samples.parquet", samples)
        write_parquet(parts / f"{idx:05d}.questions.parquet", questions)

    def _read(self, kind: str) -> pd.DataFrame:
        frames = []
        whole = self.path / f"{kind}.parquet"
        if whole.is_file():
            frames.append(pd.read_parquet(whole))
        frames += [pd.read_parquet(p) for p in self._parts(kind)]
        frames = [f for f in frames if len(f)]
        if not frames:
            return pd.DataFrame()
        df = pd.concat(frames, ignore_index=True)
        key = ["question_id"] if kind == "questions" else ["question_id", "sample_idx"]
        return df.drop_duplicates(key, keep="last").reset_index(drop=True)

    def questions(self) -> pd.DataFrame:
        return self._read("questions")

    def samples(self) -> pd.DataFrame:
        """Samples of finished questions only (a batch interrupted mid-write is ignored)."""
        s = self._read("samples")
        q = self.questions()
        if len(s) and len(q):
            s = s[s["question_id"].isin(set(q["question_id"]))].reset_index(drop=True)
        return s

    def finished_ids(self) -> set[str]:
        q = self.questions()
        return set(q["question_id"]) if len(q) else set()

    def consolidate(self, questions: pd.DataFrame, samples: pd.DataFrame, summary: dict[str, Any]) -> None:
        """Write the whole tables and the summary, then drop the parts they replace."""
        write_parquet(self.path / "samples.parquet", samples)
        write_parquet(self.path / "questions.parquet", questions)
        write_json(self.path / "summary.json", summary)
        shutil.rmtree(self.path / "parts", ignore_errors=True)

    def summary(self) -> dict[str, Any]:
        return json.loads((self.path / "summary.json").read_text())
