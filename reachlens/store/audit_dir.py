"""Audit directories: what one audit leaves on disk, written as questions finish.

Layout::

    DIR/protocol.json       the header: protocol, model identity, data identity, protocol hash
    DIR/parts/NNNNN.*.parquet   one pair (questions, samples) per finished batch of questions
    DIR/questions.parquet   all finished questions (written when a run completes)
    DIR/samples.parquet     all raw samples, text kept so they can be re-scored
    DIR/summary.json        D, O_K, gap, n, k, protocol_hash, model (when a run completes)
    DIR/.lock               while a writer runs: its pid (see :mod:`reachlens.store.lock`)

Safety rules, because an audit runs for hours and ``--out`` is typed by hand:

* A directory is created fresh (it does not exist, or is empty) or reopened only if it is an audit
  directory (its ``protocol.json`` is a readable audit header). Anything else is refused before any
  file is written, and reachlens never deletes a file it did not write.
* One writer at a time: :meth:`AuditDir.writer` takes the directory's lock; a second writer is
  refused with the owner's pid.
* Every file is written under a unique temporary name, flushed to disk (``fsync``), renamed into
  place, and the directory entry synced: a ``kill -9`` or a power cut leaves whole files only, and a
  finished part survives both.
* A rewrite of the tables (:meth:`AuditDir.rewrite`, used by ``rescore``) stages the new files,
  records them in ``.rewrite.json``, then moves them into place, the header last; a rewrite
  interrupted after staging is completed by the next writer, one interrupted before is dropped.
* ``summary.json`` holds no ``NaN`` (not JSON): an undefined number is written ``null`` and read
  back as ``NaN``.

A re-run of the same command into the same directory reads what is there and skips finished
questions. A run whose protocol, model or data differ is refused with the differing fields named:
a directory never mixes two runs.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.errors import MissingFileError, ReachlensError, ReachlensWarning
from reachlens.protocol import Protocol, ProtocolMismatch
from reachlens.store.lock import LOCK_NAME, DirectoryLock

__all__ = ["AuditDir", "read_json", "run_differences", "write_json", "write_parquet"]

HEADER = "protocol.json"
JOURNAL = ".rewrite.json"
_PART_RE = re.compile(r"\d{5}\.(questions|samples)\.parquet")
_TEMP_RE = re.compile(r"\..+\.\d+\.[0-9a-f]{8}\.tmp")
_OWN_FILES = {HEADER, "questions.parquet", "samples.parquet", "summary.json", "parts", LOCK_NAME, JOURNAL}
_SUMMARY_FLOATS = ("D", "O_K", "gap")


# --- durable files ---------------------------------------------------------------------------------
def _fsync_dir(path: Path) -> None:
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


def _temp_name(path: Path) -> Path:
    """A temporary name beside ``path``, unique to this process and call."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _write_durably(path: Path, write: Callable[[Path], None], *, replace: bool = True) -> Path:
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
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
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


