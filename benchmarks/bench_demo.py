"""Wall time of the main job (`reachlens demo`) from an empty directory against its 10-minute target (issue 41).

    python benchmarks/bench_demo.py [--out runs/bench-demo] [--n 300 --k 200 --budget-k 400] [--workers 2]
        [--reference DIR] [--profile FILE]

Runs the full training audit of the zoo (the five checkpoints and the GRPO snapshots, the pairs, the budget,
prompt-format, temperature and length controls, the report) into ``--out``, emptied first so nothing is
resumed, and prints the wall time beside the CPU seconds (user and system) and the page faults (minor and major) of
this process and of its worker processes (``resource.getrusage``, children included once they have exited: the
pool is closed when the demo returns), with the system time's share of all CPU time, and each step's wall time as
the study records it. CPU seconds compare across machines and across loads far better than wall time: on a shared
host the wall time measures the other jobs too. ``--reference DIR`` (an earlier demo's directory, same settings) compares every
table (each ``.parquet`` file, by its path in the directory) with it, exactly, and names each one that
differs. ``--profile FILE`` writes a cProfile of this process (use ``--workers 1``: the workers are other
processes). The last line is ``ratio: N.NNx``, the 10-minute target over the wall time (higher is better;
1.00x is on target).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import time
from pathlib import Path

TARGET_S = 10 * 60


def compare_tables(out: Path, reference: Path) -> list[str]:
    """The relative paths of the tables of ``out`` that differ from (or are missing in) ``reference``."""
    import pandas as pd

    differ = []
    for path in sorted(out.rglob("*.parquet")):
        rel = path.relative_to(out)
        other = reference / rel
        if not other.is_file():
            differ.append(f"{rel} (not in the reference)")
            continue
        try:
            pd.testing.assert_frame_equal(pd.read_parquet(path), pd.read_parquet(other), check_exact=True)
        except AssertionError as err:
            differ.append(f"{rel}: {str(err).splitlines()[0]}")
    differ += [f"{p.relative_to(reference)} (only in the reference)" for p in sorted(reference.rglob("*.parquet"))
               if not (out / p.relative_to(reference)).is_file()]
    return differ


def _delta(before, after) -> dict[str, float]:
    """CPU seconds (user, system) and page faults (minor, major) between two ``getrusage`` readings."""
    return {"user": after.ru_utime - before.ru_utime, "system": after.ru_stime - before.ru_stime,
            "minor faults": after.ru_minflt - before.ru_minflt, "major faults": after.ru_majflt - before.ru_majflt}


def _print_usage(usage: dict[str, dict[str, float]]) -> None:
    total = {k: sum(u[k] for u in usage.values()) for k in next(iter(usage.values()))}
    for who, u in {**usage, "all": total}.items():
        cpu = u["user"] + u["system"]
        print(f"  {who:8s} CPU {cpu:7.0f} s (user {u['user']:7.0f} s, system {u['system']:6.0f} s = "
              f"{100 * u['system'] / max(cpu, 1e-9):4.1f} %); page faults {u['minor faults']:,.0f} minor, "
              f"{u['major faults']:,.0f} major")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/bench-demo")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--k", type=int, default=200)
    ap.add_argument("--budget-k", type=int, default=400)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reference", default=None, help="an earlier demo directory whose tables must be equal")
    ap.add_argument("--profile", default=None, help="write a cProfile of this process here (with --workers 1)")
    args = ap.parse_args()
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    from reachlens.cli.main import main as cli
    from reachlens.store import read_run

    argv = ["demo", "--out", str(out), "--n", str(args.n), "--k", str(args.k), "--extended-k", str(args.budget_k),
            "--workers", str(args.workers)]
    t0 = time.perf_counter()
    self0, kids0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    if args.profile:
        import cProfile

        prof = cProfile.Profile()
        code = prof.runcall(cli, argv)
        prof.dump_stats(args.profile)
    else:
        code = cli(argv)
    wall = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(code)
    usage = {"here": _delta(self0, resource.getrusage(resource.RUSAGE_SELF)),
             "workers": _delta(kids0, resource.getrusage(resource.RUSAGE_CHILDREN))}
    walls = (read_run(out).summary() or {}).get("wall_seconds", {})
    print(f"\ndemo wall time: {wall:.0f} s (target {TARGET_S} s)")
    _print_usage(usage)
    for name, s in walls.items():
        print(f"  {name:>24s}: {s:6.0f} s")
    if args.reference:
        differ = compare_tables(out, Path(args.reference))
        n_tables = len(list(out.rglob("*.parquet")))
        print(f"tables equal to {args.reference}: {n_tables - len(differ)} of {n_tables}")
        for line in differ:
            print(f"  differs: {line}")
    print(f"ratio: {TARGET_S / wall:.2f}x")


if __name__ == "__main__":
    main()
