"""One question's rows of a run's table, read from the parquet file without reading the rest into memory.

A run's candidate tables (an audit's ``samples``, a routing run's or a probe run's ``candidates``) hold K rows per
question, a question's rows together, in task order. The viewer opens one question at a time, so it never reads a
whole table: :class:`RowIndex` streams the ``question_id`` column once, in batches, and keeps where each question's
rows lie (one ``(start, stop)`` range per run of rows: N entries, not N x K); :meth:`RowIndex.rows` then streams the
row groups holding those rows, the columns asked for, in batches of :data:`BATCH_ROWS`, keeping only the rows in
range. The memory it holds is the index and one batch, whatever K x N is; the time to open a question grows with its
place in the file (every earlier batch of its row group is decoded and dropped), measured in benchmarks/README.md.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.store.files import regular_file

__all__ = ["BATCH_ROWS", "RowIndex"]

BATCH_ROWS = 2048
"""Rows decoded at a time."""
_BUFFER = 1 << 16
"""Bytes read from the file at a time (a buffered stream: a column chunk is never read whole)."""
_FIX = "restore it from a copy, or run it again into a new directory"


class RowIndex:
    """Where each question's rows are in one parquet table (built on first use, under a lock).

    >>> RowIndex(Path("runs/base/samples.parquet")).rows("q3", ["text", "answer"])  # doctest: +SKIP
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._ranges: dict[str, list[tuple[int, int]]] | None = None
        self._groups: list[tuple[int, int]] = []

    def _file(self):
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(regular_file(self.path, "table"), buffer_size=_BUFFER, pre_buffer=False)
        except ReachlensError:
            raise
        except Exception as err:  # noqa: BLE001 - pyarrow's errors: a damaged table, one line
            raise ReachlensError(f"table {str(self.path)!r} cannot be read ({type(err).__name__}: {err}); "
                                 f"{_FIX}") from None

    def _index(self) -> dict[str, list[tuple[int, int]]]:
        with self._lock:
            if self._ranges is None:
                self._ranges, self._groups = self._build()
            return self._ranges

    def _build(self) -> tuple[dict[str, list[tuple[int, int]]], list[tuple[int, int]]]:
        f = self._file()
        meta = f.metadata
        groups, at = [], 0
        for g in range(meta.num_row_groups):
            n = meta.row_group(g).num_rows
            groups.append((at, at + n))
            at += n
        ranges: dict[str, list[tuple[int, int]]] = {}
        last, start, row = None, 0, 0
        try:
            for batch in f.iter_batches(batch_size=BATCH_ROWS, columns=["question_id"]):
                ids, at = self._runs(batch.column(0))
                for qid, a in zip(ids, at.tolist()):
                    if qid != last:  # a run of rows ends: a question's rows, or a question cut by a batch's end
                        if last is not None:
                            ranges.setdefault(last, []).append((start, row + a))
                        last, start = qid, row + a
                row += batch.num_rows
        except Exception as err:  # noqa: BLE001
            raise ReachlensError(f"table {str(self.path)!r} cannot be read ({type(err).__name__}); {_FIX}") from None
        if last is not None:
            ranges.setdefault(last, []).append((start, row))
        return ranges, groups

    @staticmethod
    def _runs(column) -> tuple[list, np.ndarray]:
        """The value at the start of each run of equal values in ``column`` and where each run starts: compared as
        dictionary codes (one integer a row, never a Python string a row)."""
        import pyarrow as pa

        codes = column if pa.types.is_dictionary(column.type) else column.dictionary_encode()
        idx = codes.indices.fill_null(-1).to_numpy()
        if len(idx) == 0:
            return [], np.zeros(0, dtype=np.int64)
        at = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])
        values = codes.dictionary.to_pylist()
        return [values[i] if i >= 0 else None for i in idx[at].tolist()], at

    def count(self, question_id: str) -> int:
        """How many rows ``question_id`` has."""
        return sum(b - a for a, b in self._index().get(question_id, ()))

    def rows(self, question_id: str, columns: list[str] | None = None) -> pd.DataFrame:
        """The rows of ``question_id`` (``columns`` of them; all when None), in file order; empty when it has none."""
        import pyarrow as pa

        wanted = self._index().get(question_id, [])
        f = self._file()
        names = f.schema_arrow.names
        cols = [c for c in (columns or names) if c in names]
        pieces = []
        for g, (g0, g1) in enumerate(self._groups):
            inside = [(max(a, g0), min(b, g1)) for a, b in wanted if a < g1 and b > g0]
            if not inside:
                continue
            at = g0
            for batch in f.iter_batches(batch_size=BATCH_ROWS, row_groups=[g], columns=cols):
                end = at + batch.num_rows
                for a, b in inside:
                    if a < end and b > at:
                        pieces.append(batch.slice(max(a, at) - at, min(b, end) - max(a, at)))
                at = end
                if at >= max(b for _, b in inside):
                    break
        if not pieces:
            return pd.DataFrame(columns=cols)
        return pa.Table.from_batches(pieces).to_pandas()