def _json_text(obj: Any) -> str:
    # allow_nan=False: a NaN that slipped past _nan_to_none is a bug, not a file nobody can read
    return json.dumps(_nan_to_none(obj), indent=2, sort_keys=True, allow_nan=False, default=str) + "\n"


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as JSON, durably and atomically; ``NaN`` and infinities become ``null``."""
    text = _json_text(obj)
    _write_durably(Path(path), lambda tmp: tmp.write_text(text))


def write_parquet(path: str | os.PathLike, df: pd.DataFrame) -> None:
    """Write ``df`` as parquet (no index), durably and atomically."""
    _write_durably(Path(path), lambda tmp: df.to_parquet(tmp, index=False))


def read_json(path: str | os.PathLike, what: str = "file") -> Any:
    """Parse a JSON file; a missing or corrupt file is a :class:`ReachlensError` naming it."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MissingFileError(f"{what} {str(p)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ReachlensError(f"{what} {str(p)!r} cannot be read ({err})") from None
    try:
        return json.loads(text)
    except ValueError as err:
        raise ReachlensError(
            f"{what} {str(p)!r} is not valid JSON ({err}); it was damaged or edited by hand: "
            "restore it, or start again in a new directory"
        ) from None


# --- identity ------------------------------------------------------------------------------------------
def run_differences(
    header: Mapping[str, Any], protocol: Protocol | None, model: Mapping[str, Any] | None,
    data: Mapping[str, Any] | None,
) -> tuple[dict[str, tuple[Any, Any]], list[str]]:
    """What differs between a stored run (its header) and another run's protocol, model and data.

    Returns ``(differences, notes)``: differences as ``{field: (stored, other)}`` with fields such as
    ``k``, ``model.fingerprint`` or ``data.sha256``; notes say what could not be checked (a directory
    written before data identity was recorded). ``None`` for ``protocol``, ``model`` or ``data``
    skips that part; a model fingerprint ``unknown`` on either side is not compared.
    """
    from reachlens.models.loading import same_model

    diffs: dict[str, tuple[Any, Any]] = {}
    notes: list[str] = []
    if protocol is not None:
        diffs.update(Protocol.from_dict(header["protocol"]).diff(protocol))
    if model is not None:
        stored = header.get("model") or {}
        if stored.get("spec") != model.get("spec"):
            diffs["model.spec"] = (stored.get("spec"), model.get("spec"))
        unknown = "unknown" in (stored.get("fingerprint"), model.get("fingerprint"))
        if not unknown and not same_model(stored, model):
            diffs["model.fingerprint"] = (stored.get("fingerprint"), model.get("fingerprint"))
    if data is not None:
        stored_data = header.get("data")
        if not stored_data:
            notes.append("it was written before reachlens recorded data identity, so its data file "
                         "cannot be checked")
        elif not data:
            notes.append("the task given records no data identity (it was not made by load_task), so "
                         "its data cannot be checked against the directory's")
        else:
            for key in sorted(set(stored_data) | set(data)):
                if key == "file":  # the file's name: a copy elsewhere is the same data
                    continue
                if stored_data.get(key) != data.get(key):
                    diffs[f"data.{key}"] = (_short(stored_data.get(key)), _short(data.get(key)))
    return diffs, notes


def _short(value: Any) -> Any:
    """A 64-hex digest cut to 12 digits for a message (enough to tell two apart)."""
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:12] + "..."
    return value


def _fix_for(diffs: Mapping[str, Any]) -> str:
    if all(k.startswith("data.") for k in diffs):
        return ("it was made from other data: pass the same data file (--data) and loader options, "
                "or write to a new directory (nothing in it was changed)")
    return "audit into a new directory, or delete this one to redo it (nothing in it was changed)"


