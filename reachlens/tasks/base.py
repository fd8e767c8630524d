"""Questions, prompt formats and tasks.

A :class:`Task` is a tuple of :class:`Question` records, a set of named :class:`PromptFormat`
templates and the name of its grader. Tasks are plain frozen data: loaders build them, studies read
them, nothing mutates them.

A task's *data identity* (``Task.data_identity``, filled by :func:`~reachlens.tasks.load_task`) says
which data it was built from: the SHA-256 of the data file and the loader options, or the generator,
its seed and options; and, for every task, the SHA-256 of its questions (:func:`questions_sha256`).
Every audit records it, and resuming, extending or comparing audits checks it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from reachlens.errors import ReachlensError, UnknownNameError

__all__ = ["Question", "PromptFormat", "Task", "DataError", "questions_sha256"]


class DataError(ReachlensError):
    """A data file that cannot be read: names the file and the 1-based line number."""

    def __init__(self, path: str, line: int | None, reason: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {reason}")
        self.path = str(path)
        self.line = line
        self.reason = reason


def _reduce(obj: Any) -> tuple:
    """Pickle a frozen record whose mappings are read-only views (which do not pickle) from plain copies of its
    fields: a task travels to the runner's worker processes."""
    return (_rebuild, (type(obj), {f.name: dict(v) if isinstance(v := getattr(obj, f.name), MappingProxyType) else v
                                   for f in dataclasses.fields(obj)}))


def _rebuild(cls: type, fields: dict[str, Any]) -> Any:
    return cls(**fields)


@dataclass(frozen=True)
class Question:
    """One question of a task."""

    question_id: str
    """Stable id: the same question gets the same id on every load (used to join audits)."""
    fields: Mapping[str, Any]
    """The text fields a prompt template can use, e.g. ``{"question": ...}``."""
    gold: str
    """The gold final answer as a string (a number, a letter, a LaTeX expression)."""
    choices: tuple[str, ...] | None = None
    """Option texts of a multiple-choice question, in order (None for open-ended)."""
    labels: tuple[str, ...] | None = None
    """Option labels as they appear in the data (``A``-``D`` or ``1``-``4``), aligned with ``choices``."""
    solution: str | None = None
    """A worked gold solution, where the data set has one (GSM8K, MATH, arith)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", MappingProxyType(dict(self.fields)))
        if self.choices is not None and self.labels is not None and len(self.choices) != len(self.labels):
            raise ReachlensError(
                f"question {self.question_id!r}: {len(self.choices)} choices but {len(self.labels)} labels"
            )

    def __reduce__(self):
        return _reduce(self)


@dataclass(frozen=True)
class PromptFormat:
    """A named prompt template, rendered with ``str.format(**question.fields)``.

    >>> PromptFormat("qa", "Q: {question}\\nA:").render(Question("q0", {"question": "1+1=?"}, "2"))
    'Q: 1+1=?\\nA:'
    """

    name: str
    template: str
    description: str = ""

    def render(self, question: Question) -> str:
        fields = dict(question.fields)
        if question.choices is not None:
            labels = question.labels or tuple("ABCDEFGHIJ"[: len(question.choices)])
            fields.setdefault(
                "choices_block", "\n".join(f"{lab}. {txt}" for lab, txt in zip(labels, question.choices))
            )
        try:
            return self.template.format(**fields)
        except KeyError as err:
            raise UnknownNameError(
                f"prompt format {self.name!r} needs field {err.args[0]!r}, but question "
                f"{question.question_id!r} has only {sorted(fields)}"
            ) from None


@dataclass(frozen=True)
class Task:
    """Questions, named prompt formats, a grader name and default stop strings."""

    name: str
    questions: tuple[Question, ...]
    prompt_formats: Mapping[str, PromptFormat]
    default_format: str
    grader: str
    """Name of a registered grader (see :mod:`reachlens.grading`)."""
    stop: tuple[str, ...] = ()
    """Stop strings a completion of this task ends at, by default."""
    source: str = ""
    """Where the questions came from (a path, or the generator and its seed)."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    data_identity: Mapping[str, Any] = field(default_factory=dict)
    """Which data the questions came from (file hash or generator and seed, and the questions' hash);
    empty when unknown. Filled by :func:`~reachlens.tasks.load_task`; kept by :meth:`head`."""
    max_new_tokens: int | None = None
    """The decode length a completion of this task needs, when the task knows it (the CLI's default
    ``--max-new-tokens``; None: 256). Arith's answers fit in 96 tokens, the zoo's context in 256."""

    def __reduce__(self):
        return _reduce(self)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_formats", MappingProxyType(dict(self.prompt_formats)))
        if self.default_format not in self.prompt_formats:
            raise ReachlensError(
                f"task {self.name!r}: default format {self.default_format!r} is not one of "
                f"{sorted(self.prompt_formats)}"
            )
        ids = [q.question_id for q in self.questions]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ReachlensError(f"task {self.name!r}: question_id {dup!r} occurs more than once")

    def format(self, name: str | None = None) -> PromptFormat:
        """The prompt format called ``name`` (the task's default when None)."""
        key = self.default_format if name is None else name
        try:
            return self.prompt_formats[key]
        except KeyError:
            raise UnknownNameError(
                f"task {self.name!r} has no prompt format {key!r}; known: {sorted(self.prompt_formats)}"
            ) from None

    def prompt(self, question: Question, format_name: str | None = None) -> str:
        return self.format(format_name).render(question)

    def head(self, n: int | None) -> Task:
        """The first ``n`` questions (all when None)."""
        if n is None:
            return self
        if n < 1:
            raise ReachlensError(f"n={n!r} must be at least 1")
        return dataclasses.replace(self, questions=self.questions[:n])

    def only(self, question_ids: Iterable[str]) -> Task:
        """The questions whose ids are in ``question_ids``, in the task's own order."""
        keep = set(question_ids)
        return dataclasses.replace(self, questions=tuple(q for q in self.questions if q.question_id in keep))

    def __len__(self) -> int:
        return len(self.questions)


def questions_sha256(questions: tuple[Question, ...]) -> str:
    """The SHA-256 of the questions' ids, golds, fields, choices and labels (canonical JSON)."""
    h = hashlib.sha256()
    for q in questions:
        row = [q.question_id, q.gold, dict(q.fields), q.choices, q.labels]
        h.update(json.dumps(row, sort_keys=True, default=str, ensure_ascii=True).encode() + b"\n")
    return h.hexdigest()
