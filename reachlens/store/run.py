"""One ``Run``: every study's result has the same shape, and is saved and read one way.

A run is a kind (``audit``, ``comparison``, ``routing``, ...), its record (:class:`~reachlens.store.RunRecord`,
``run.json``), a summary (``summary()``, a dict of numbers and names) and its tables (``tables()``, named
DataFrames). Every kind is a class that derives from :class:`Run` and is registered by its kind, so that

* ``run.save(DIR)`` writes any run: the record (status ``running``), its tables, its summary, then status
  ``complete``; a directory holding another run, or other files, is refused;
* :func:`read_run` reads any run directory back as its typed run (an :class:`~reachlens.AuditResult`, a
  :class:`~reachlens.studies.Comparison`, ...), from the kind its ``run.json`` names;
* :func:`list_runs` lists every run under a folder (a training study's audits, comparisons and controls).

inspect_ai's ``EvalLog`` is the model: one log type with a format version and a status, one
``read_eval_log`` / ``write_eval_log`` / ``list_eval_logs`` trio for every log.

Adding a kind of run
--------------------
1. Write its class where the study lives, deriving from :class:`Run`, with a class attribute ``kind``
   (the name ``run.json`` records), a ``record`` (a :class:`RunRecord` of that kind: protocol, model
   identity, data identity, the study's options), ``summary()`` and ``tables()``.
2. Give it ``read(cls, run: RunDir)``: rebuild it from the record (``run.record()``) and the tables
   (``run.read_table(name)``); list in ``record_fields`` what it reads of the record's options (so a damaged
   record is one line), and join a path a record names only through :func:`~reachlens.store.single_name` or
   :meth:`RunDir.inside`. The default :meth:`Run.save` writes ``tables()`` as ``NAME.parquet``; override
   :meth:`Run.write_to` for a run that holds more (sub-runs in sub-directories, written with their own
   ``save``), and set ``dir_class`` for a directory with parts of its own (:class:`~reachlens.store.AuditDir`).
3. Decorate the class with :func:`register_kind` and import its module from ``reachlens/__init__.py`` (so
   the registry knows the kind whenever reachlens is imported). ``reachlens show`` and ``reachlens report``
   then read it; the report renders it by its kind (:mod:`reachlens.report`), with a generic page until
   the kind registers a view of its own there.
4. Add the kind to the test that reads every kind back (``tests/store/test_runs.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.protocol import Protocol
from reachlens.store.kinds import RUN_KINDS, register_kind
from reachlens.store.files import read_json
from reachlens.store.record import FORMAT, RunRecord, check_fields
from reachlens.store.run_dir import RUN_FILE, RunDir

__all__ = ["RUN_KINDS", "RecordedProtocol", "Run", "RunInfo", "list_runs", "read_run", "register_kind"]


class Run:
    """The base of every kind of run (a mixin: subclasses are frozen dataclasses with a ``record``)."""

    kind: ClassVar[str]
    """The kind ``run.json`` records (the registry's key)."""
    dir_class: ClassVar[type[RunDir]] = RunDir
    """The directory class its runs are written with."""
    record_fields: ClassVar[dict[str, tuple[type, ...]]] = {}
    """What :meth:`read` needs of the record beyond its common fields: dotted paths (``options.base_dir``) and their
    types (:func:`~reachlens.store.record.check_fields`), checked by :func:`read_run` before it reads."""
    record: RunRecord
    """What made the run (``run.json``)."""

    def summary(self) -> dict[str, Any]:
        """The run's headline numbers (what ``summary.json`` holds)."""
        raise NotImplementedError

    def tables(self) -> dict[str, pd.DataFrame]:
        """The run's tables by name (each saved as ``NAME.parquet``)."""
        raise NotImplementedError

    def report_tables(self) -> dict[str, pd.DataFrame]:
        """The tables a report of this run shows (default: all of them; a kind with long-form tables shows
        its per-question or per-condition ones)."""
        return self.tables()

    def save(self, path: str | os.PathLike) -> Path:
        """Write the run to the run directory ``path`` (complete); return its path. A directory holding another
        run is refused naming what differs; one holding this run is completed (a resumed run)."""
        run = self.dir_class(path)
        with run.writer():
            run.start(self.record)
            self.write_to(run)
            run.finish(self.summary())
        return run.path

    def write_to(self, run: RunDir) -> None:
        """Write what the run holds besides its record and summary (its tables). Inside ``run``'s writer."""
        for name, df in self.tables().items():
            run.write_table(name, df)

    @classmethod
    def read(cls, run: RunDir) -> Run:
        """The run stored in ``run`` (a directory of this kind)."""
        raise NotImplementedError

    @classmethod
    def upgrade(cls, path: Path, header: dict[str, Any], version: int) -> dict[str, Any]:
        """Bring the layout of a directory of this kind from run format ``version`` to ``version + 1``; return its
        record (:mod:`reachlens.store.convert` calls it once per version, oldest first, after giving a format-0
        record today's fields). Default: nothing of the kind changed."""
        return header

    @classmethod
    def load(cls, path: str | os.PathLike):
        """:func:`read_run` of ``path``, refused unless it holds a run of this class's kind."""
        run = read_run(path)
        if not isinstance(run, cls):
            raise ReachlensError(f"{str(path)!r} holds {_a(run.kind)} run, not {_a(cls.kind)} run; read it with "
                                 f"`reachlens show {path}`")
        return run


class RecordedProtocol:
    """A mixin for a kind of run whose protocol is the one its record holds (a routing run, a probe run)."""

    @property
    def protocol(self) -> Protocol:
        """The protocol the run decoded under, resolved against the task, as its record holds it."""
        if self.record.protocol is None:
            raise ReachlensError(f"this {self.kind} run's record holds no protocol; its run.json was not written "
                                 "by reachlens (run it again)")
        return self.record.protocol


def read_run(path: str | os.PathLike) -> Any:
    """The run stored in ``path``, typed by its kind (an :class:`~reachlens.AuditResult` for an audit, ...).

    Its ``record.status`` says whether it finished (``complete``), stopped (``failed``, ``interrupted``) or
    runs; a run that has not completed reads as far as it got.

    >>> run = read_run("runs/base")  # doctest: +SKIP
    >>> run.kind, run.record.status, run.summary()["D"]  # doctest: +SKIP
    ('audit', 'complete', 0.42)
    """
    probe = RunDir(path)
    record = probe.record()
    probe.check_no_rewrite()  # a reader never commits another writer's journal
    cls = RUN_KINDS[record.kind]
    check_fields(record.to_dict(), cls.record_fields, repr(str(probe.header_path)))
    return cls.read(cls.dir_class(path))


@dataclass(frozen=True)
class RunInfo:
    """One run found by :func:`list_runs`: where it is and its record (status as it stands)."""

    path: Path
    record: RunRecord

    @property
    def kind(self) -> str:
        return self.record.kind


def list_runs(root: str | os.PathLike) -> list[RunInfo]:
    """Every run directory at or under ``root``, in path order, with its record (tables are not read).

    >>> [(i.path.name, i.kind) for i in list_runs("runs/demo")][:2]  # doctest: +SKIP
    [('demo', 'training_audit'), ('base', 'audit')]
    """
    return [RunInfo(p, RunDir(p).record()) for p in sorted(_run_dirs(Path(root)))]


def _is_run(folder: Path) -> bool:
    """Whether ``folder`` holds a reachlens run record (another tool's ``run.json`` is not one)."""
    if not (folder / RUN_FILE).is_file():
        return False
    try:
        return read_json(folder / RUN_FILE, "run record").get("format") == FORMAT
    except (ReachlensError, AttributeError):
        return True  # ours but damaged: reading it names the problem


def _run_dirs(folder: Path) -> Iterator[Path]:
    """The run directories at or under ``folder``, links not followed (none leads out of it or round a loop)."""
    if _is_run(folder):
        yield folder
    if folder.is_dir():
        for child in sorted(folder.iterdir()):
            if child.is_dir() and not child.is_symlink() and child.name != "parts" and not child.name.startswith("."):
                yield from _run_dirs(child)


def _a(kind: str) -> str:
    """``kind`` with its article (an audit, a routing)."""
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"
