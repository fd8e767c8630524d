"""The roofline of a decoding step: what the engine and HuggingFace achieve against this machine's measured peak.

    python benchmarks/bench_roofline.py [--shape qwen2.5-0.5b,llama3-1b] [--k 64] [--threads 1] [--json OUT]
    python benchmarks/bench_roofline.py --model DIR       # trained weights (e.g. SmolLM2-135M-Instruct's folder)

Per shape (a random model of the released checkpoint's shape, ``bench_sampling.build_shape``), K rows of one prompt
each decode one token per step, sampled at T=0.8 (all K samples of a random model differ from the first token, so
the engine's prefix sharing has nothing to share and a step has K batch entries, as HF's has). ``--model DIR``
runs one trained checkpoint instead, the engine with ``share_prefixes=False`` (its samples agree on stretches:
so that a step has K entries there too). A step's time is
measured, not profiled: this process's CPU seconds of a ``--short``-token and a ``--long``-token call, their
difference over the steps between (so the prefill and per-call setup cancel), for reachlens' ``generate`` and HF's
``generate(num_return_sequences=K)`` on the same weight tensors.

Counted from the shapes (float32; ``d`` model width, ``L`` layers, ``h``/``g`` query/key-value heads of width
``e``, ``f`` MLP width, ``V`` vocabulary, ``c`` the context length at the measured steps):

* FLOPs per step: ``K * (2 * P + 4 * L * h * e * c)``, ``P`` the multiply-adds of one row through every linear map
  (per layer ``d*h*e + 2*d*g*e + h*e*d + 3*d*f``, and the LM head ``d*V``), the second term attention's two
  products (scores and the weighted sum over ``c`` keys). Norms, rotary, SiLU and the sampler's passes over the
  vocabulary are left out (a few per cent).
* Bytes per step, the least a step must move: every linear map's weights read once (``4 * P`` bytes, the tied LM
  head once), each row's keys and values read (``4 * K * 2 * L * g * e * c``) and written (one position), and the
  logits written and read once (``8 * K * V``).

The machine's peak, measured in the same run with the same threads: a float32 ``torch.matmul`` of two 2,048 x
2,048 matrices (FLOP/s) and a copy of a 512 MiB tensor into another (bytes/s, read plus write), each the best of
five. The roofline bound of a step is ``min(peak FLOP/s, intensity x peak bytes/s)``; the table gives each method's
achieved FLOP/s and bytes/s, their shares of the peaks and the share of the bound.

Then where the engine's step goes, from its parts timed alone at the step's shape (CPU seconds, best of three):
the layers' linear maps and the LM head (through the kernels the engine runs them with: oneDNN for a real model's
large maps, :mod:`reachlens.engine.fast_linear`), the sampler's work over the vocabulary (the log-softmax and the
inverse-CDF draw of :mod:`reachlens.engine.rng`), and what is left of the measured step (attention, norms, rotary,
elementwise work and Python). The last line is ``ratio: N.NNx``, the engine's achieved share of the bound at the
first shape over HF's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sampling import build_shape, hf_on_bridge_weights  # noqa: E402

TEMP = 0.8
PROMPT = "Q: 48*8-42+27+17=?\nA:"


def best(fn, reps: int = 5) -> float:
    """The least CPU seconds of ``reps`` calls of ``fn`` (after one untimed)."""
    fn()
    out = []
    for _ in range(reps):
        c0 = time.process_time()
        fn()
        out.append(time.process_time() - c0)
    return min(out)


def machine_peak() -> dict:
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    flops = 2 * 2048**3 / best(lambda: torch.matmul(a, b))
    src = torch.randn(128 * 2**20)  # 512 MiB
    dst = torch.empty_like(src)
    moved = 2 * src.numel() * 4 / best(lambda: dst.copy_(src))
    return {"flops": flops, "bytes": moved}


def counts(cfg, k: int, ctx: float) -> dict:
    """FLOPs and bytes of one decoding step of ``k`` rows at context ``ctx`` (module docstring)."""
    d, n_layers, f, vocab = cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size, cfg.vocab_size
    h, g = cfg.num_attention_heads, cfg.num_key_value_heads
    e = getattr(cfg, "head_dim", None) or d // h
    per_layer = d * h * e + 2 * d * g * e + h * e * d + 3 * d * f
    macs = n_layers * per_layer + d * vocab
    flops = k * (2 * macs + 4 * n_layers * h * e * ctx)
    kv = 4 * k * 2 * n_layers * g * e
    moved = 4 * macs + kv * ctx + kv + 8 * k * vocab
    return {"flops": flops, "bytes": moved, "intensity": flops / moved, "macs_per_row": macs}


def step_seconds(fn, short: int, long: int) -> float:
    """CPU seconds per decoding step: (a ``long``-token call - a ``short``-token call) / (long - short)."""
    fn(short)
    c0 = time.process_time()
    fn(short)
    c1 = time.process_time()
    fn(long)
    c2 = time.process_time()
    return ((c2 - c1) - (c1 - c0)) / (long - short)


def methods(bridge, hf, tok, k: int, share: bool | None = None):
    from reachlens.engine import Row, generate
    from reachlens.protocol import Protocol

    ids = tok(PROMPT, return_tensors="pt").input_ids
    rows = [Row(0, seed=s) for s in range(k)]

    def engine(n: int) -> None:
        generate(bridge, [PROMPT], rows, Protocol("arith", k=k, temperature=TEMP, max_new_tokens=n), stop_at_eos=False,
                 share_prefixes=share)

    def hf_generate(n: int) -> None:
        with torch.inference_mode():
            hf.generate(ids, do_sample=True, temperature=TEMP, top_k=0, max_new_tokens=n, min_new_tokens=n,
                        num_return_sequences=k, pad_token_id=tok.pad_token_id)

    return ids.shape[1], {"reachlens": engine, "HF generate": hf_generate}


def engine_parts(cfg, k: int) -> dict:
    """CPU seconds of the engine's step parts timed alone at ``k`` rows (module docstring)."""
    from reachlens.engine.fast_linear import LARGE, WIDE
    from reachlens.engine.rng import Workspace, sample_inverse_cdf

    d, f, vocab = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    h, g = cfg.num_attention_heads, cfg.num_key_value_heads
    e = getattr(cfg, "head_dim", None) or d // h
    maps = {"q": (h * e, d), "k": (g * e, d), "v": (g * e, d), "o": (d, h * e), "gate": (f, d), "up": (f, d),
            "down": (d, f)}

    def product(out_f: int, in_f: int) -> float:
        w, x = torch.randn(out_f, in_f) * 0.02, torch.randn(k, in_f)
        if w.numel() >= LARGE and min(w.shape) >= WIDE:
            return best(lambda: torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], ""), 3)
        return best(lambda: F.linear(x, w), 3)

    layers = cfg.num_hidden_layers * sum(product(*shape) for shape in maps.values())
    head = product(vocab, d)
    logits, seeds, ws = torch.randn(k, vocab), torch.arange(k), Workspace()

    def sampler() -> None:
        sample_inverse_cdf(logits, seeds, 3, TEMP, 1.0, group=torch.arange(k), workspace=ws)
        torch.log_softmax(logits, -1)

    return {"linear layers": layers, "LM head": head, "sampler": best(sampler, 3)}


