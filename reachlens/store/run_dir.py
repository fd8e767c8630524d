"""Run directories: what every study leaves on disk, in one format, owned by one class.

Layout of every run (an audit, a comparison, a routing run, a recognition run, a causal sweep, a
training audit)::

    DIR/run.json        the run record (:class:`RunRecord`): format, kind, protocol (the decode spec),
                        the study's own options, model identity, data identity, reachlens version, command
    DIR/summary.json    the study's summary (written when a run completes; NaN written as null)
    DIR/*.parquet       its typed tables (:mod:`reachlens.records`), raw text kept for re-scoring
    DIR/.lock           while a writer runs: its pid (see :mod:`reachlens.store.lock`)

An audit adds ``parts/`` (its finished batches while it runs; :class:`~reachlens.store.AuditDir`).
Audit directories written before ``run.json`` existed hold ``protocol.json`` instead: they read as
audits, and ``reachlens convert DIR`` (:meth:`RunDir.convert`) rewrites their header as ``run.json``.

Safety rules, because a run takes hours and ``out=`` is typed by hand:

* A directory is created fresh (it does not exist, or is empty) or reopened only if it is a run
  directory (its ``run.json`` is a readable run record). Anything else is refused before any file is
  written, and reachlens never deletes a file it did not write.
* One writer at a time: :meth:`RunDir.writer` takes the directory's lock; a second writer is
  refused with the owner's pid.
* Every file is written under a unique temporary name, flushed to disk (``fsync``), renamed into
  place, and the directory entry synced: a ``kill -9`` or a power cut leaves whole files only.
* A rewrite of a run's tables (:meth:`RunDir.rewrite`, used by ``rescore``) stages the new files,
  records them in ``.rewrite.json``, then moves them into place, the header last; a rewrite
  interrupted after staging is completed by the next writer, one interrupted before is dropped.

A run whose kind, protocol, options, model or data differ from the directory's is refused with the
differing fields named (:meth:`RunDir.check_run`): a directory never mixes two runs.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
import os
import re
import secrets
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.errors import DISK_FULL, MissingFileError, ReachlensError, ReachlensWarning, disk_full
from reachlens.protocol import Protocol, ProtocolMismatch
from reachlens.store.lock import LOCK_NAME, DirectoryLock

__all__ = [
    "FORMAT", "KINDS", "RUN_FILE", "RunDir", "RunRecord", "read_json", "read_run", "recording_command",
    "run_differences", "write_json", "write_parquet",
]

RUN_FILE = "run.json"
LEGACY_HEADER = "protocol.json"
"""The header of an audit directory written before ``run.json`` (read as an audit; ``convert`` rewrites it)."""
FORMAT = "reachlens-run"
KINDS = ("audit", "comparison", "routing", "recognition", "silence", "steer", "units", "training_audit",
         "temperature_control", "length_control")
"""The kinds of run a directory can hold."""
JOURNAL = ".rewrite.json"
_TEMP_RE = re.compile(r"\..+\.\d+\.[0-9a-f]{8}\.tmp")
_SUMMARY_FLOATS = ("D", "O_K", "gap")

_COMMAND: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar("reachlens_command", default=None)


@contextlib.contextmanager
def recording_command(argv: Sequence[str]) -> Iterator[None]:
    """Within the block, runs record ``argv`` as the command that made them (the CLI sets it)."""
    token = _COMMAND.set(tuple(argv))
    try:
        yield
    finally:
        _COMMAND.reset(token)


def _version() -> str:
    from reachlens import __version__

    return __version__


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
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError) and err.errno in DISK_FULL:
            raise disk_full(path, err) from None
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


# --- the run record --------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunRecord:
    """What made a run: ``run.json``. Every stored result carries it.

    >>> RunRecord.new("audit", Protocol("arith", k=8), {"spec": "zoo:base", "fingerprint": "sha256:..."}).kind
    'audit'
    """

    kind: str
    """Which study (:data:`KINDS`): ``audit``, ``comparison``, ``routing``, ``recognition``, ..."""
    protocol: Protocol | None
    """The decode spec (resolved against the task); None for a run that decodes nothing of its own
    (a comparison records its audits' protocol)."""
    model: dict[str, Any]
    """Model identity (:func:`reachlens.models.identity_of`); a run over several models maps each
    role or name to its identity (a comparison: ``base`` and ``trained``)."""
    data: dict[str, Any] | None = None
    """Data identity of the task (:attr:`reachlens.tasks.Task.data_identity`); None when unknown."""
    options: dict[str, Any] = field(default_factory=dict)
    """The study's own options beside the protocol (a routing run's space, strategy and budget)."""
    reachlens_version: str | None = None
    """The reachlens version that started the run (None: written before it was recorded)."""
    command: tuple[str, ...] | None = None
    """The command line that started the run (None: started from Python)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Descriptive fields that are not part of the run's identity (task source, question count)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ReachlensError(f"kind={self.kind!r} is not a kind of run; known: {', '.join(KINDS)}")

    @classmethod
    def new(
        cls, kind: str, protocol: Protocol | None, model: Mapping[str, Any], data: Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None, extra: Mapping[str, Any] | None = None,
    ) -> RunRecord:
        """A record for a run starting now: this reachlens version and the command running it."""
        return cls(kind, protocol, dict(model), dict(data) if data else None, _jsonable(dict(options or {})),
                   _version(), _COMMAND.get(), dict(extra or {}))

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "kind": self.kind,
            "protocol": None if self.protocol is None else self.protocol.to_dict(),
            "protocol_hash": None if self.protocol is None else self.protocol.hash,
            "options": dict(self.options), "model": dict(self.model), "data": self.data,
            "reachlens_version": self.reachlens_version,
            "command": None if self.command is None else list(self.command), **self.extra,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunRecord:
        """Read a ``run.json`` (or the ``protocol.json`` of an audit directory written before it)."""
        d = dict(d)
        own = {"format", "kind", "protocol", "protocol_hash", "options", "model", "data", "reachlens_version", "command"}
        p = d.get("protocol")
        return cls(
            kind=d.get("kind", "audit"), protocol=None if p is None else Protocol.from_dict(p),
            model=dict(d.get("model") or {}), data=d.get("data") or None, options=dict(d.get("options") or {}),
            reachlens_version=d.get("reachlens_version"),
            command=None if d.get("command") is None else tuple(d["command"]),
            extra={k: v for k, v in d.items() if k not in own},
        )


def _jsonable(obj: Any) -> Any:
    """Options as JSON reads them back (tuples as lists), so a record equals itself after a round trip."""
    return json.loads(json.dumps(obj, default=str))


# --- identity ------------------------------------------------------------------------------------------
def run_differences(
    header: Mapping[str, Any], protocol: Protocol | None, model: Mapping[str, Any] | None,
    data: Mapping[str, Any] | None, *, options: Mapping[str, Any] | None = None, kind: str | None = None,
) -> tuple[dict[str, tuple[Any, Any]], list[str]]:
    """What differs between a stored run (its header) and another run's kind, protocol, options,
    model and data.

    Returns ``(differences, notes)``: differences as ``{field: (stored, other)}`` with fields such as
    ``k``, ``options.budget``, ``model.fingerprint`` or ``data.sha256``; notes say what could not be
    checked (a directory written before data identity was recorded). ``None`` for any part skips it;
    a model fingerprint ``unknown`` on either side is not compared (its spec is, then). Models with
    equal fingerprints are one model however their specs are spelled (``./m``, ``m``, ``/abs/m``).
    """
    from reachlens.models import same_model

    diffs: dict[str, tuple[Any, Any]] = {}
    notes: list[str] = []
    if kind is not None and header.get("kind", "audit") != kind:
        diffs["kind"] = (header.get("kind", "audit"), kind)
    if protocol is not None:
        if header.get("protocol") is None:
            diffs["protocol"] = (None, protocol.to_dict())
        else:
            diffs.update(Protocol.from_dict(header["protocol"]).diff(protocol))
    if options is not None:
        stored_opts, opts = dict(header.get("options") or {}), _jsonable(dict(options))
        for key in sorted(set(stored_opts) | set(opts)):
            if stored_opts.get(key) != opts.get(key):
                diffs[f"options.{key}"] = (stored_opts.get(key), opts.get(key))
    if model is not None:
        stored = header.get("model") or {}
        unknown = "unknown" in (stored.get("fingerprint"), model.get("fingerprint"))
        same = not unknown and same_model(stored, model)
        # a model is its fingerprint: ./m, m and /abs/m are one model (the spelling is named when they differ)
        if not same and stored.get("spec") != model.get("spec"):
            diffs["model.spec"] = (stored.get("spec"), model.get("spec"))
        if not unknown and not same:
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
        return ("it was made from other data: pass the same data file (data=) and loader options, "
                "or write to a new directory (nothing in it was changed)")
    return "write to a new directory (out=), or delete this one to redo it (nothing in it was changed)"


# --- the directory -------------------------------------------------------------------------------------
class RunDir:
    """One run directory: create, reopen, resume, lock and refuse, for every kind of run.

    >>> run = RunDir("runs/route")  # doctest: +SKIP
    >>> with run.writer():  # doctest: +SKIP
    ...     run.start(RunRecord.new("routing", protocol, identity_of(model), task.data_identity, options))
    ...     run.write_table("questions", questions)
    ...     run.write_summary(summary)
    """

    kind: str | None = None
    """The kind of run this class holds (None: any)."""
    own_names: tuple[str, ...] = ()
    """Names a directory of this kind holds besides run.json that do not make it foreign (a training
    audit's ``study.json`` and ``audits/``, as written before run.json)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._lock = DirectoryLock(self.path)

    @property
    def _what(self) -> str:
        return f"{self.kind} directory" if self.kind else "run directory"

    # --- header ----------------------------------------------------------------------------------
    @property
    def header_path(self) -> Path:
        """``run.json``; ``protocol.json`` for an audit directory written before run.json."""
        run = self.path / RUN_FILE
        legacy = self.path / LEGACY_HEADER
        return legacy if not run.is_file() and legacy.is_file() else run

    def exists(self) -> bool:
        return self.header_path.is_file()

    def read_header(self) -> dict[str, Any]:
        """The run record as a dict (:meth:`RunRecord.to_dict`); a missing, corrupt or foreign header
        is a one-line error naming it."""
        if not self.path.is_dir():
            what = "is a file" if self.path.exists() else "does not exist"
            raise MissingFileError(f"{self._what} {str(self.path)!r} {what}")
        if not self.exists():
            raise MissingFileError(f"{str(self.path)!r} is not a reachlens run directory (no {RUN_FILE})")
        path = self.header_path
        raw = read_json(path, "run record")
        if not isinstance(raw, dict) or "model" not in raw or (path.name == LEGACY_HEADER and not isinstance(raw.get("protocol"), dict)):
            raise ReachlensError(f"{str(path)!r} is not a run record (it lacks 'protocol' or 'model'); "
                                 "is this a reachlens run directory?")
        try:
            record = RunRecord.from_dict(raw)
        except (ReachlensError, TypeError) as err:
            raise ReachlensError(f"{str(path)!r} holds an unreadable run record ({err})") from None
        if self.kind is not None and record.kind != self.kind:
            raise ReachlensError(f"{str(self.path)!r} holds a {record.kind} run, not an {self.kind}; "
                                 f"read it with `reachlens show {self.path}`")
        return record.to_dict()

    def record(self) -> RunRecord:
        """The run record (``run.json``)."""
        return RunRecord.from_dict(self.read_header())

    def protocol(self) -> Protocol:
        p = self.record().protocol
        if p is None:
            raise ReachlensError(f"{str(self.path)!r} records no protocol (a {self.record().kind} run)")
        return p

    def check_target(self) -> None:
        """Refuse, before anything runs, a path that is a file or a directory of other files."""
        if self.path.exists() and not self.path.is_dir():
            raise ReachlensError(f"{self._what} {str(self.path)!r} is a file; choose a directory to write to (out=)")
        if not self.path.is_dir() or self.exists():
            if self.exists():
                self.read_header()  # a corrupt header is reported now
            return
        foreign = sorted(p.name for p in self.path.iterdir()
                         if p.name != LOCK_NAME and p.name not in self.own_names and not _TEMP_RE.fullmatch(p.name))
        if foreign:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise ReachlensError(
                f"{str(self.path)!r} is not empty ({shown}) and is not a reachlens run directory (no {RUN_FILE}); "
                "choose a new or empty directory (nothing in it was touched)"
            )

    def check_run(
        self, protocol: Protocol | None, model: Mapping[str, Any] | None, data: Mapping[str, Any] | None,
        *, options: Mapping[str, Any] | None = None, what: str | None = None,
    ) -> None:
        """Raise :class:`ProtocolMismatch` naming every difference between this directory's run and
        the one described; warn when part of it cannot be checked. Nothing to do for a new directory."""
        if not self.exists():
            return
        diffs, notes = run_differences(self.read_header(), protocol, model, data, options=options, kind=self.kind)
        if diffs:
            raise ProtocolMismatch(diffs, what=what or f"{self._what} {str(self.path)!r} holds another run: "
                                   "its settings differ", fix=_fix_for(diffs))
        for note in notes:
            warnings.warn(f"{self._what} {str(self.path)!r}: {note}", ReachlensWarning, stacklevel=3)

    @contextlib.contextmanager
    def writer(self) -> Iterator[RunDir]:
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
            raise RuntimeError(f"write to a {self._what} inside `with run.writer():`")

    def start(self, record: RunRecord) -> None:
        """Check that the directory holds this run (kind, protocol, options, model, data), or start
        it: write ``run.json``. Call inside :meth:`writer`."""
        self._require_lock()
        if self.kind is not None and record.kind != self.kind:
            raise ReachlensError(f"a {self._what} holds {self.kind} runs, not {record.kind!r}")
        if self.exists():
            header = self.read_header()
            if header["kind"] != record.kind:
                raise ProtocolMismatch({"kind": (header["kind"], record.kind)},
                                       what=f"{str(self.path)!r} holds another kind of run",
                                       fix=_fix_for({"kind": None}))
            # an audit of a task without data identity is checked as "unknown" (a note); a run over
            # several audits (a comparison, a training audit) has none of its own to check
            data = record.data if record.data is not None else ({} if record.kind == "audit" else None)
            self.check_run(record.protocol, record.model, data, options=record.options)
            stored = header["model"].get("fingerprint")
            if stored != record.model.get("fingerprint") and "unknown" not in (stored, record.model.get("fingerprint")):
                # the same model, recognized by the fingerprint of reachlens before full hashing:
                # record its full identity, so the summary and the header name one fingerprint
                write_json(self.header_path, {**read_json(self.header_path, "run record"), "model": dict(record.model)})
            return
        write_json(self.path / RUN_FILE, record.to_dict())

    # --- tables and summary --------------------------------------------------------------------------
    def write_table(self, name: str, df: pd.DataFrame) -> None:
        """Write ``DIR/{name}.parquet`` (durably). Call inside :meth:`writer`."""
        self._require_lock()
        write_parquet(self.path / f"{name}.parquet", df)

    def read_table(self, name: str) -> pd.DataFrame:
        """``DIR/{name}.parquet``; a missing table is a one-line error naming it."""
        path = self.path / f"{name}.parquet"
        if not path.is_file():
            raise MissingFileError(f"{self._what} {str(self.path)!r} has no {name} table ({path.name}); "
                                   "the run did not finish, or this is not that kind of run")
        return pd.read_parquet(path)

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        """Write ``summary.json`` (NaN as null). Call inside :meth:`writer`."""
        self._require_lock()
        write_json(self.path / "summary.json", dict(summary))

    def has_summary(self) -> bool:
        return (self.path / "summary.json").is_file()

    def summary(self) -> dict[str, Any]:
        """``summary.json``, with ``null`` numbers read back as ``NaN``."""
        s = read_json(self.path / "summary.json", "run summary")
        for key in _SUMMARY_FLOATS:
            if key in s and s[key] is None:
                s[key] = math.nan
        if isinstance(s.get("pass_at_k"), dict):
            s["pass_at_k"] = {k: math.nan if v is None else v for k, v in s["pass_at_k"].items()}
        return s

    # --- journaled rewrite ---------------------------------------------------------------------------
    def rewrite(
        self, tables: Mapping[str, pd.DataFrame], summary: dict[str, Any], header: dict[str, Any] | None,
    ) -> None:
        """Replace tables, the summary and (last) the header as one step that a crash cannot split.

        The new files are staged under temporary names and listed in ``.rewrite.json``; only then are
        they moved into place, the header last. A writer that finds the journal finishes the moves.
        """
        self._require_lock()
        staged: list[tuple[str, str]] = []
        files: list[tuple[str, Callable[[Path], None]]] = [
            (f"{name}.parquet", lambda tmp, df=df: df.to_parquet(tmp, index=False)) for name, df in tables.items()
        ]
        files.append(("summary.json", lambda tmp, text=_json_text(summary): tmp.write_text(text)))
        if header is not None:
            files.append((self.header_path.name, lambda tmp, text=_json_text(header): tmp.write_text(text)))
        try:
            for name, write in files:
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
        """Move staged files into place (those already moved are skipped). Idempotent: recovery runs
        it again after a crash."""
        for staged, target in moves:
            if (self.path / staged).is_file():
                os.replace(self.path / staged, self.path / target)
        _fsync_dir(self.path)
        self._after_commit()

    def _after_commit(self) -> None:
        """What a subclass drops once a rewrite is in place (an audit's parts)."""

    def _temp_folders(self) -> list[Path]:
        return [self.path]

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
        for folder in self._temp_folders():
            if folder.is_dir():
                for p in folder.iterdir():
                    if _TEMP_RE.fullmatch(p.name) and p.is_file():
                        p.unlink(missing_ok=True)

    def recover(self) -> None:
        """Finish an interrupted rewrite, if there is one (takes the writer lock for that moment)."""
        if (self.path / JOURNAL).is_file():
            with self.writer():
                pass

    # --- the format before run.json ------------------------------------------------------------------
    def is_legacy(self) -> bool:
        """Whether this is an audit directory written before ``run.json`` (its header is ``protocol.json``)."""
        return self.header_path.name == LEGACY_HEADER

    def convert(self) -> bool:
        """Rewrite a ``protocol.json`` header as ``run.json`` (under the writer lock); False when the
        directory has ``run.json`` already. Tables and summary are unchanged: they are the same format."""
        self.read_header()  # a run directory at all? (before the writer, which would create a missing one)
        with self.writer():
            if not self.is_legacy():
                self.read_header()  # a run directory at all?
                return False
            header = self.read_header()
            write_json(self.path / RUN_FILE, {**header, "converted_from": LEGACY_HEADER})
            (self.path / LEGACY_HEADER).unlink()
            _fsync_dir(self.path)
            return True


def read_run(path: str | os.PathLike) -> tuple[RunRecord, dict[str, Any] | None]:
    """The run record of any run directory and its summary (None while the run has not finished).

    >>> record, summary = read_run("runs/base")  # doctest: +SKIP
    >>> record.kind, record.model["spec"], summary["D"]  # doctest: +SKIP
    """
    run = RunDir(path)
    run.recover()
    record = run.record()
    return record, run.summary() if run.has_summary() else None
