"""What the viewer shows, read lazily from run directories: each run's question sets.

``reachlens view DIR...`` opens every run at or under each DIR (:func:`~reachlens.store.list_runs`, records only)
and offers one **question set** per table of questions there:

* a comparison (``reachlens compare --out``, each pair of a training audit): its join (``questions``), one row per
  question with both sides' fates and counts, each side's deployed answer beside it; its two audits' samples side by
  side when a question is opened;
* an audit (each checkpoint of a training audit, each rerun of a control, each audit of an elicitation): its
  ``questions`` table; its K samples when a question is opened.

A set's question table is read when the set is first shown (its columns only: ``questions.parquet`` is one row per
question) and kept; a question's samples are read when it is opened, those rows alone
(:class:`~reachlens.view.samples.RowIndex`). A run that is not complete, or whose table cannot be read, is a set
whose ``problem`` says so in one line: the viewer shows it and goes on, never a traceback.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.store import RunDir, list_runs
from reachlens.store.files import present, read_parquet
from reachlens.view import runs
from reachlens.view.prompt import question_golds, question_texts
from reachlens.view.samples import RowIndex

__all__ = ["GROUP_COLUMNS", "SAMPLE_COLUMNS", "AuditSide", "QuestionSet", "describe", "question_sets"]

_FIX = "restore it from a copy, or run it again into a new directory"
SAMPLE_COLUMNS = ["candidate_idx", "text", "answer", "correct", "scored", "finish_reason", "n_tokens", "mean_logprob"]
"""A sample's columns, its text among them (a sample opened)."""
GROUP_COLUMNS = ["candidate_idx", "answer", "correct", "scored"]
"""The columns a question's samples are grouped and counted by (a question opened: no text is read)."""


@dataclass
class AuditSide:
    """One audit, read lazily: its record, its question table when asked, one question's samples when asked."""

    name: str
    """What the page calls it: a checkpoint's name (``base``, ``grpo``) or the audit's folder."""
    path: Path
    k_cut: int | None = None
    """A comparison's common budget: only samples below it are shown (None: all)."""
    table: str = "samples"
    """The table of its candidates: an audit's ``samples``, a probe or routing run's ``candidates``, a recognition
    run's ``options``."""
    _questions: pd.DataFrame | None = field(default=None, repr=False)
    _index: RowIndex | None = field(default=None, repr=False)
    _last: tuple | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def record(self):
        return RunDir(self.path).record()

    def questions(self) -> pd.DataFrame:
        with self._lock:
            if self._questions is None:
                self._questions = _table(self.path, "questions")
            return self._questions

    def rows(self, question_id: str, columns: list[str] | None = None) -> pd.DataFrame:
        """The question's rows of the candidate table (``columns`` of them: all when None), in file order."""
        with self._lock:
            if self._index is None:
                path = self.path / f"{self.table}.parquet"
                if not present(path, "table"):
                    raise ReachlensError(f"run {str(self.path)!r} has no {self.table} table; the run did not finish")
                self._index = RowIndex(path)
            last = self._last
        if last is not None and last[0] == (question_id, tuple(columns or ())):
            return last[1]
        rows = self._index.rows(question_id, columns).reset_index(drop=True)
        self._last = ((question_id, tuple(columns or ())), rows)  # one question's rows: its texts opened one by one
        return rows

    def samples(self, question_id: str, columns: list[str] = SAMPLE_COLUMNS) -> pd.DataFrame:
        """The question's samples (below ``k_cut``; ``columns`` of them, ``candidate_idx`` among them), in sample
        order."""
        rows = self.rows(question_id, columns)
        if self.k_cut is not None and len(rows):
            rows = rows[rows["candidate_idx"] < self.k_cut]
        return rows.sort_values("candidate_idx", kind="stable").reset_index(drop=True)


