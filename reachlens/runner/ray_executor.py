"""Ray executor: a run's question slices (an audit's, a probe run's) decoded by Ray actors, each holding one
model replica (:class:`~reachlens.runner.executor.Replica`).

The driver (this process, :func:`~reachlens.runner.run_jobs`) keeps the run directory and
its writer lock; the actors only decode. Each actor loads the checkpoint a slice needs (from a
:class:`~reachlens.models.ModelSource`: the spec, on its own node; the engine on ``cuda``
when the actor has a GPU, or vLLM) and keeps it while its next slices need the same checkpoint, so a
lineage of checkpoints (``reachlens demo --ray``) is scheduled as checkpoints x slices over one pool.
The pool lives as long as the executor (until :meth:`RayExecutor.close`), so consecutive audits reuse
its actors and the models they hold.

Faults: an actor that dies (its process killed, its node lost) fails the slice it held; that
slice goes back to the queue and is decoded by another actor, and a fresh actor replaces the dead
one. A slice that fails on ``max_attempts`` actors stops the run with one line; finished slices
are already in the directory, so a re-run (with any executor) resumes. An error that reachlens
raises on a worker (a model that does not fit its context, another checkpoint under the same
spec) stops the run as the same one-line error.

Network: ``ray.init()`` with no address starts a local cluster that Ray's defaults let reach
outside the machine (see docs/scale.md, "Ray"); the tests run it in a loopback-only network
namespace. This module sets ``RAY_USAGE_STATS_ENABLED=0`` unless set, starts no dashboard, and
stops only a cluster it started itself (``ray.shutdown()``), never a machine-wide ``ray stop``.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.runner.executor import Executor, Replica, Shard, Shards, Slice, SliceResult, decode_timed

__all__ = ["RayExecutor"]

_INSTALL = "install Ray: pip install 'reachlens[ray]'"


class _ShardWorker:
    """A Ray actor: one model replica at a time (:class:`~reachlens.runner.executor.Replica`), decoding slices of
    any job sent to it."""

    def __init__(self, gpus: float = 0.0) -> None:
        from reachlens._verbosity import quiet_dependencies

        self.gpus = gpus
        self._quiet = quiet_dependencies()
        self._quiet.__enter__()
        self.replica = Replica()

    def pid(self) -> tuple[int, str]:
        import ray

        return os.getpid(), ray.util.get_node_ip_address()

    def run(self, job_id: str, shard: Shard, part: Slice) -> tuple[dict[str, pd.DataFrame], float]:
        source = shard.source
        if source.backend == "engine" and self.gpus and source.device == "cpu" and source.device_map is None:
            source = dataclasses.replace(source, device="cuda")
        return decode_timed(self.replica.model_for(shard, job_id, source), shard, part)


class RayExecutor(Executor):
    """Send an audit's slices to ``workers`` Ray actors; use as ``audit(..., executor=RayExecutor())``.

    Args:
        address: a running cluster (``"auto"``, ``"HOST:PORT"``); None starts a local one in this
            process (stopped again by :meth:`close`). Ignored when Ray is already initialized.
        workers: actors, each holding one model replica.
        gpus_per_worker: GPUs each actor reserves (the engine then runs on ``cuda``); 0 for CPU.
        cpus_per_worker: CPUs each actor reserves (and its torch threads).
        max_attempts: actors a slice may fail on (each death counts) before the run stops.
        init_options: more ``ray.init`` keyword arguments (``num_cpus``, ``_temp_dir``, ``runtime_env``).
        on_event: called as ``on_event(kind, info)`` for ``ready`` (a worker's pid and node),
            ``start``, ``done`` and ``died`` (a slice whose worker died, and its attempt).

    >>> with RayExecutor(workers=2) as ray_pool:  # doctest: +SKIP
    ...     result = reachlens.audit("zoo:base", task, protocol, out="runs/base", executor=ray_pool)
    """

    def __init__(
        self, address: str | None = None, *, workers: int = 2, gpus_per_worker: float = 0.0,
        cpus_per_worker: float = 1.0, max_attempts: int = 3, init_options: dict[str, Any] | None = None,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        if workers < 1:
            raise ReachlensError(f"workers={workers!r} must be at least 1")
        if gpus_per_worker < 0 or cpus_per_worker <= 0:
            raise ReachlensError(f"gpus_per_worker={gpus_per_worker!r} must be >= 0 and cpus_per_worker="
                                 f"{cpus_per_worker!r} > 0")
        self.address = address
        self.workers = workers
        self.gpus_per_worker = gpus_per_worker
        self.cpus_per_worker = cpus_per_worker
        self.max_attempts = max_attempts
        self.init_options = dict(init_options or {})
        self.on_event = on_event
        self._owns_cluster = False
        self._actors: dict[int, Any] = {}  # the pool: worker id -> actor, alive between runs
        self._holds: dict[int, Any] = {}  # worker id -> the ModelSource it holds (affinity)
        self._actor_cls: Any = None
        self._next_id = 0
        self._runs = 0

    # --- cluster -----------------------------------------------------------------------------------
    def _ray(self):
        try:
            import ray
        except ImportError:
            raise ReachlensError(f"the Ray executor needs Ray, which is not installed; {_INSTALL}") from None
        if not ray.is_initialized():
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            options = {"include_dashboard": False, "log_to_driver": False, **self.init_options}
            if self.address is None:
                ray.init(**options)
                self._owns_cluster = True
            else:
                try:
                    ray.init(address=self.address, **options)
                except ConnectionError as err:
                    raise ReachlensError(f"cannot join the Ray cluster at {self.address!r} ({err}); start it with "
                                         "`ray start --head` or pass --ray without an address for a local one") from None
        return ray

    def close(self) -> None:
        """End the pool's actors, and stop the local cluster this executor started (a cluster it joined
        is left running)."""
        if self._actors:
            import ray

            for actor in self._actors.values():
                ray.kill(actor)
            self._actors.clear()
            self._holds.clear()
        if self._owns_cluster:
            import ray

            ray.shutdown()
            self._owns_cluster = False

    def _event(self, kind: str, **info: Any) -> None:
        if self.on_event is not None:
            self.on_event(kind, info)

    # --- scheduling --------------------------------------------------------------------------------
    def run(self, shards: Shards) -> Iterator[SliceResult]:
        """Decode every slice of every job on the actors; yield each :class:`SliceResult` as it finishes."""
        if any(shard.source is None for shard, slices in shards if slices):
            raise ReachlensError("Ray workers load each model from its spec; pass the spec (or a model loaded by "
                                 "reachlens.load_model), not a model made another way")
        queue = collections.deque((i, s) for i, (_, slices) in enumerate(shards) for s in slices)
        if not queue:
            return
        ray = self._ray()
        self._runs += 1
        if self._actor_cls is None:
            self._actor_cls = ray.remote(num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker)(_ShardWorker)
        state = _RayRun(self, ray, shards, queue)
        finished = False
        try:
            for _ in range(min(self.workers, len(queue)) - len(self._actors)):
                state.spawn()
            while state.queue or state.running:
                result = state.step()
                if result is not None:
                    yield result
            finished = True
        finally:
            # after a clean run only actors still starting go; after a failure every actor does (their
            # state is unknown); close() ends the rest
            for a in list(self._actors):
                if not finished or a in state.starting.values():
                    ray.kill(self._actors.pop(a))
                    self._holds.pop(a, None)


class _RayRun:
    """The state of one :meth:`RayExecutor.run`: the queue of slices, actors starting, running and idle."""

    def __init__(self, pool: RayExecutor, ray, shards, queue: collections.deque) -> None:
        self.pool, self.ray, self.shards, self.queue = pool, ray, shards, queue
        self.refs = [ray.put(shard) for shard, _ in shards]
        self.keys = [f"{pool._runs}.{i}" for i in range(len(shards))]  # a worker prepares each job once
        self.starting: dict[Any, int] = {}  # pid() ref -> actor
        self.running: dict[Any, tuple[int, int, Slice]] = {}  # run() ref -> (actor, job, slice)
        self.idle: list[int] = list(pool._actors)  # the pool outlives one run: its models stay loaded
        self.attempts: collections.Counter = collections.Counter()
        self.failed_starts = 0

    def spawn(self) -> None:
        pool = self.pool
        a = pool._next_id
        pool._next_id += 1
        pool._actors[a] = pool._actor_cls.remote(float(pool.gpus_per_worker))
        pool._holds[a] = None
        self.starting[pool._actors[a].pid.remote()] = a

    def dispatch(self) -> None:
        pool = self.pool
        while self.idle and self.queue:
            a = self.idle.pop(0)
            # a slice of the checkpoint this actor holds, else the next one in line
            pick = next((n for n, (i, _) in enumerate(self.queue) if self.shards[i][0].source == pool._holds[a]), 0)
            i, s = self.queue[pick]
            del self.queue[pick]
            pool._holds[a] = self.shards[i][0].source
            self.running[pool._actors[a].run.remote(self.keys[i], self.refs[i], s)] = (a, i, s)
            pool._event("start", worker=a, job=i, slice=s)

    def died(self, a: int, err: BaseException, lost: tuple[int, Slice] | None) -> None:
        pool = self.pool
        pool._actors.pop(a, None)
        pool._holds.pop(a, None)
        if a in self.idle:
            self.idle.remove(a)
        if lost is None:
            pool._event("died", worker=a, job=None, slice=None, attempt=0, error=str(err))
        else:
            self.attempts[lost] += 1
            pool._event("died", worker=a, job=lost[0], slice=lost[1], attempt=self.attempts[lost], error=str(err))
            if self.attempts[lost] >= pool.max_attempts:
                raise ReachlensError(
                    f"questions {lost[1][1]}..{lost[1][2] - 1} failed on {self.attempts[lost]} workers (last: "
                    f"{type(err).__name__}); the finished ones are saved, re-run the same command to resume"
                )
            self.queue.appendleft(lost)
        self.spawn()

    def step(self) -> SliceResult | None:
        """Dispatch, wait for one reply, and handle it: a started actor, a dead one, or a finished slice."""
        ray = self.ray
        self.dispatch()
        ready, _ = ray.wait([*self.starting, *self.running], num_returns=1)
        ref = ready[0]
        if ref in self.starting:
            a = self.starting.pop(ref)
            try:
                pid, node = ray.get(ref)
            except _actor_errors(ray) as err:
                self.failed_starts += 1
                if self.failed_starts > self.pool.max_attempts * self.pool.workers:
                    raise ReachlensError(f"Ray workers keep dying before they start ({err})") from None
                self.died(a, err, None)
                return None
            self.idle.append(a)
            self.pool._event("ready", worker=a, pid=pid, node=node)
            return None
        a, i, s = self.running.pop(ref)
        try:
            tables, seconds = ray.get(ref)
        except _actor_errors(ray) as err:
            self.died(a, err, (i, s))
            return None
        except ray.exceptions.RayTaskError as err:
            cause = getattr(err, "cause", None)
            if isinstance(cause, ReachlensError):
                raise ReachlensError(str(cause)) from None
            raise
        self.idle.append(a)
        self.pool._event("done", worker=a, job=i, slice=s)
        return SliceResult(i, s, tables, seconds)


def _actor_errors(ray) -> tuple[type[BaseException], ...]:
    """What Ray raises when the actor (or the node) holding a call died."""
    ex = ray.exceptions
    return tuple(e for e in (getattr(ex, n, None) for n in (
        "RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError", "NodeDiedError",
        "ObjectLostError", "OwnerDiedError")) if isinstance(e, type))
