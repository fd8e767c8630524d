"""Host-device synchronisations per decoding step of reachlens' ``generate`` on CUDA, and where they happen.

    python benchmarks/gpu/syncs.py [--model DIR] [--k 64] [--new 32] [--dtype bfloat16]

Runs one K-sample ``generate`` under ``torch.cuda.set_sync_debug_mode("warn")``: torch warns at every operation
that makes the host wait for the device (``.item()``, ``.cpu()``, ``.tolist()``, ``nonzero``, a bool of a tensor,
...). Prints the count per step and the source lines that caused them, costliest first. A decoding step needs
one: the sampled tokens go to the host for the stop check and the sample tree. CUDA only.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_gpu import PROMPT, build  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="an HF folder (default: bench_gpu's Qwen2.5-0.5B-shaped model)")
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: synchronisations are counted on a GPU machine")

    from reachlens.engine import Row, generate
    from reachlens.models import load_model
    from reachlens.protocol import Protocol

    folder = Path(args.model) if args.model else build(Path(tempfile.mkdtemp()) / "qwen2.5-0.5b-shaped", False)
    model = load_model(str(folder), device="cuda", dtype=getattr(torch, args.dtype))
    probe = Protocol("arith", k=args.k, temperature=0.8, max_new_tokens=args.new)
    rows = [Row(0, seed=s) for s in range(args.k)]
    generate(model, [PROMPT], rows, probe, stop_at_eos=False)  # warm-up (caches built once per tokenizer)
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            generate(model, [PROMPT], rows, probe, stop_at_eos=False)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in seen if "synchroniz" in str(w.message).lower()]
    where = collections.Counter(f"{Path(w.filename).name}:{w.lineno}" for w in syncs)
    print(f"{len(syncs)} synchronisations in one generate of K={args.k} x {args.new} tokens: "
          f"{len(syncs) / args.new:.1f} per step")
    for place, n in where.most_common(15):
        print(f"  {n:6d}  {place}")


if __name__ == "__main__":
    main()
