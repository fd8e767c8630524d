"""Executors in this machine: every slice in this process (:class:`InProcessExecutor`), or in a pool of local
worker processes, one model replica and one torch thread each (:class:`ProcessPool`).

Both implement :class:`~reachlens.runner.executor.Executor`: ``run(shards)`` yields a
:class:`~reachlens.runner.executor.SliceResult` per slice as it finishes, and only decodes (the driver,
:func:`~reachlens.runner.run_jobs`, writes). A slice decodes the same rows wherever it runs, so every executor
fills the same run; the precision of the arithmetic is the model's, and a worker of the pool uses one torch
thread (two single-thread processes outrun one two-thread process on a small CPU). A worker's decodes report their
steps (:mod:`reachlens.engine.progress`) to the listeners of the process that runs the pool, a few times a second.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from typing import Any

from reachlens.engine import progress
from reachlens.errors import ReachlensError
from reachlens.runner.executor import Executor, Replica, Shard, Shards, Slice, SliceResult, decode_timed

__all__ = ["InProcessExecutor", "ProcessPool"]


class InProcessExecutor(Executor):
    """Every slice in this process, one after another: the executor with no workers. A shard's own model (one the
    caller holds) is decoded as given, hooks live; any other is loaded from its source, one replica at a time."""

    in_process = True

    def __init__(self) -> None:
        self.replica = Replica()
        """The one model this process loads from a source (the runner loads it as each job opens)."""
        self._runs = 0

    def run(self, shards: Shards) -> Iterator[SliceResult]:
        self._runs += 1
        for i, (shard, slices) in enumerate(shards):
            if not slices:
                continue
            model = shard.model if shard.model is not None else self.replica.model_for(shard, (self._runs, i))
            for part in slices:
                tables, seconds = decode_timed(model, shard, part)
                yield SliceResult(i, part, tables, seconds)


# --- a pool of local processes -----------------------------------------------------------------------
_WORKER: dict[str, Any] = {}
"""In a pool worker: the replica it holds (and the quieting of the libraries, kept alive)."""


FORWARD_EVERY = 0.25
"""Seconds between two messages of a worker's decode steps to the pool's process."""


class _Forward:
    """In a pool worker: the engine's decode events, summed and sent to the pool's process at most every
    :data:`FORWARD_EVERY` seconds (and when a slice ends)."""

    def __init__(self, events: Any) -> None:
        self.events, self.sent, self.steps = events, time.monotonic(), [0, 0, 0]

    def decode(self, rows: int, max_new_tokens: int) -> None:
        self.flush()
        self.events.put(("decode", rows, max_new_tokens))

    def step(self, tokens: int, finished: int, unused: int) -> None:
        self.steps = [a + b for a, b in zip(self.steps, (tokens, finished, unused))]
        if time.monotonic() - self.sent >= FORWARD_EVERY:
            self.flush()

    def flush(self) -> None:
        if any(self.steps):
            self.events.put(("step", *self.steps))
        self.steps, self.sent = [0, 0, 0], time.monotonic()


def _replay(events: Any) -> None:
    """In the pool's process: tell this process' listeners every decode event the workers sent so far."""
    while not events.empty():
        kind, *counts = events.get()
        (progress.decode_started if kind == "decode" else progress.decode_step)(*counts)


def _worker_init(quiet: bool, events: Any = None) -> None:
    import torch

    torch.set_num_threads(1)
    _WORKER["replica"] = Replica()
    if events is not None:  # held for the worker's life
        _WORKER["forward"] = _Forward(events)
        _WORKER["listening"] = progress.listening(_WORKER["forward"])
        _WORKER["listening"].__enter__()
    if quiet:  # the parent runs a CLI command: keep the libraries quiet here too
        from reachlens._verbosity import quiet_dependencies

        _WORKER["quiet"] = quiet_dependencies()
        _WORKER["quiet"].__enter__()


def _pool_slice(key: str, shard: Shard, part: Slice):
    """In a pool worker: decode one slice, loading (and checking) the job's model if this worker holds another."""
    try:
        return decode_timed(_WORKER["replica"].model_for(shard, key), shard, part)
    finally:
        if "forward" in _WORKER:
            _WORKER["forward"].flush()


class ProcessPool(Executor):
    """Slices decoded by ``workers`` local processes (spawned), each holding one model replica at a time.

    Slices go out in job order, so a worker keeps its checkpoint while that one has slices left. A worker
    that fails stops the run with its error; the slices already finished are in their directories, so the
    same call resumes.

    >>> with ProcessPool(2) as pool:  # doctest: +SKIP
    ...     reachlens.audit("zoo:base", task, protocol, out="runs/base", executor=pool)
    """

    def __init__(self, workers: int = 2) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ReachlensError(f"workers={workers!r} must be an integer >= 1")
        self.workers = workers
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._events: Any = None
        self._runs = 0

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            import multiprocessing

            from reachlens._verbosity import dependencies_quiet

            context = multiprocessing.get_context("spawn")
            # the workers' decode steps, for this process' listeners; a put is written before the slice's result
            self._events = context.SimpleQueue()
            self._pool = concurrent.futures.ProcessPoolExecutor(
                self.workers, mp_context=context, initializer=_worker_init,
                initargs=(dependencies_quiet(), self._events))
        return self._pool

    def run(self, shards: Shards) -> Iterator[SliceResult]:
        if any(shard.source is None for shard, slices in shards if slices):
            raise ReachlensError("a process pool loads each model from its spec; pass the spec (or a model "
                                 "loaded by reachlens.load_model), not a model made another way")
        todo = [(i, part) for i, (_, slices) in enumerate(shards) for part in slices]
        if not todo:
            return
        self._runs += 1
        pool = self._executor()
        futures = {pool.submit(_pool_slice, f"{self._runs}.{i}", shards[i][0], part): (i, part) for i, part in todo}
        for fut in self._finished(futures):
            i, part = futures[fut]
            try:
                tables, seconds = fut.result()
            except concurrent.futures.BrokenExecutor:  # BrokenProcessPool: a worker died
                self.close()  # a broken pool takes no more work: the next run starts a fresh one
                raise ReachlensError(
                    f"a worker process died while decoding questions {part[0]}-{part[1] - 1} (killed, or out of "
                    "memory); the slices finished before it are saved: run the same command again to resume") from None
            yield SliceResult(i, part, tables, seconds)

    def _finished(self, futures) -> Iterator[concurrent.futures.Future]:
        """``futures`` as each finishes; meanwhile, the workers' decode steps told to this process' listeners."""
        pending = set(futures)
        while pending:
            done, pending = concurrent.futures.wait(pending, timeout=FORWARD_EVERY,
                                                    return_when=concurrent.futures.FIRST_COMPLETED)
            _replay(self._events)
            yield from done

    def close(self) -> None:
        """Stop the worker processes."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
            self._events.close()
            self._events = None