class AuditDir:
    """One audit directory.

    >>> store = AuditDir("runs/base")  # doctest: +SKIP
    >>> with store.writer():  # doctest: +SKIP
    ...     store.open(protocol, model={"spec": "zoo:base", "fingerprint": "..."}, data=task.data_identity)
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._lock = DirectoryLock(self.path)

    # --- header ----------------------------------------------------------------------------------
    @property
    def header_path(self) -> Path:
        return self.path / HEADER

    def exists(self) -> bool:
        return self.header_path.is_file()

    def read_header(self) -> dict[str, Any]:
        """The header; a missing, corrupt or foreign ``protocol.json`` is a one-line error naming it."""
        if not self.path.is_dir():
            what = "is a file" if self.path.exists() else "does not exist"
            raise MissingFileError(f"audit directory {str(self.path)!r} {what}")
        if not self.exists():
            raise MissingFileError(f"{str(self.path)!r} is not an audit directory (no {HEADER})")
        header = read_json(self.header_path, "audit header")
        if not isinstance(header, dict) or not isinstance(header.get("protocol"), dict) or "model" not in header:
            raise ReachlensError(f"{str(self.header_path)!r} is not an audit header (it lacks 'protocol' or 'model'); "
                                 "is this an audit directory?")
        try:
            Protocol.from_dict(header["protocol"])
        except (ReachlensError, TypeError) as err:
            raise ReachlensError(f"{str(self.header_path)!r} holds an unreadable protocol ({err})") from None
        return header

    def protocol(self) -> Protocol:
        return Protocol.from_dict(self.read_header()["protocol"])

    def check_target(self) -> None:
        """Refuse, before anything runs, a path that is a file or a directory of other files."""
        if self.path.exists() and not self.path.is_dir():
            raise ReachlensError(f"audit directory {str(self.path)!r} is a file; choose a directory to write the audit to")
        if not self.path.is_dir() or self.exists():
            if self.exists():
                self.read_header()  # a corrupt header is reported now
            return
        foreign = sorted(p.name for p in self.path.iterdir() if p.name != LOCK_NAME and not _TEMP_RE.fullmatch(p.name))
        if foreign:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise ReachlensError(
                f"{str(self.path)!r} is not empty ({shown}) and is not an audit directory (no {HEADER}); "
                "choose a new or empty directory (nothing in it was touched)"
            )

    def check_run(
        self, protocol: Protocol | None, model: Mapping[str, Any] | None, data: Mapping[str, Any] | None,
        *, what: str | None = None,
    ) -> None:
        """Raise :class:`ProtocolMismatch` naming every difference between this directory's run and
        the one described; warn when part of it cannot be checked. Nothing to do for a new directory."""
        if not self.exists():
            return
        diffs, notes = run_differences(self.read_header(), protocol, model, data)
        if diffs:
            raise ProtocolMismatch(diffs, what=what or f"audit directory {str(self.path)!r} holds another run: "
                                   "its settings differ", fix=_fix_for(diffs))
        for note in notes:
            warnings.warn(f"audit directory {str(self.path)!r}: {note}", ReachlensWarning, stacklevel=3)

    @contextlib.contextmanager
    def writer(self) -> Iterator[AuditDir]:
        """Hold the directory's writer lock (creating the directory if needed) for the block.

        Raises:
            ReachlensError: the path is a file or a directory of other files.
            DirectoryLocked: another live process is writing the directory.
        """
        self.check_target()
        self.path.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self.check_target()  # again, now that nobody else can write
            self._recover()
            yield self

    def _require_lock(self) -> None:
        if not self._lock.held:
            raise RuntimeError("write to an audit directory inside `with store.writer():`")

    def open(
        self, protocol: Protocol, model: Mapping[str, Any], extra: Mapping[str, Any] | None = None,
        *, data: Mapping[str, Any] | None = None,
    ) -> None:
        """Check that the directory holds this run (protocol, model, data), or start it: write the header.

        Call inside :meth:`writer`.
        """
        self._require_lock()
        if self.exists():
            self.check_run(protocol, model, data if data is not None else {})
            header = self.read_header()
            stored = header["model"].get("fingerprint")
            if stored != model.get("fingerprint") and "unknown" not in (stored, model.get("fingerprint")):
                # the same model, recognized by the fingerprint of reachlens before full hashing:
                # record its full identity, so the summary and the header name one fingerprint
                write_json(self.header_path, {**header, "model": dict(model)})
            return
        write_json(self.header_path, {
            "format": "reachlens-audit", "protocol": protocol.to_dict(), "protocol_hash": protocol.hash,
            "model": dict(model), "data": dict(data) if data else None, **(extra or {}),
        })

    def _recover(self) -> None:
        """Finish a rewrite that was interrupted after staging; drop temporary files of dead writers."""
        journal = self.path / JOURNAL
        if journal.is_file():
            try:
                moves = [(str(staged), str(target)) for staged, target in json.loads(journal.read_text())["moves"]]
            except (ValueError, KeyError, TypeError, OSError):
                moves = None  # torn while being written: the rewrite never began
            if moves is not None:
                self._commit(moves)
            journal.unlink()
            _fsync_dir(self.path)
        for folder in (self.path, self.path / "parts"):
            if folder.is_dir():
                for p in folder.iterdir():
                    if _TEMP_RE.fullmatch(p.name) and p.is_file():
                        p.unlink(missing_ok=True)

    # --- tables ----------------------------------------------------------------------------------
    def _parts(self, kind: str) -> list[Path]:
        parts = self.path / "parts"
        if not parts.is_dir():
            return []
        return sorted(p for p in parts.glob(f"*.{kind}.parquet") if _PART_RE.fullmatch(p.name))

    def append(self, questions: pd.DataFrame, samples: pd.DataFrame) -> None:
        """Record a finished batch of questions (samples first, so questions imply their samples)."""
        self._require_lock()
        parts = self.path / "parts"
        parts.mkdir(exist_ok=True)
        idx = len(self._parts("questions"))
        while (parts / f"{idx:05d}.questions.parquet").exists() or (parts / f"{idx:05d}.samples.parquet").exists():
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
        missing = [c for c in key if c not in df.columns]
        if missing:
            raise ReachlensError(f"{kind} tables in {str(self.path)!r} lack the column(s) {missing}; "
                                 "they were not written by reachlens")
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
        """Write the whole tables and the summary, then remove the parts they replace (only those)."""
        self._require_lock()
        write_parquet(self.path / "samples.parquet", samples)
        write_parquet(self.path / "questions.parquet", questions)
        write_json(self.path / "summary.json", summary)
        parts = self.path / "parts"
        for p in self._parts("questions") + self._parts("samples"):
            p.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            parts.rmdir()  # only if empty: a file someone else put there stays
        _fsync_dir(self.path)

    def rewrite(
        self, questions: pd.DataFrame, samples: pd.DataFrame, summary: dict[str, Any], header: dict[str, Any] | None,
    ) -> None:
        """Replace the tables, the summary and (last) the header as one step that a crash cannot split.

        The new files are staged under temporary names and listed in ``.rewrite.json``; only then are
        they moved into place, the header last. A writer that finds the journal finishes the moves.
        """
        self._require_lock()
        staged: list[tuple[str, str]] = []
        try:
            for name, write in (
                ("samples.parquet", lambda tmp: samples.to_parquet(tmp, index=False)),
                ("questions.parquet", lambda tmp: questions.to_parquet(tmp, index=False)),
                ("summary.json", lambda tmp, text=_json_text(summary): tmp.write_text(text)),
                *([(HEADER, lambda tmp, text=_json_text(header): tmp.write_text(text))] if header is not None else []),
            ):
                tmp = _write_durably(self.path / name, write, replace=False)
                staged.append((tmp.name, name))
            write_json(self.path / JOURNAL, {"moves": staged})  # the commit point
        except BaseException:
            for tmp, _ in staged:
                (self.path / tmp).unlink(missing_ok=True)
            raise
        self._commit(staged)
        (self.path / JOURNAL).unlink()
        _fsync_dir(self.path)

    def _commit(self, moves: list[tuple[str, str]]) -> None:
        """Move staged files into place (those already moved are skipped), then drop the parts the
        new tables replace. Idempotent: recovery runs it again after a crash."""
        for staged, target in moves:
            if (self.path / staged).is_file():
                os.replace(self.path / staged, self.path / target)
        _fsync_dir(self.path)
        for p in self._parts("questions") + self._parts("samples"):
            p.unlink(missing_ok=True)

    def recover(self) -> None:
        """Finish an interrupted rewrite, if there is one (takes the writer lock for that moment)."""
        if (self.path / JOURNAL).is_file():
            with self.writer():
                pass

    def summary(self) -> dict[str, Any]:
        """``summary.json``, with ``null`` numbers read back as ``NaN``."""
        s = read_json(self.path / "summary.json", "audit summary")
        for key in _SUMMARY_FLOATS:
            if key in s and s[key] is None:
                s[key] = math.nan
        if isinstance(s.get("pass_at_k"), dict):
            s["pass_at_k"] = {k: math.nan if v is None else v for k, v in s["pass_at_k"].items()}
        return s
