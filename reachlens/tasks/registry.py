"""The task registry: ``load_task("gsm8k", path=...)`` builds a :class:`~reachlens.tasks.base.Task`.

Each loader is a function ``(path: str | None, split: str, seed: int, **options) -> Task``,
registered under its task name. The benchmarks (``gsm8k``, ``arc``, ``math500``, ``piqa``, ``logiqa``)
read the hub dataset lm-eval-harness reads when ``path`` is None, and a local file (or a copy of the
hub repository) otherwise (:mod:`reachlens.tasks.hub`); ``jsonl`` and ``csv`` require ``path``;
generated tasks (``arith``) ignore it. :func:`load_task` records the task's data identity (see
:mod:`reachlens.tasks.base`) unless the loader did.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reachlens._registry import Registry
from reachlens.errors import MissingFileError, ReachlensError, ReachlensWarning
from reachlens.tasks.base import Task, questions_sha256

__all__ = ["TASKS", "TaskLoader", "load_task", "loader_name", "register_task", "require_file"]

TaskLoader = Callable[..., Task]
TASKS: Registry[TaskLoader] = Registry("task")


def register_task(name: str) -> Callable[[TaskLoader], TaskLoader]:
    """Decorator: register a loader under ``name``."""
    return TASKS.decorator(name)


def require_file(task: str, path: str | Path | None) -> Path:
    """``path`` as a Path, or a clear error when it was not given or does not exist."""
    if path is None:
        raise ReachlensError(f"task {task!r} reads a data file: pass its path (data=PATH)")
    p = Path(path)
    if not p.is_file():
        raise MissingFileError(f"data file {str(p)!r} for task {task!r} does not exist")
    return p


def data_identity(
    name: str, path: str | Path | None, split: str, seed: int, options: dict[str, Any], task: Task
) -> dict[str, Any]:
    """Which data ``task`` was built from: the data file's SHA-256 (or the generator and its seed),
    the loader options, and the SHA-256 of all its questions."""
    opts = json.loads(json.dumps(options, sort_keys=True, default=str))
    if path is not None and Path(path).is_file():
        with open(path, "rb") as fh:
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
        ident: dict[str, Any] = {"file": Path(path).name, "sha256": digest}
    else:
        ident = {"generator": name, "split": split, "seed": seed}
    if opts:
        ident["options"] = opts
    ident["questions_sha256"] = questions_sha256(task.questions)
    return ident


def loader_name(task_name: str) -> str:
    """The registered loader of a task named ``task_name``: a task read from a file is named ``KIND:STEM``
    (``jsonl:test``), its loader ``KIND``; every other task by its loader's name.

    >>> loader_name("jsonl:test"), loader_name("arith_small")
    ('jsonl', 'arith_small')
    """
    return task_name.split(":", 1)[0]


def load_task(
    name: str,
    path: str | Path | None = None,
    *,
    split: str = "test",
    n: int | None = None,
    seed: int = 0,
    **options: Any,
) -> Task:
    """Build the task ``name``; keep its first ``n`` questions.

    >>> task = load_task("arith", split="test", n=5)
    >>> len(task)
    5
    """
    loader = TASKS[name]
    task = loader(path=path, split=split, seed=seed, **options)
    if not task.data_identity:
        task = dataclasses.replace(task, data_identity=data_identity(name, path, split, seed, options, task))
    if n is not None and n > len(task):
        warnings.warn(f"n={n} but task {name!r} has {len(task)} questions; using all {len(task)}",
                      ReachlensWarning, stacklevel=2)
    return task.head(n)
