"""A job whose every slice gives the same named tables, and whose run is composed from them: :class:`TablesJob`.

A routing search, a recognition run and a causal sweep (:mod:`reachlens.routing.job`,
:mod:`reachlens.studies.recognition_job`, :mod:`reachlens.studies.causal_job`) are such jobs: slice s decodes its
questions (or its rows of conditions) into the tables :attr:`TablesJob.part_tables` names, written as one part of the
run directory (:class:`~reachlens.store.PartsDir`) in that order, so a part is whole when its last table is there (a
``kill -9`` leaves whole files only). When every slice is in, each table is the concatenation of its parts in plan
order, and the job composes its run from them (:meth:`TablesJob.compose`): the run an uninterrupted single-process
decode makes, since slice s decodes the same rows wherever and whenever it runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.runner.executor import Shard, Slice
from reachlens.store import RUN_KINDS, PartsDir, RunRecord
from reachlens.store.run_dir import SUMMARY_FILE

__all__ = ["TablesJob"]


class TablesJob:
    """The :meth:`todo` and :meth:`finish` of a :class:`~reachlens.runner.Job` whose parts are named tables (see the
    module docstring); a subclass (a frozen dataclass) gives :attr:`part_tables`, ``check``, ``resolve``, ``plan``
    and :meth:`compose`."""

    part_tables: ClassVar[tuple[str, ...]]
    """The tables of every part, in the order they are written (the last marks a part whole)."""
    redo: ClassVar[str] = "re-run the same command into this directory to decode its slice again"

    def plan(self, shard: Shard) -> list[Slice]:
        raise NotImplementedError

    def compose(self, shard: Shard, tables: dict[str, pd.DataFrame], record: RunRecord) -> Any:
        """The run (a :class:`~reachlens.store.Run` with ``record``) from each table of every part, concatenated."""
        raise NotImplementedError

    def todo(self, shard: Shard, store: PartsDir | None) -> list[Slice]:
        """Every slice whose part lacks a table; none once the run completed (its summary written)."""
        if store is None:
            return self.plan(shard)
        if (store.path / SUMMARY_FILE).is_file():  # completed once: its tables are whole, its parts removed
            return []
        files = store.part_files()
        return [s for s in self.plan(shard) if not set(self.part_tables) <= set(files.get(s[:2], {}))]

    def finish(self, o: Any) -> Any:
        """The run from its parts (the directory's, or those decoded in memory), written complete."""
        if o.was_complete:  # the same run, finished: read, not composed again
            done = RUN_KINDS[o.record.kind].read(o.store)
            o.store.finish(done.summary())
            return dataclasses.replace(done, record=o.store.record())
        parts = o.store.parts(self.redo) if o.store is not None else o.parts
        plan = self.plan(o.shard)
        missing = [s for s in plan if not set(self.part_tables) <= set(parts.get(s[:2], {}))]
        if missing:
            where = str(o.store.path) if o.store is not None else "in memory"
            raise ReachlensError(f"run {where!r}: the part of slice {missing[0]} is not whole; {self.redo}")
        tables = {name: pd.concat([parts[s[:2]][name] for s in plan], ignore_index=True) if plan else pd.DataFrame()
                  for name in self.part_tables}
        result = self.compose(o.shard, tables, o.store.record() if o.store is not None else o.record)
        if o.store is None:
            return result
        result.write_to(o.store)
        o.store.finish(result.summary())
        return dataclasses.replace(result, record=o.store.record(), location=o.store.path)