@dataclass
class QuestionSet:
    """One browsable table of questions: an audit's or a comparison's (two sides)."""

    key: str
    """Its name in the address bar: the DIR's number and the run's path under it (``0/comparisons/base--grpo``)."""
    kind: str
    """``audit``, ``comparison``, ``probe``, ``routing`` or ``recognition``."""
    title: str
    path: Path
    status: str
    sides: tuple[AuditSide, ...] = ()
    problem: str | None = None
    """Why it cannot be shown, or what is missing (one line); None when it reads."""
    join: Callable[[], pd.DataFrame] | None = None
    """A comparison not saved as one (an elicitation's pair): how to join its two audits; None: its ``questions``."""
    _table: pd.DataFrame | None = field(default=None, repr=False)
    _texts: threading.Event = field(default_factory=threading.Event, repr=False)
    _texts_begun: bool = field(default=False, repr=False)
    _texts_error: BaseException | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def paired(self) -> bool:
        return self.kind == "comparison"

    @property
    def texts_ready(self) -> bool:
        """Whether the list's ``question`` column holds the questions' texts yet (:meth:`table`)."""
        return self._texts.is_set()

    def table(self, wait: bool = True) -> pd.DataFrame:
        """The question list: one row per question (read once, kept), each question's text in ``question``.

        A run stores no question text: it comes from the run's task, rebuilt (:func:`question_texts`; a generated
        task is drawn again, seconds for ``arith_hard``). ``wait=False`` returns the list at once, its ``question``
        column empty until :attr:`texts_ready`, the texts rebuilt in a background thread meanwhile (the server's
        first answer); ``wait=True`` waits for them.
        """
        with self._lock:
            if self._table is None:
                table = _TABLES[self.kind](self)
                table.insert(1, "question", pd.Series(None, index=table.index, dtype=object))
                self._table = table
            begin, self._texts_begun = not self._texts_begun, True
        if begin and wait:
            self._fill_texts()
        elif begin:
            threading.Thread(target=self._fill_texts, name="reachlens-view-texts", daemon=True).start()
        if wait:
            self._texts.wait()
            if self._texts_error is not None:  # the rebuild failed (in the background): said to whoever waits
                raise self._texts_error
        return self._table

    def _fill_texts(self) -> None:
        try:
            texts = question_texts(self.sides[0].record)
            with self._lock:  # a new frame: a list being written from the old one is left as it is
                self._table = self._table.assign(question=self._table["question_id"].map(texts))
        except Exception as err:  # noqa: BLE001 - kept for table(wait=True), which raises it in its own thread
            self._texts_error = err
        finally:
            self._texts.set()


def _table(path: Path, name: str) -> pd.DataFrame:
    file = path / f"{name}.parquet"
    if not present(file, "table"):
        raise ReachlensError(f"run {str(path)!r} has no {name} table; it did not finish (or was damaged)")
    return read_parquet(file, _FIX)


def _status_words(realized: pd.Series, reachable: pd.Series) -> pd.Series:
    words = pd.Series("unreachable", index=realized.index, dtype=object)
    words[reachable & ~realized] = "reachable, not realized"
    words[realized & reachable] = "realized"
    words[realized & ~reachable] = "realized, not reachable"
    return words


def _audit_table(side: AuditSide) -> pd.DataFrame:
    q = side.questions()
    keep = ["question_id", "gold", "realized", "reachable", "n_correct", "n_scored", "propensity",
            "deployed_answer", "deployed_scored", "deployed_finish"]
    out = q[[c for c in keep if c in q.columns]].copy()
    out["realized"], out["reachable"] = out["realized"].astype(bool), out["reachable"].astype(bool)
    out["status"] = _status_words(out["realized"], out["reachable"])
    return out.reset_index(drop=True)


def _pair_table(qs: QuestionSet) -> pd.DataFrame:
    join = _table(qs.path, "questions") if qs.join is None else qs.join()
    for side, audit in zip(("base", "trained"), qs.sides):
        answers = audit.questions().set_index("question_id")
        join[f"{side}_answer"] = join["question_id"].map(answers["deployed_answer"])
        join[f"{side}_status"] = _status_words(join[f"{side}_realized"].astype(bool),
                                               join[f"{side}_reachable"].astype(bool))
    first = ["question_id", "gold", "realized_fate", "reach_fate", "base_answer", "trained_answer"]
    return join[first + [c for c in join.columns if c not in first]].reset_index(drop=True)


