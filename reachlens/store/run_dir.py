"""Run directories: what every run leaves on disk, in one format, owned by one class.

One module (about 420 lines) because create, lock, resume, rewrite and refuse act on the same directory state.

Layout of every run (an audit, a comparison, a routing run, a recognition run, a causal sweep, a control, a
training study)::

    DIR/run.json        the run record (:class:`~reachlens.store.RunRecord`): format version, kind, status,
                        times, protocol, options, model, data, execution settings, version, command
    DIR/summary.json    the run's summary (written when it completes; NaN written as null)
    DIR/*.parquet       its typed tables (:mod:`reachlens.records`), raw text kept for re-scoring
    DIR/.lock           while a writer runs: its pid (see :mod:`reachlens.store.lock`)

A run the runner writes adds ``parts/`` (its finished slices while it runs; :class:`~reachlens.store.PartsDir`); a
run made of runs (a training study, a comparison, a control) holds them in sub-directories, each a run directory
itself, or names them by paths relative to it inside the same tree (``children``).

Safety rules, because a run takes hours and ``out=`` is typed by hand:

* A directory is created fresh (it does not exist, or is empty) or reopened only if it is a run
  directory (its ``run.json`` is a readable run record). Anything else is refused before any file is
  written, and reachlens never deletes a file it did not write.
* One writer at a time: :meth:`RunDir.writer` takes the directory's lock; a second writer is
  refused with the owner's pid.
* Every file is written durably (:mod:`reachlens.store.files`): a ``kill -9`` leaves whole files only.
* A rewrite of a run's tables (:meth:`RunDir.rewrite`, used by ``rescore``) stages the new files,
  records them in ``.rewrite.json``, then moves them into place, the header last; a rewrite
  interrupted after staging is completed by the next writer, one interrupted before is dropped. A reader
  never commits a journal (it refuses the directory, naming ``reachlens convert``), and a writer commits
  only moves of the run's own files (``run.json``, ``summary.json``, ``*.parquet``) from their temporary
  names: a received directory moves nothing outside itself.

Status: :meth:`RunDir.start` writes ``running``; :meth:`RunDir.finish` writes the summary, then ``complete``;
an error inside :meth:`RunDir.writer` leaves ``failed`` (``interrupted`` for Ctrl-C). A run killed outright
still says ``running`` on disk, and reads as ``interrupted`` (nobody holds its lock). Whether a run finished
is its status, never whether a file exists.

A run whose kind, protocol, options, model, data or execution settings differ from the directory's is
refused with the differing fields named (:meth:`RunDir.check_run`): a directory never mixes two runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import stat
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.errors import DiskFullError, MissingFileError, ReachlensError, ReachlensWarning
from reachlens.protocol import Protocol, ProtocolMismatch
from reachlens.store.files import (
    TEMP_RE,
    fsync_dir,
    json_text,
    present,
    read_json,
    read_parquet,
    write_durably,
    write_json,
    write_parquet,
)
from reachlens.store.lock import LOCK_NAME, DirectoryLock, writer_alive
from reachlens.store.record import RunRecord, fix_for, run_differences

__all__ = ["RUN_FILE", "RunDir", "SUMMARY_FILE", "read_record"]

RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"
JOURNAL = ".rewrite.json"
_JOURNAL_BYTES = 1 << 20
_SUMMARY_FLOATS = ("D", "O_K", "gap")


class RunDir:
    """One run directory: create, reopen, resume, lock and refuse, for every kind of run.

    >>> run = RunDir("runs/route")  # doctest: +SKIP
    >>> with run.writer():  # doctest: +SKIP
    ...     run.start(RunRecord.new("routing", protocol, identity_of(model), task.data_identity, options))
    ...     run.write_table("questions", questions)
    ...     run.finish(summary)
    """

    kind: str | None = None
    """The kind of run this class holds (None: any)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._lock = DirectoryLock(self.path)
        self._started_here = False

    @property
    def _what(self) -> str:
        return f"{self.kind} directory" if self.kind else "run directory"

    # --- the record ------------------------------------------------------------------------------
    @property
    def header_path(self) -> Path:
        return self.path / RUN_FILE

    def exists(self) -> bool:
        """Whether the directory holds a run record (a ``run.json`` that is not a regular file is refused)."""
        return present(self.header_path, "run record")

    def record(self) -> RunRecord:
        """The run record (``run.json``), its status as it stands: a ``running`` run that no live writer holds
        reads ``interrupted``. A missing, corrupt or foreign record is a one-line error naming it."""
        record = self._stored()
        if record.status == "running" and not self._lock.held and not writer_alive(self.path):
            record = dataclasses.replace(record, status="interrupted")  # when it stopped, nobody recorded
        return record

    def _stored(self) -> RunRecord:
        if not self.path.is_dir():
            what = "is a file" if self.path.exists() else "does not exist"
            raise MissingFileError(f"{self._what} {str(self.path)!r} {what}")
        if not self.exists():
            raise MissingFileError(f"{str(self.path)!r} is not a reachlens run directory (no {RUN_FILE}); if an older "
                                   f"reachlens wrote it, `reachlens convert {self.path}` rewrites it")
        record = RunRecord.from_dict(read_json(self.header_path, "run record"), where=repr(str(self.header_path)))
        if self.kind is not None and record.kind != self.kind:
            raise ReachlensError(f"{str(self.path)!r} holds a {record.kind} run, not an {self.kind}; "
                                 f"read it with `reachlens show {self.path}`")
        return record

    def inside(self, relative: Any, what: str) -> Path:
        """``DIR / relative`` (a path a record holds: a control's reruns), refused in one line unless it is relative
        and resolves inside the run's tree: this directory, or the outermost run directory holding it (a training
        study holding this control). Nothing a record says makes a reader leave it."""
        if not isinstance(relative, str) or not relative or Path(relative).is_absolute():
            raise ReachlensError(f"{what} {relative!r} in {str(self.header_path)!r} is not a relative path inside the "
                                 "run; it was damaged or edited by hand")
        tree = self.path.resolve()
        for parent in tree.parents:
            if (parent / RUN_FILE).is_file():
                tree = parent
        path = self.path / relative
        if not path.resolve().is_relative_to(tree):
            raise ReachlensError(f"{what} {relative!r} in {str(self.header_path)!r} leads outside the run's directory "
                                 f"{str(tree)!r}; it was damaged or edited by hand")
        return path

    def status(self) -> str:
        """``running``, ``complete``, ``failed`` or ``interrupted`` (see :meth:`record`)."""
        return self.record().status

    def is_complete(self) -> bool:
        """Whether the directory holds a finished run (False for no run at all)."""
        return self.exists() and self._stored().status == "complete"

    def protocol(self) -> Protocol:
        p = self._stored().protocol
        if p is None:
            raise ReachlensError(f"{str(self.path)!r} records no protocol (a {self._stored().kind} run)")
        return p

    # --- refusing ------------------------------------------------------------------------------------
    def check_target(self) -> None:
        """Refuse, before anything runs, a path that is a file or a directory of other files."""
        if self.path.exists() and not self.path.is_dir():
            raise ReachlensError(f"{self._what} {str(self.path)!r} is a file; choose a directory to write to (out=)")
        if not self.path.is_dir() or self.exists():
            if self.exists():
                self._stored()  # a corrupt header is reported now
            return
        foreign = sorted(p.name for p in self.path.iterdir() if p.name != LOCK_NAME and not TEMP_RE.fullmatch(p.name))
        if foreign:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise ReachlensError(
                f"{str(self.path)!r} is not empty ({shown}) and is not a reachlens run directory (no {RUN_FILE}); "
                f"choose a new or empty directory (nothing in it was touched); if an older reachlens wrote it, "
                f"`reachlens convert {self.path}` rewrites it"
            )

    def check_run(self, record: RunRecord, *, what: str | None = None) -> None:
        """Raise :class:`ProtocolMismatch` naming every difference between this directory's run and
        ``record`` (kind, protocol, options, model, data, execution settings); warn when part of it
        cannot be checked. Nothing to do for a new directory."""
        if not self.exists():
            return
        stored = self._stored()
        # a run without data identity of its own (a comparison, a study) has none to check; an audit of
        # a task without one is checked as "unknown" (a note)
        data = record.data if record.data is not None else ({} if record.kind == "audit" else None)
        diffs, notes = run_differences(stored, record.protocol, record.model, data, options=record.options,
                                       kind=record.kind, exec=record.exec)
        if diffs:
            raise ProtocolMismatch(diffs, what=what or f"{self._what} {str(self.path)!r} holds another run: "
                                   "its settings differ", fix=fix_for(diffs))
        for note in notes:
            warnings.warn(f"{self._what} {str(self.path)!r}: {note}", ReachlensWarning, stacklevel=3)

    # --- writing ---------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def writer(self) -> Iterator[RunDir]:
        """Hold the directory's writer lock (creating the directory if needed) for the block. An error
        inside it leaves a run this writer started ``failed`` (``interrupted`` for Ctrl-C).

        Raises:
            ReachlensError: the path is a file or a directory of other files.
            DirectoryLocked: another live process is writing the directory.
        """
        self.check_target()
        self.path.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self.check_target()  # again, now that nobody else can write
            self._recover()
            try:
                yield self
            except BaseException as err:
                if self._started_here and self._stored().status == "running":
                    self._record_end("failed" if isinstance(err, Exception) else "interrupted")
                raise
            finally:
                self._started_here = False

    def _record_end(self, status: str) -> None:
        """Write ``status`` for a run that stopped on an error. A disk too full to take it leaves ``running``, which
        reads as ``interrupted`` once the lock is gone: the error that stopped the run is the one reported."""
        try:
            write_json(self.header_path, self._stored().with_status(status).to_dict())
        except DiskFullError:
            pass

    def _require_lock(self) -> None:
        if not self._lock.held:
            raise RuntimeError(f"write to a {self._what} inside `with run.writer():`")

    def start(self, record: RunRecord) -> None:
        """Check that the directory holds this run (kind, protocol, options, model, data, execution
        settings), or start it: write ``run.json`` (status ``running``). Call inside :meth:`writer`."""
        self._require_lock()
        if self.kind is not None and record.kind != self.kind:
            raise ReachlensError(f"a {self._what} holds {self.kind} runs, not {record.kind!r}")
        if not self.exists():
            write_json(self.header_path, record.to_dict())
            self._started_here = True
            return
        stored = self._stored()
        if stored.kind != record.kind:
            raise ProtocolMismatch({"kind": (stored.kind, record.kind)}, what=f"{str(self.path)!r} holds another kind "
                                   "of run", fix=fix_for({"kind": None}))
        self.check_run(record)
        # the descriptive fields are this writer's (where its reruns and children are, what it reran), the rest the
        # first run's; an execution setting it records as unknown is recorded as this writer knows it
        exec_ = None if stored.exec is None else {
            key: (record.exec or {}).get(key, value) if value == "unknown" else value for key, value in stored.exec.items()}
        resumed = RunRecord(stored.kind, stored.protocol, stored.model, stored.data, stored.options, exec_,
                            stored.reachlens_version, stored.command, "running", stored.started, None,
                            {**stored.extra, **record.extra}, record.children or stored.children)
        write_json(self.header_path, resumed.to_dict())
        self._started_here = True

    def begin(self, record: RunRecord) -> None:
        """Start (or check) the run ``record`` under the writer lock and release it: a run made of runs begins so,
        before its sub-runs are written inside it; it completes when it is saved."""
        with self.writer():
            self.start(record)

    def finish(self, summary: Mapping[str, Any]) -> None:
        """Write ``summary.json`` (NaN as null), then mark the run ``complete``. Call inside :meth:`writer`."""
        self._require_lock()
        write_json(self.path / SUMMARY_FILE, dict(summary))
        write_json(self.header_path, self._stored().with_status("complete").to_dict())

    # --- tables and summary --------------------------------------------------------------------------
    def write_table(self, name: str, df: pd.DataFrame) -> None:
        """Write ``DIR/{name}.parquet`` (durably). Call inside :meth:`writer`."""
        self._require_lock()
        write_parquet(self.path / f"{name}.parquet", df)

    def read_table(self, name: str) -> pd.DataFrame:
        """``DIR/{name}.parquet``; a missing table is a one-line error naming it."""
        path = self.path / f"{name}.parquet"
        if not present(path, "table"):
            raise MissingFileError(f"{self._what} {str(self.path)!r} has no {name} table ({path.name}); "
                                   "the run did not finish, or this is not that kind of run")
        return read_parquet(path, "restore it from a copy, or run it again into a new directory")

    def summary(self) -> dict[str, Any] | None:
        """The stored summary, with ``null`` numbers read back as ``NaN``; None while the run is not complete."""
        if not self.is_complete():
            return None
        s = read_json(self.path / SUMMARY_FILE, "run summary")
        if not isinstance(s, dict):
            raise ReachlensError(f"run summary {str(self.path / SUMMARY_FILE)!r} is {type(s).__name__}, not an object; "
                                 "it was damaged or edited by hand: restore it, or run it again into a new directory")
        for key in _SUMMARY_FLOATS:
            if key in s and s[key] is None:
                s[key] = math.nan
        if isinstance(s.get("pass_at_k"), dict):
            s["pass_at_k"] = {k: math.nan if v is None else v for k, v in s["pass_at_k"].items()}
        return s

    # --- journaled rewrite ---------------------------------------------------------------------------
    def rewrite(self, tables: Mapping[str, pd.DataFrame], summary: dict[str, Any], record: RunRecord | None) -> None:
        """Replace tables, the summary and (last) the record as one step that a crash cannot split.

        The new files are staged under temporary names and listed in ``.rewrite.json``; only then are
        they moved into place, the record last. A writer that finds the journal finishes the moves.
        """
        self._require_lock()
        staged: list[tuple[str, str]] = []
        files: list[tuple[str, Callable[[Path], None]]] = [
            (f"{name}.parquet", lambda tmp, df=df: df.to_parquet(tmp, index=False)) for name, df in tables.items()
        ]
        files.append((SUMMARY_FILE, lambda tmp, text=json_text(summary): tmp.write_text(text)))
        if record is not None:
            files.append((RUN_FILE, lambda tmp, text=json_text(record.to_dict()): tmp.write_text(text)))
        try:
            for name, write in files:
                tmp = write_durably(self.path / name, write, replace=False)
                staged.append((tmp.name, name))
            write_json(self.path / JOURNAL, {"moves": staged})  # the commit point
        except BaseException:
            for tmp, _ in staged:
                (self.path / tmp).unlink(missing_ok=True)
            raise
        self._commit(staged)
        (self.path / JOURNAL).unlink()
        fsync_dir(self.path)

    def _commit(self, moves: list[tuple[str, str]]) -> None:
        """Move staged files into place (those already moved are skipped). Idempotent: recovery runs
        it again after a crash. Every move is one this class stages (:meth:`_journal_moves` checks them)."""
        for staged, target in moves:
            if (self.path / staged).is_file():
                os.replace(self.path / staged, self.path / target)
        fsync_dir(self.path)
        self._after_commit()

    def _after_commit(self) -> None:
        """What a subclass drops once a rewrite is in place (an audit's parts)."""

    def _temp_folders(self) -> list[Path]:
        return [self.path]

    def _journal_moves(self) -> list[tuple[str, str]] | None:
        """The moves ``.rewrite.json`` lists, each checked to be one :meth:`rewrite` stages: a regular file of this
        directory with a temporary name of its target (``.NAME.PID.RANDOM.tmp``, no symlink) moved onto
        ``run.json``, ``summary.json`` or a ``NAME.parquet`` of this directory. None for a journal torn while it
        was written (the rewrite never began). A journal naming anything else is refused in one line, nothing
        moved: a received directory must not move files outside itself (or inside it, but for its own tables).
        """
        journal = self.path / JOURNAL
        if not _regular_or_gone(journal) or journal.stat().st_size > _JOURNAL_BYTES:
            raise ReachlensError(f"{str(journal)!r} is not a rewrite journal reachlens wrote (not a regular file, or "
                                 "too large); delete it (nothing was moved)")
        try:
            moves = [(staged, target) for staged, target in json.loads(journal.read_text())["moves"]]
        except (ValueError, KeyError, TypeError, OSError):
            return None
        for staged, target in moves:
            if not (_is_run_file(target) and isinstance(staged, str) and TEMP_RE.fullmatch(staged)
                    and staged.startswith(f".{target}.") and "/" not in staged and "\\" not in staged
                    and _regular_or_gone(self.path / staged)):
                raise ReachlensError(
                    f"{str(journal)!r} lists the move {staged!r} -> {target!r}, which is not a rewrite of this run's "
                    "own files; it was damaged or made by hand: delete that journal (nothing was moved)")
        return moves

    def _recover(self) -> None:
        """Finish a rewrite that was interrupted after staging (its journal checked first); drop temporary files
        of dead writers."""
        journal = self.path / JOURNAL
        if os.path.lexists(journal):
            moves = self._journal_moves()
            if moves is not None:
                self._commit(moves)
            journal.unlink()
            fsync_dir(self.path)
        for folder in self._temp_folders():
            if folder.is_dir() and not folder.is_symlink():
                for p in folder.iterdir():
                    if TEMP_RE.fullmatch(p.name) and p.is_file() and not p.is_symlink():
                        p.unlink(missing_ok=True)

    def check_no_rewrite(self) -> None:
        """Refuse, for a reader, a directory whose rewrite has not finished: a reader never commits another
        writer's journal (a live writer is finishing it; a dead one's is finished by the next writer)."""
        if not os.path.lexists(self.path / JOURNAL):
            return
        if writer_alive(self.path):
            raise ReachlensError(f"{str(self.path)!r} is being rewritten by another reachlens process; read it again "
                                 "when that finishes")
        raise ReachlensError(f"{str(self.path)!r} holds a rewrite that was interrupted ({JOURNAL}); finish it with "
                             f"`reachlens convert {self.path}`, then read it again")

    def recover(self) -> None:
        """Finish an interrupted rewrite, if there is one (takes the writer lock for that moment)."""
        if os.path.lexists(self.path / JOURNAL):
            with self.writer():
                pass


def read_record(path: str | os.PathLike) -> RunRecord:
    """The run record of any run directory (its status as it stands: see :meth:`RunDir.record`), without
    reading its tables. A directory whose rewrite did not finish is refused (:meth:`RunDir.check_no_rewrite`):
    a reader changes nothing.

    >>> read_record("runs/base").status  # doctest: +SKIP
    'complete'
    """
    run = RunDir(path)
    record = run.record()
    run.check_no_rewrite()
    return record


def _regular_or_gone(path: Path) -> bool:
    """Whether ``path`` is a regular file (not a link, a FIFO, a device) or nothing (already moved)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return True


def _is_run_file(name: Any) -> bool:
    """Whether ``name`` is a file a rewrite may replace: ``run.json``, ``summary.json`` or a table
    ``NAME.parquet``, each a plain name inside the run's directory."""
    return isinstance(name, str) and not any(c in name for c in "/\\\0") and (
        name in (RUN_FILE, SUMMARY_FILE) or (name.endswith(".parquet") and not name.startswith(".")))
