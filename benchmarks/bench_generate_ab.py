"""A/B of the sampler: this tree's ``generate`` against a saved copy of an earlier ``generate.py``, in one process.

    git show ea94fff:reachlens/engine/generate.py > /tmp/old_generate.py
    python benchmarks/bench_generate_ab.py /tmp/old_generate.py [--model DIR | --family NAME] [--reps 24]

For a change to the decode loop whose speed should not move: ``bench_sampling.py`` run before and
after compares two processes minutes apart, and on a shared host the load between them moves the
figures by 10-20%. Here both versions decode the same K=200 x 32-token probe on one loaded model,
alternating (old, new, new, old, ...), so a slow phase of the host hits both alike; the script
prints the median CPU seconds (this process's, with one thread: little affected by other jobs) and
wall seconds per version, with prefix sharing and with one row per sample, and checks that both
versions produce the same tokens. The old file is imported as a module of its own against this
tree's engine, so it must only import names the engine still has.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

K, NEW, TEMP = 200, 32, 0.8


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old", help="a saved copy of an earlier reachlens/engine/generate.py")
    ap.add_argument("--model", default="reachlens/assets/zoo/base", help="HF folder (default: zoo:base)")
    ap.add_argument("--family", default=None, help="build a tiny random checkpoint of this family instead")
    ap.add_argument("--prompt", default="Q: 48*8-42+27+17=?\\nA:", help="escape sequences such as \\n are decoded")
    ap.add_argument("--reps", type=int, default=24, help="runs per version and mode")
    args = ap.parse_args()
    torch.set_num_threads(1)

    spec = importlib.util.spec_from_file_location("old_generate", args.old)
    old = importlib.util.module_from_spec(spec)
    sys.modules["old_generate"] = old
    spec.loader.exec_module(old)
    from reachlens.engine import Row, generate
    from reachlens.models import load_model
    from reachlens.models.testing import make_tiny_model
    from reachlens.protocol import Protocol

    folder = str(make_tiny_model(args.family, Path(tempfile.mkdtemp()) / args.family)) if args.family else args.model
    model = load_model(folder)
    prompt = args.prompt.encode().decode("unicode_escape")
    rows = [Row(0, seed=s) for s in range(K)]
    # the old file takes its own SamplingParams (before issue 15); this tree's engine takes the Protocol
    protocol = Protocol("arith", k=1, temperature=TEMP, max_new_tokens=NEW)
    old_params = old.SamplingParams(NEW, TEMP, stop_at_eos=False) if hasattr(old, "SamplingParams") else protocol
    old_kw = {} if hasattr(old, "SamplingParams") else {"stop_at_eos": False}
    versions = {
        "old": lambda share: old.generate(model, [prompt], rows, old_params, share_prefixes=share, **old_kw),
        "new": lambda share: generate(model, [prompt], rows, protocol, stop_at_eos=False, share_prefixes=share),
    }
    print(f"model {folder}, K={K} x {NEW} tokens at T={TEMP}, {args.reps} alternating runs per version, 1 thread")
    print(f"{'mode':<22}{'CPU s old':>10}{'CPU s new':>10}{'new/old':>9}{'wall s old':>12}{'wall s new':>11}{'new/old':>9}")
    for share in (True, False):
        cpu: dict[str, list[float]] = {"old": [], "new": []}
        wall: dict[str, list[float]] = {"old": [], "new": []}
        tokens = {}
        for i in range(args.reps):
            for name in ("old", "new") if i % 2 == 0 else ("new", "old"):
                c0, w0 = time.process_time(), time.perf_counter()
                outs = versions[name](share)
                cpu[name].append(time.process_time() - c0)
                wall[name].append(time.perf_counter() - w0)
                tokens[name] = [o.token_ids for o in outs]
        if tokens["old"] != tokens["new"]:
            raise SystemExit(f"share_prefixes={share}: the two versions generate different tokens")
        c = {k: statistics.median(v) for k, v in cpu.items()}
        w = {k: statistics.median(v) for k, v in wall.items()}
        mode = "shared prefixes" if share else "one row per sample"
        print(f"{mode:<22}{c['old']:>10.3f}{c['new']:>10.3f}{c['new'] / c['old']:>9.3f}"
              f"{w['old']:>12.3f}{w['new']:>11.3f}{w['new'] / w['old']:>9.3f}")
    print("same tokens from both versions: True")


if __name__ == "__main__":
    main()