def _run_table(qs: QuestionSet) -> pd.DataFrame:
    side = qs.sides[0]
    if qs.kind == "probe":
        return runs.probe_table(qs.path, question_golds(side.record))
    if qs.kind == "routing":
        return runs.routing_table(_table(qs.path, "questions"), question_golds(side.record))
    return runs.recognition_table(_table(qs.path, "questions"))


_TABLES = {"audit": lambda qs: _audit_table(qs.sides[0]), "comparison": _pair_table, "probe": _run_table,
           "routing": _run_table, "recognition": _run_table}


def question_sets(dirs: list[str | Path]) -> list[QuestionSet]:
    """Every question set at or under each of ``dirs``: comparisons first, then audits, each in path order.

    Raises:
        ReachlensError: a DIR is no directory, or holds no run.
    """
    out: list[QuestionSet] = []
    for i, d in enumerate(dirs):
        root = Path(d)
        if not root.is_dir():
            raise ReachlensError(f"{str(d)!r} is not a directory; pass a run directory (reachlens view runs/demo)")
        runs = list_runs(root)
        if not runs:
            raise ReachlensError(f"{str(d)!r} holds no reachlens run (no run.json at or under it)")
        found = [s for info in runs for s in _sets_of(f"{i}/{info.path.relative_to(root).as_posix()}".rstrip("/."),
                                                      info)]
        out += [s for s in found if s.paired] + [s for s in found if not s.paired]
    return out


def _sets_of(key: str, info) -> list[QuestionSet]:
    status, kind, path = info.record.status, info.kind, info.path
    spec = (info.record.model or {}).get("spec")
    if kind == "audit":
        found = [QuestionSet(key, "audit", f"audit {path.name} ({spec})", path, status, (AuditSide(path.name, path),))]
    elif kind == "comparison":
        found = [_comparison(key, info)]
    elif kind in ("probe", "routing", "recognition"):
        side = AuditSide(path.name, path, table=runs.CANDIDATE_TABLES[kind])
        found = [QuestionSet(key, kind, f"{kind} run {path.name} ({spec})", path, status, (side,))]
    elif kind == "elicitation":
        found = _elicitation_pairs(key, info)
    else:
        return []
    for qs in found:
        if status != "complete" and qs.problem is None:
            qs.problem = f"this run is {status}, not complete: what it holds may be partial"
    return found


def _elicitation_pairs(key: str, info) -> list[QuestionSet]:
    """An elicitation's pairs: each source (``model``, ``control``) beside each copy of it that finished."""
    from reachlens.studies.compare import compare

    out = []
    audits = info.path / "audits"
    for n in (info.record.options or {}).get("demos", []):
        for side in ("model", "control"):
            base, copy = audits / side, audits / f"{side}-n{n}"
            if not (RunDir(base).is_complete() and RunDir(copy).is_complete()):
                continue
            sides = (AuditSide(side, base), AuditSide(copy.name, copy))
            out.append(QuestionSet(f"{key}/{side}--{copy.name}", "comparison",
                                   f"elicitation {info.path.name}: {side} -> {copy.name}", info.path, info.record.status,
                                   sides, join=lambda b=base, c=copy: compare(b, c).questions.copy()))
    return out


def _comparison(key: str, info) -> QuestionSet:
    run, record = RunDir(info.path), info.record
    k_cut = (record.options or {}).get("k_cut")
    sides, problem = [], None
    names = {"base": "base", "trained": "trained"}
    try:
        for side in ("base", "trained"):
            path = run.inside(record.children.get(side), f"child {side!r}")
            names[side] = path.name
            sides.append(AuditSide(path.name, path, k_cut))
    except ReachlensError as err:
        problem = str(err)
    title = f"comparison {names['base']} -> {names['trained']}"
    return QuestionSet(key, "comparison", title, info.path, record.status, tuple(sides), problem)


def describe(qs: QuestionSet) -> dict[str, Any]:
    """What the page's list of sets says of one (plain values, escaped by the page writer)."""
    return {"key": qs.key, "kind": qs.kind, "title": qs.title, "status": qs.status, "problem": qs.problem}
