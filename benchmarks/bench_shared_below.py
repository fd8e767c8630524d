"""reachlens' zero-ablation sweep of bench_peers with the prefill's shared layers on and off, in one process.

The prefill runs an arm's entries only from the first layer its hooks touch (``SharedBelow``, ``hooks.plain_below``);
off, every entry runs every layer (what ``generate`` did before). The same greedy tokens are checked first, then
``--rounds`` rounds alternate the two ways (CPU seconds: the host is shared), and the last line is
``ratio: off / on`` (medians).

    python benchmarks/bench_shared_below.py                # zoo:base, 13 conditions x 32 questions, <= 96 tokens
    python benchmarks/bench_shared_below.py --shape qwen2.5-0.5b --n 4 --max-new-tokens 4
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time

import torch

import bench_peers as bp

GENERATE = importlib.import_module("reachlens.engine.generate")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=("zoo", *sorted(bp.SHAPES)), default="zoo")
    ap.add_argument("--n", type=int, default=32, help="questions")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    s = bp.load(argparse.Namespace(shape=args.shape, model=None, n=args.n, device="cpu", dtype="float32"))
    conds = bp.conditions(s.n_layers)
    shared = GENERATE.plain_below

    def run(on: bool):
        GENERATE.plain_below = shared if on else (lambda model, arms: None)
        start = time.process_time()
        out = bp.sweep_reachlens(s, conds, args.max_new_tokens)
        return out, time.process_time() - start

    (a, on), (b, off) = run(True), run(False)
    print(f"{args.shape}: {len(conds)} conditions x {args.n} questions, greedy <= {args.max_new_tokens} tokens")
    print(f"  checked run: shared {on:.2f} s, unshared {off:.2f} s CPU; greedy tokens equal on "
          f"{sum(a[k] == b[k] for k in a)} of {len(a)} (question, condition) pairs")
    times: dict[bool, list[float]] = {True: [], False: []}
    for r in range(args.rounds):
        for way in (True, False) if r % 2 == 0 else (False, True):
            times[way].append(run(way)[1])
    for way, name in ((True, "shared"), (False, "unshared")):
        print(f"  {name:9s} CPU s per round: {', '.join(f'{t:.2f}' for t in times[way])}")
    ratio = statistics.median(times[False]) / statistics.median(times[True])
    print(f"ratio: {ratio:.3f}")


if __name__ == "__main__":
    main()
