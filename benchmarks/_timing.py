"""Timing shared by the benchmarks that race two ways of doing one job (``bench_arms.py``, ``bench_sweep.py``).

Each way runs once per round, the order alternating round by round; each run's wall and CPU seconds (this
process's, :func:`time.process_time`) are kept. The printout: one line per way with its medians and every
round's figure, then ``wall ratio`` and, last, ``ratio: N.NNx`` (the slow way's median CPU seconds over the fast
way's). Imported by name: a benchmark runs as ``python benchmarks/NAME.py``, so this folder is on its path.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Times", "print_medians", "print_ratios", "race"]

Times = dict[str, list[tuple[float, float]]]
"""Each way's (wall, CPU) seconds, one pair per round."""


def race(ways: Mapping[str, Callable[[], Any]], rounds: int) -> tuple[Times, dict[str, Any]]:
    """Run every way ``rounds`` times, in the given order on even rounds and reversed on odd ones; return each
    way's times and its last result."""
    times: Times = {name: [] for name in ways}
    results: dict[str, Any] = {}
    for r in range(rounds):
        for name in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
            t0, c0 = time.perf_counter(), time.process_time()
            results[name] = ways[name]()
            times[name].append((time.perf_counter() - t0, time.process_time() - c0))
    return times, results


def print_medians(times: Times, width: int) -> None:
    """One line per way: its median wall and CPU seconds and each round's (the way's name in ``width`` columns)."""
    for name, ts in times.items():
        wall, cpu = zip(*ts)
        print(f"  {name:{width}s} wall median {statistics.median(wall):7.2f} s ({', '.join(f'{t:.2f}' for t in wall)})   "
              f"CPU median {statistics.median(cpu):7.2f} s ({', '.join(f'{t:.2f}' for t in cpu)})")


def print_ratios(times: Times, slow: str, fast: str) -> None:
    """The wall ratio, then (the benchmark's last line) ``ratio: N.NNx``, the CPU one: ``slow`` over ``fast``."""
    wall = {name: statistics.median(t for t, _ in ts) for name, ts in times.items()}
    cpu = {name: statistics.median(c for _, c in ts) for name, ts in times.items()}
    print(f"  wall ratio: {wall[slow] / wall[fast]:.2f}x")
    print(f"ratio: {cpu[slow] / cpu[fast]:.2f}x")
