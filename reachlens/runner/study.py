"""Runs made of runs: a :class:`Study` and the one :func:`run_study` that runs it (inspect_ai's ``eval_set`` is the
model: many runs in one directory, the finished ones skipped on a re-run, one progress shape).

A study (a training study, a temperature or length control, an elicitation) says

* what it checks before anything runs (:meth:`Study.check`: a bad name, budget or setting refused before any
  model loads or directory opens);
* its record (:meth:`Study.root_record`), started once in its directory, and what it prepares under that
  directory's lock before any child runs (:meth:`Study.prepare`: an elicitation's fine-tunes);
* its children by role (:class:`Child`: a run directory, the job that decodes it or nothing to decode), as many
  as it needs given those already done (:meth:`Study.children`, called again as children finish: a control's
  reruns need the audits first, so they come in a later round);
* how its finished children compose into its run (:meth:`Study.compose`), which :func:`run_study` saves into the
  study's directory, each child recorded by its path relative to it (:meth:`~reachlens.store.Run.save`).

:func:`run_study` checks first, starts the root once, then in rounds: each child whose directory is complete is
read (a re-run decodes nothing for it), each child without a job is made from those done, and the rest decode
through one :func:`~reachlens.runner.run_jobs` on one executor. A killed study resumes from its children's parts.
Progress has one shape, ``progress(label, done, total)`` per child (its questions), and ``log(line)`` as each
finishes.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig
from reachlens.runner.executor import Executor
from reachlens.runner.jobs import Job, executor_for, run_jobs
from reachlens.store import RunDir, RunRecord, read_run

__all__ = ["Child", "Progress", "Study", "run_children", "run_study"]

Progress = Callable[[str, int, int], None]
"""``progress(label, done, total)``: a child's questions done, and in all."""

WORKER_SECONDS = "worker_seconds"
"""The key of a study record's ``extra`` that keeps the workers' seconds on each finished child, by role, so a
re-run or a resume reports the time of the children earlier calls finished (a child stopped part-way counts
from the call that finished it)."""


@dataclass(frozen=True)
class Child:
    """One run of a study: its role (its name in the study's record), its directory, and what makes it."""

    role: str
    path: Path | None
    """Its run directory (complete: read, not made again); None keeps it in memory (a rerun without a folder)."""
    label: str = ""
    """Its progress line (the model it decodes and what changes, e.g. ``sft K=8 (budget control)``)."""
    job: Job | None = None
    """What decodes it; None: it is made from runs already done (:attr:`make`)."""
    make: Callable[[Any], Any] | None = None
    """Its run from the job's result (None without a job), e.g. an audit cut to a smaller budget; default: the
    job's result."""
    log: Callable[[Any], str] | None = None
    """The line logged when it finishes."""

    def complete(self) -> bool:
        return self.path is not None and RunDir(self.path).is_complete()

    def finish(self, result: Any) -> Any:
        if self.make is not None:
            return self.make(result)
        if self.job is None:
            raise ReachlensError(f"child {self.role!r} has neither a job nor a way to make it")
        return result


class Study:
    """A run made of runs (see the module docstring); a subclass is a frozen dataclass of what it runs."""

    out: Path | None
    """Its run directory (resumable); None keeps it in memory (its children too, or where they say)."""
    exec_config: ExecConfig

    def check(self) -> None:
        """Refuse what the study cannot do before any model loads or directory opens."""

    def root_record(self) -> RunRecord:
        """The study's record, started in :attr:`out` before any child runs (another study there is refused)."""
        raise NotImplementedError

    def prepare(self, root: RunDir) -> None:
        """What the study makes under its directory's writer lock before its children run (default nothing)."""

    def children(self, done: Mapping[str, Any]) -> list[Child]:
        """Every child the study needs given ``done`` (role -> finished run); called again as children finish,
        until it names none that is not done."""
        raise NotImplementedError

    def compose(self, done: Mapping[str, Any], seconds: Mapping[str, float]) -> Any:
        """The study's run from its finished children (``seconds``: the workers' time on each, by role,
        over the calls that finished them: :data:`WORKER_SECONDS`)."""
        raise NotImplementedError


def run_children(children: list[Child], executor: Executor | None = None, *, progress: Progress | None = None,
                 log: Callable[[str], None] | None = None, seconds: dict[str, float] | None = None) -> dict[str, Any]:
    """One round: each child's run by role; a complete directory is read, a child without a job made, the rest
    decoded through one :func:`~reachlens.runner.run_jobs` (``seconds`` gains the workers' time on each)."""
    done: dict[str, Any] = {}
    for c in children:
        if c.complete():
            done[c.role] = read_run(c.path)
        elif c.job is None:
            done[c.role] = c.finish(None)
    todo = [c for c in children if c.role not in done]

    def finished(i: int, result: Any, took: float) -> None:
        c = todo[i]
        done[c.role] = c.finish(result)
        if seconds is not None:
            seconds[c.role] = seconds.get(c.role, 0.0) + took
        if log is not None and c.log is not None:
            log(c.log(done[c.role]))

    run_jobs([c.job for c in todo], executor, on_done=finished,
             progress=None if progress is None else (lambda i, n, total: progress(todo[i].label, n, total)))
    return {c.role: done[c.role] for c in children}


def _inside(root: RunDir, done: Mapping[str, Any]) -> dict[str, str]:
    """Each finished child in a directory inside ``root``, by role: its path relative to ``root``."""
    here = root.path.resolve()
    where = {role: Path(run.location).resolve() for role, run in done.items() if getattr(run, "location", None)}
    return {role: os.path.relpath(path, here) for role, path in where.items() if path.is_relative_to(here)}


def run_study(study: Study, executor: Executor | None = None, *, progress: Progress | None = None,
              log: Callable[[str], None] | None = None) -> Any:
    """Run (or resume) ``study`` into its directory; return its run, read back from it (in memory without one).

    Args:
        executor: who decodes every round; None: the one the study's execution settings ask for
            (:func:`~reachlens.runner.executor_for`), closed when the study is done.
        progress: ``progress(label, done, total)`` per child as its questions finish.
        log: called with each finished child's line.
    """
    study.check()
    root = None if study.out is None else RunDir(study.out)
    record = study.root_record()
    seconds: dict[str, float] = {}  # the workers' time on each child, over every call that finished it
    if root is not None:
        root.check_target()
        with root.writer():
            root.check_run(record, what=f"study directory {str(root.path)!r} holds another plan")
            root.start(record)
            seconds.update(root.record().extra.get(WORKER_SECONDS, {}))
            study.prepare(root)
    owned = executor is None
    executor = executor_for(study.exec_config) if owned else executor
    done: dict[str, Any] = {}
    try:
        while need := [c for c in study.children(done) if c.role not in done]:
            done.update(run_children(need, executor, progress=progress, log=log, seconds=seconds))
            if root is not None:  # the children finished so far, by role: what a reader of the running study sees
                with root.writer():
                    root.start(dataclasses.replace(record, children=_inside(root, done),
                                                   extra={**record.extra, WORKER_SECONDS: dict(seconds)}))
    finally:
        if owned:
            executor.close()
    result = study.compose(done, seconds)
    if root is None:
        return result
    result.save(study.out)
    return read_run(study.out)
