"""Executors in this machine: every slice in this process (:class:`InProcessExecutor`), or in a pool of local
worker processes, one model replica and one torch thread each (:class:`ProcessPool`).

An executor's ``run(shards)`` takes ``[(ShardJob, slices), ...]`` and yields a
:class:`~reachlens.runner.jobs.SliceResult` per slice as it finishes. It only decodes: the driver
(:func:`~reachlens.runner.run_jobs`) writes. A slice decodes the same rows wherever it runs, so every
executor fills the same run; the precision of the arithmetic is the model's, and a worker of the pool
uses one torch thread (two single-thread processes outrun one two-thread process on a small CPU).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from reachlens.errors import ReachlensError
from reachlens.runner.jobs import ShardJob, SliceResult, iter_slices, prepare_worker, run_shard

__all__ = ["InProcessExecutor", "ProcessPool"]

Shards = Sequence[tuple[ShardJob, Sequence[tuple[int, int]]]]


class InProcessExecutor:
    """Every slice in this process, one after another: the executor with no workers.

    Args:
        loaded: models this process holds, by job index (decoded as given, their hooks live); every other
            job's model is loaded from its source and kept while consecutive slices need it.
    """

    def __init__(self, loaded: Mapping[int, Any] | None = None) -> None:
        self.loaded = dict(loaded or {})
        self._held: tuple[Any, Any] | None = None  # (source, model): one replica at a time

    def _model(self, i: int, job: ShardJob):
        if i in self.loaded:
            return self.loaded[i]
        if job.source is None:
            raise ReachlensError("this audit's model is held by the calling process only; run it with executor=None")
        if self._held is None or self._held[0] != job.source:
            self._held = None  # free the last replica before loading the next
            self._held = (job.source, job.source.load())
        prepare_worker(self._held[1], job)
        return self._held[1]

    def run(self, shards: Shards) -> Iterator[SliceResult]:
        for i, (job, slices) in enumerate(shards):
            if not slices:
                continue
            model = self._model(i, job)
            for start, stop in slices:
                t0 = time.perf_counter()
                q_df, s_df = run_shard(model, job, start, stop)
                yield SliceResult(i, (start, stop), q_df, s_df, time.perf_counter() - t0)


# --- a pool of local processes -----------------------------------------------------------------------
_HELD: dict[str, Any] = {}
"""In a pool worker: the model replica it holds (``source``, ``model``) and the jobs it checked."""


def _worker_init(quiet: bool) -> None:
    import torch

    torch.set_num_threads(1)
    if quiet:  # the parent runs a CLI command: keep the libraries quiet here too
        from reachlens._verbosity import quiet_dependencies

        _HELD["quiet"] = quiet_dependencies()
        _HELD["quiet"].__enter__()


def _pool_slice(key: str, job: ShardJob, start: int, stop: int):
    """In a pool worker: decode one slice, loading (and checking) the job's model if this worker holds another."""
    t0 = time.perf_counter()
    if _HELD.get("source") != job.source:
        _HELD.update(source=None, model=None, checked=set())
        _HELD.update(model=job.source.load(), source=job.source)
    if key not in _HELD["checked"]:
        prepare_worker(_HELD["model"], job)
        _HELD["checked"].add(key)
    q_df, s_df = run_shard(_HELD["model"], job, start, stop)
    return q_df, s_df, time.perf_counter() - t0


class ProcessPool:
    """Slices decoded by ``workers`` local processes (spawned), each holding one model replica at a time.

    Slices go out in job order, so a worker keeps its checkpoint while that one has slices left. A worker
    that fails stops the run with its error; the slices already finished are in their directories, so the
    same call resumes.

    >>> with ProcessPool(2) as pool:  # doctest: +SKIP
    ...     reachlens.audit("zoo:base", task, protocol, out="runs/base", executor=pool)
    """

    def __init__(self, workers: int = 2) -> None:
        if workers < 1:
            raise ReachlensError(f"workers={workers!r} must be at least 1")
        self.workers = workers
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._runs = 0

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            import multiprocessing

            from reachlens._verbosity import dependencies_quiet

            self._pool = concurrent.futures.ProcessPoolExecutor(
                self.workers, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_init,
                initargs=(dependencies_quiet(),))
        return self._pool

    def run(self, shards: Shards) -> Iterator[SliceResult]:
        if any(job.source is None for job, slices in shards if slices):
            raise ReachlensError("a process pool loads each model from its spec; pass the spec (or a model "
                                 "loaded by reachlens.load_model), not a model made another way")
        todo = list(iter_slices(shards))
        if not todo:
            return
        self._runs += 1
        pool = self._executor()
        futures = {pool.submit(_pool_slice, f"{self._runs}.{i}", shards[i][0], *s): (i, s) for i, s in todo}
        for fut in concurrent.futures.as_completed(futures):
            i, s = futures[fut]
            try:
                q_df, s_df, seconds = fut.result()
            except concurrent.futures.BrokenExecutor:  # BrokenProcessPool: a worker died
                self.close()  # a broken pool takes no more work: the next run starts a fresh one
                raise ReachlensError(
                    f"a worker process died while decoding questions {s[0]}-{s[1] - 1} (killed, or out of memory); "
                    "the slices finished before it are saved: run the same command again to resume") from None
            yield SliceResult(i, s, q_df, s_df, seconds)

    def close(self) -> None:
        """Stop the worker processes."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __enter__(self) -> ProcessPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
