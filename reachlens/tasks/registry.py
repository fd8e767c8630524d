"""The task registry: ``load_task("gsm8k", path=...)`` builds a :class:`~reachlens.tasks.base.Task`.

Each loader is a function ``(path: str | None, split: str, seed: int, **options) -> Task``,
registered under its task name. The benchmarks (``gsm8k``, ``arc``, ``math500``, ``piqa``, ``logiqa``)
read the hub dataset lm-eval-harness reads when ``path`` is None, and a local file (or a copy of the
hub repository) otherwise (:mod:`reachlens.tasks.hub`); ``jsonl`` and ``csv`` require ``path``;
generated tasks (``arith``) ignore it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from reachlens._registry import Registry
from reachlens.tasks.base import Task

__all__ = ["TASKS", "TaskLoader", "load_task", "register_task", "require_file"]

TaskLoader = Callable[..., Task]
TASKS: Registry[TaskLoader] = Registry("task")


def register_task(name: str) -> Callable[[TaskLoader], TaskLoader]:
    """Decorator: register a loader under ``name``."""
    return TASKS.decorator(name)


def require_file(task: str, path: str | Path | None) -> Path:
    """``path`` as a Path, or a clear error when it was not given or does not exist."""
    if path is None:
        raise ValueError(f"task {task!r} reads a data file: pass its path (--data PATH)")
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"data file {str(p)!r} for task {task!r} does not exist")
    return p


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
    return task.head(n)
