"""Wall time of the main job (`reachlens demo`) against its 15-minute target, with per-audit throughput.

    python benchmarks/bench_demo.py [--out runs/bench-demo] [--n 300 --k 200 --budget-k 400]

Runs the full training audit of the zoo (five checkpoints, four pairs, the budget control) from an
empty directory, so nothing is resumed, and prints the wall time, its ratio to the 15-minute target,
and for each checkpoint the completions decoded per second.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

TARGET_S = 15 * 60


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/bench-demo")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--k", type=int, default=200)
    ap.add_argument("--budget-k", type=int, default=400)
    args = ap.parse_args()
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    from reachlens.cli.main import main as cli

    t0 = time.perf_counter()
    code = cli(["demo", "--out", str(out), "--n", str(args.n), "--k", str(args.k), "--budget-k", str(args.budget_k)])
    wall = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(code)
    walls = json.loads((out / "study.json").read_text()).get("wall_seconds", {})
    per_model = args.n * (args.budget_k + 1)
    print(f"\ndemo wall time: {wall:.0f} s  (target {TARGET_S} s; ratio target/actual = {TARGET_S / wall:.2f})")
    for name, s in walls.items():
        print(f"  {name:>9s}: {s:6.0f} s, {per_model / s:7.0f} completions/s (greedy + {args.budget_k} samples x {args.n})")
    (out / "bench.json").write_text(json.dumps({"wall_s": wall, "target_s": TARGET_S, "per_model_s": walls}, indent=2))


if __name__ == "__main__":
    main()
