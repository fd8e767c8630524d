"""One linear map at real shapes: MKL's sgemm (``torch.nn.functional.linear``, HuggingFace's product) vs oneDNN's
fp32 product (``torch.ops.mkldnn._linear_pointwise``, what :mod:`reachlens.engine.fast_linear` runs for a real
model's large maps on a CPU).

    python benchmarks/bench_linear.py [--threads 1] [--rows 1,8,64,512]

Per shape (the weights of Qwen2.5-0.5B and Llama 3.2 1B, random) and batch rows: milliseconds per product of
each, their ratio, and whether the map qualifies for oneDNN in the engine (:func:`large_linears`' rule). The
last line is ``ratio: N.NNx``, MKL's time over oneDNN's for the qualifying maps at 64 rows, summed (higher is
better).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from reachlens.engine import fast_linear

SHAPES = {  # (out, in)
    "qwen2.5-0.5b mlp up": (4864, 896), "qwen2.5-0.5b mlp down": (896, 4864), "qwen2.5-0.5b q/o": (896, 896),
    "qwen2.5-0.5b lm head": (151936, 896), "llama3-1b mlp up": (8192, 2048), "llama3-1b q/o": (2048, 2048),
}


def ms(fn, rounds: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(rounds):
        fn()
    return (time.perf_counter() - t0) / rounds * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rows", default="1,8,64,512")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    onednn = torch.ops.mkldnn._linear_pointwise
    total = {"mkl": 0.0, "onednn": 0.0}
    print(f"{'map':24s} {'rows':>5s} {'MKL ms':>9s} {'oneDNN ms':>10s} {'ratio':>6s}  qualifies")
    for name, (n_out, n_in) in SHAPES.items():
        w = torch.randn(n_out, n_in)
        qualifies = w.numel() >= fast_linear.LARGE and min(w.shape) >= fast_linear.WIDE
        for rows in (int(r) for r in args.rows.split(",")):
            x = torch.randn(rows, n_in)
            rounds = max(2, min(20, int(2e9 / (rows * n_in * n_out + 1))))
            a = ms(lambda: F.linear(x, w), rounds)
            b = ms(lambda: onednn(x, w, None, "none", [], ""), rounds)
            print(f"{name:24s} {rows:5d} {a:9.2f} {b:10.2f} {a / b:6.2f}  {'yes' if qualifies else 'no'}")
            if qualifies and rows == 64:
                total["mkl"] += a
                total["onednn"] += b
    print(f"ratio: {total['mkl'] / total['onednn']:.2f}x")


if __name__ == "__main__":
    main()