def run_shape(name: str, args, peak: dict) -> dict:
    from reachlens.models import load_model

    folder = args.model or build_shape(name)
    bridge = load_model(folder)
    hf = hf_on_bridge_weights(bridge, folder)
    if not args.model:
        shutil.rmtree(Path(folder).parent, ignore_errors=True)
    from reachlens.engine import tokenizer_of

    # trained weights' samples agree on stretches: without sharing every step has K entries, as HF's has
    prompt_len, ways = methods(bridge, hf, tokenizer_of(bridge), args.k, False if args.model else None)
    ctx = prompt_len + (args.short + args.long) / 2
    c = counts(hf.config, args.k, ctx)
    bound = min(peak["flops"], c["intensity"] * peak["bytes"])
    print(f"\n{name}: {args.k} rows, context ~{ctx:.0f}, {c['flops'] / 1e9:.1f} GFLOP and {c['bytes'] / 1e9:.2f} GB a "
          f"step (intensity {c['intensity']:.1f} FLOP/byte): roofline bound {bound / 1e9:.1f} GFLOP/s "
          f"({'compute' if bound == peak['flops'] else 'memory'}-bound), {c['flops'] / bound:.3f} s a step at best")
    print(f"  {'method':12s} {'s/step':>8s} {'GFLOP/s':>8s} {'% peak':>7s} {'GB/s':>7s} {'% peak':>7s} {'% bound':>8s}")
    out = {"rows": args.k, "context": ctx, **c, "bound": bound, "methods": {}}
    for method, fn in ways.items():
        s = step_seconds(fn, args.short, args.long)
        fl, by = c["flops"] / s, c["bytes"] / s
        out["methods"][method] = {"step_s": s, "flops": fl, "bytes": by, "of_bound": fl / bound}
        print(f"  {method:12s} {s:8.3f} {fl / 1e9:8.1f} {100 * fl / peak['flops']:6.1f}% {by / 1e9:7.2f} "
              f"{100 * by / peak['bytes']:6.1f}% {100 * fl / bound:7.1f}%", flush=True)
    parts = engine_parts(hf.config, args.k)
    parts["the rest (attention, norms, rotary, elementwise, Python)"] = max(
        out["methods"]["reachlens"]["step_s"] - sum(parts.values()), 0.0)
    print(f"  the engine's step ({out['methods']['reachlens']['step_s']:.3f} s) by part, timed alone:")
    for part, s in parts.items():
        print(f"    {part:58s} {s:7.3f} s  {100 * s / out['methods']['reachlens']['step_s']:5.1f} %")
    out["engine_parts"] = parts
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="qwen2.5-0.5b,llama3-1b")
    ap.add_argument("--model", default=None,
                    help="an HF folder of trained weights instead of --shape (the engine without prefix sharing)")
    ap.add_argument("--k", type=int, default=64, help="rows decoded together (K samples of one prompt)")
    ap.add_argument("--short", type=int, default=2, help="new tokens of the short call")
    ap.add_argument("--long", type=int, default=10, help="new tokens of the long call")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    peak = machine_peak()
    print(f"machine ({args.threads} thread(s), torch {torch.__version__}): float32 matmul 2048^3 "
          f"{peak['flops'] / 1e9:.1f} GFLOP/s; copy of 512 MiB {peak['bytes'] / 1e9:.1f} GB/s (read + write); "
          f"ridge {peak['flops'] / peak['bytes']:.1f} FLOP/byte")
    shapes = {name: run_shape(name, args, peak) for name in ([args.model] if args.model else args.shape.split(","))}
    if args.json:
        Path(args.json).write_text(json.dumps({"peak": peak, "shapes": shapes}, indent=2))
    first = next(iter(shapes.values()))["methods"]
    print(f"ratio: {first['reachlens']['of_bound'] / first['HF generate']['of_bound']:.2f}x")


if __name__ == "__main__":
    main()
