"""Route-evaluation throughput: the prefix-trie executor against one forward per route.

    python benchmarks/bench_routing.py [--model zoo:base] [--rounds 5] [--threads N] [--json OUT]

Hot loop (the peers' "hot loop B"): K=200 routes drawn at random, with replacement, from the native
space (skip up to 2 layers, repeat up to 1; the number of skips and repeats uniform, then which
layers), scored on one 40-token prompt: the next-token logits at the last position along each route.
Duplicate routes count as evaluations, as they do in a search budget. Methods, on one model in one
process:

* naive: ``LayerStack.forward(ids, route=r, last_only=True)`` once per route (200 forwards);
* unique: the same, once per distinct route (what removing duplicates alone buys);
* trie: :func:`reachlens.routing.route_logits`: one node per distinct route prefix, each depth one
  batched block call per distinct layer.

Methods run round-robin (each warmed up once, then one run per method per round) so that a slow phase
of the shared host hits all alike; the script prints the median routes/s, the ratio to naive, the
fraction of layer computations the trie saves (``1 - trie nodes / sum of route lengths``), and the
largest logit difference between the trie and the naive loop.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

K = 200
PROMPT = "Q: 94+2-39-48+17-5+61-23+8-40+11-70=?\nA:"  # 40 characters (about 40 tokens for a character model)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="model spec (default: zoo:base if present, else a random "
                                                  "6-layer d=128 Llama like the peers')")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from reachlens.engine import LayerStack, encode
    from reachlens.errors import ReachlensError
    from reachlens.models import load_model
    from reachlens.models.loading import resolve_spec
    from reachlens.models.testing import make_tiny_llama
    from reachlens.routing import NativeSpace, RouteTrie, route_logits

    spec = args.model
    if spec is None:
        try:
            resolve_spec("zoo:base")
            spec = "zoo:base"
        except ReachlensError:
            spec = str(make_tiny_llama(Path(tempfile.mkdtemp()) / "peer", n_layers=6, d_model=128, n_heads=4,
                                       n_kv_heads=4, d_mlp=512))
    model = load_model(spec)
    stack = LayerStack(model)
    ids = torch.tensor(encode(model, [PROMPT]))
    space = NativeSpace(stack.n_layers)
    rng = random.Random(args.seed)
    routes = [space.sample(rng) for _ in range(K)]
    unique = list(dict.fromkeys(routes))
    trie = RouteTrie.build(routes)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model {spec}: {stack.n_layers} layers, {n_params:,} parameters, prompt {ids.shape[1]} tokens, "
          f"threads={torch.get_num_threads()}")
    print(f"routes: K={K} drawn with replacement from {space} ({space.size()} routes), {len(unique)} distinct")

    def naive():
        with torch.inference_mode():
            return [stack.forward(ids, route=r, last_only=True) for r in routes]

    def dedup():
        with torch.inference_mode():
            return [stack.forward(ids, route=r, last_only=True) for r in unique]

    def trie_run():
        return route_logits(model, ids, routes)

    ref = torch.stack(naive())
    diff = (trie_run() - ref).abs().max().item()
    methods = {"naive": naive, "unique": dedup, "trie": trie_run}
    times: dict[str, list[float]] = {m: [] for m in methods}
    for fn in methods.values():
        fn()  # warm-up
    for _ in range(args.rounds):
        for name, fn in methods.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)

    med = {m: statistics.median(v) for m, v in times.items()}
    naive_calls = trie.naive_layer_calls
    unique_calls = sum(len(r) for r in unique)
    calls = {"naive": naive_calls, "unique": unique_calls, "trie": trie.n_layer_calls}
    print(f"\n{'method':<8} {'layer calls':>11} {'median s':>9} {'min-max s':>15} {'routes/s':>9} {'ratio':>6}")
    for m in methods:
        lo, hi = min(times[m]), max(times[m])
        print(f"{m:<8} {calls[m]:>11} {med[m]:>9.4f} {lo:>7.4f}-{hi:<7.4f} {K / med[m]:>9.0f} "
              f"{med['naive'] / med[m]:>5.1f}x")
    saved = trie.saved
    saved_unique = 1 - trie.n_layer_calls / unique_calls
    ratio = med["naive"] / med["trie"]
    print(f"\ntrie vs naive: {ratio:.1f}x route evaluations per second "
          f"({trie.n_group_calls} batched block calls for {trie.n_layer_calls} trie nodes)")
    print(f"layer computations saved: {saved:.1%} of {naive_calls} (duplicates included); "
          f"{saved_unique:.1%} of the {unique_calls} of the distinct routes")
    print(f"largest |logit difference| trie vs naive: {diff:.2e}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "model": spec, "k": K, "distinct_routes": len(unique), "threads": torch.get_num_threads(),
            "median_s": med, "times_s": times, "layer_calls": calls, "ratio_trie_to_naive": ratio,
            "saved": saved, "saved_distinct": saved_unique, "max_abs_diff": diff,
        }, indent=2))


if __name__ == "__main__":
    main()
