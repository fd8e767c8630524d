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
1. Write its class where the study lives: a frozen dataclass deriving from :class:`Run`, with a class attribute
   ``kind`` (the name ``run.json`` records), its fields (its tables, the runs it is made of), ``summary()`` and
   ``tables()``. :class:`Run` owns ``record`` and ``location``: give the class :meth:`Run.make_record` (its record
   from its fields, for a run made in Python) or always construct it with ``record=``; a run made of runs lists
   them in :meth:`Run.children` (a comparison's two audits), and :meth:`Run.save` writes each one inside the run
   (or, when it is already inside the same tree of runs, records where it is) with a relative path.
2. Give it ``read(cls, run: RunDir)``: rebuild it from the record (``run.record()``), the tables
   (``run.read_table(name)``) and its children (:meth:`Run.read_child`); list in ``record_fields`` what it reads of
   the record (so a damaged record is one line), and join any other path a record names only through
   :func:`~reachlens.store.single_name` or :meth:`RunDir.inside`. Override :meth:`Run.write_to` for a run that
   holds more than its tables, and set ``dir_class`` for a directory with parts of its own
   (:class:`~reachlens.store.PartsDir`).
3. Decorate the class with :func:`register_kind` and import its module from ``reachlens/__init__.py`` (so
   the registry knows the kind whenever reachlens is imported). ``reachlens show`` and ``reachlens report``
   then read it; the report renders it by its kind (:mod:`reachlens.report`), with a generic page until
   the kind registers a view of its own there. A change of what it stores is one step of
   :mod:`reachlens.store.convert`.
4. Add the kind to the test that reads every kind back (``tests/store/test_runs.py``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.protocol import Protocol
from reachlens.store.kinds import RUN_KINDS, register_kind
from reachlens.store.files import read_json, single_name
from reachlens.store.record import FORMAT, RunRecord, check_fields
from reachlens.store.run_dir import RUN_FILE, RunDir

__all__ = ["RUN_KINDS", "RecordedProtocol", "Run", "RunInfo", "list_runs", "read_run", "register_kind"]


@dataclass(frozen=True)
class Run:
    """The base of every kind of run: a frozen dataclass that owns the run's ``record`` and ``location`` (keyword
    fields, after a kind's own)."""

    kind: ClassVar[str]
    """The kind ``run.json`` records (the registry's key)."""
    dir_class: ClassVar[type[RunDir]] = RunDir
    """The directory class its runs are written with."""
    record_fields: ClassVar[dict[str, tuple[type, ...]]] = {}
    """What :meth:`read` needs of the record beyond its common fields: dotted paths (``options.k_cut``,
    ``children.base``) and their types (:func:`~reachlens.store.record.check_fields`), checked by :func:`read_run`
    before it reads."""
    record: RunRecord | None = field(default=None, kw_only=True, repr=False, compare=False)
    """What made the run (``run.json``); :meth:`make_record` when not given."""
    location: Path | None = field(default=None, kw_only=True, compare=False)
    """The directory it was read from or written to (None: in memory only)."""

    def __post_init__(self) -> None:
        if self.record is None:
            object.__setattr__(self, "record", self.make_record())

    def make_record(self) -> RunRecord:
        """The record of a run made in Python from its fields (a kind that can be made so overrides it)."""
        raise ReachlensError(f"a {self.kind} run is made with its record (record=...)")

    def children(self) -> dict[str, Run]:
        """The runs this run is made of, by name (a single folder name): saved inside it by :meth:`save`."""
        return {}

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
        """Write the run to the run directory ``path`` (complete); return its path. Each of its :meth:`children` is
        recorded by its path relative to ``path``: where it is when that is inside the same tree of runs (the
        outermost run directory holding ``path``), else saved inside ``path`` first (as ``path/FOLDER``, its own
        directory's name, or its name in :meth:`children`). A directory holding
        another run is refused naming what differs; one holding this run is completed (a resumed run)."""
        run = self.dir_class(path)
        record = self.record
        kids = self.children()
        if kids:
            placed = _placed(Path(path), kids)
            record = dataclasses.replace(record, children={name: rel for name, (rel, _) in placed.items()})
            inside = {folder: child for folder, child in placed.values() if child is not None}
            if inside:
                run.begin(record)  # a run directory before its children are written inside it
                for folder, child in inside.items():
                    child.save(run.path / folder)
        with run.writer():
            run.start(record)
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

    @staticmethod
    def read_child(run: RunDir, name: str) -> Any:
        """The child ``name`` of the run in ``run`` (its record's ``children``), read where the record says, inside
        the run's tree (:meth:`RunDir.inside`)."""
        relative = run.record().children.get(name)
        return read_run(run.inside(relative, f"child {name!r}"))

    @classmethod
    def load(cls, path: str | os.PathLike):
        """:func:`read_run` of ``path``, refused unless it holds a run of this class's kind."""
        run = read_run(path)
        if not isinstance(run, cls):
            raise ReachlensError(f"{str(path)!r} holds {_a(run.kind)} run, not {_a(cls.kind)} run; read it with "
                                 f"`reachlens show {path}`")
        return run


def _tree(path: Path) -> Path:
    """The outermost run directory holding ``path`` (``path`` itself when none does)."""
    tree = path.resolve()
    for parent in tree.parents:
        if (parent / RUN_FILE).is_file():
            tree = parent
    return tree


def _placed(path: Path, kids: dict[str, Run]) -> dict[str, tuple[str, Run | None]]:
    """Each child's path relative to ``path``, and the child itself when it must be saved inside ``path`` first: in a
    folder of its own directory's name (its name where that is none, or two children share one)."""
    tree, here = _tree(path), path.resolve()
    folders = {name: single_name(child.location.name if child.location is not None else name, "child name")
               for name, child in kids.items()}
    if len(set(folders.values())) < len(folders):
        folders = {name: single_name(name, "child name") for name in kids}
    out: dict[str, tuple[str, Run | None]] = {}
    for name, child in kids.items():
        where = None if child.location is None else Path(child.location).resolve()
        if where is not None and where.is_relative_to(tree) and (where / RUN_FILE).is_file():
            out[name] = (os.path.relpath(where, here), None)
        else:
            out[name] = (folders[name], child)
    return out


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
