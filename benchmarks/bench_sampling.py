"""K-sample probe throughput: reachlens' sampler against HuggingFace and TransformerBridge generate.

    python benchmarks/bench_sampling.py [--rounds 5] [--model PATH | --family NAME | --from-tokenizer DIR]
                                        [--profile] [--json OUT]

``--model DIR`` runs on any HF folder (any family: the engine's path is printed); ``--family NAME``
builds a tiny random checkpoint of that family first (``reachlens.models.testing.make_tiny_model``:
2 layers, d=64; ``gemma2``, ``gpt2``, ...) with the 50-symbol character vocabulary;
``--from-tokenizer DIR`` builds one from a real tokenizer folder's tiny config (``../shared/tokenizers/
qwen2.5-instruct``: the same 2 layers and d=64 as ``--family qwen2``, with Qwen2.5's 151,936-id
vocabulary). ``--profile`` prints where one reachlens call spends its time (cProfile, by own time).

Hot loop: K=200 completions of 32 new tokens at T=0.8 for one 40-token prompt, EOS stopping off
everywhere so every method emits exactly 200 x 32 tokens, on one model in one process:

* (a) HuggingFace ``generate(do_sample=True, num_return_sequences=200)`` on the plain HF model;
* (b) ``TransformerBridge.generate`` with the prompt repeated 200 times (KV cache on);
* reachlens ``generate``: prefill once, fan the cache out, in-place KV cache, hooks live, and one
  batch entry per distinct sample prefix (samples that agree so far are computed once);
* reachlens with ``share_prefixes=False`` (one batch entry per sample), to show what prefix sharing adds.

On the default random model the samples diverge at once, so prefix sharing has nothing to share;
on a trained model (``--model reachlens/assets/zoo/base --prompt "Q: 48*8-42+27+17=?\\nA:"``) it does.

Methods run round-robin (each warmed up once, then one run per method per round) so a slow phase of
the shared host hits all alike; the script prints median tokens/s and the ratio to (a) measured in
this run. It also checks exactness: reachlens' greedy output equals HF ``generate(do_sample=False)``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

K, NEW, TEMP = 200, 32, 0.8
PROMPT = "q: is 12+34 = 46? answer yes or no. a: "  # 40 characters -> 40 tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--model", default=None, help="HF folder (default: a random 6-layer d=128 Llama)")
    ap.add_argument("--family", default=None, help="build a tiny random checkpoint of this family instead")
    ap.add_argument("--from-tokenizer", default=None,
                    help="build a tiny random checkpoint from this real tokenizer folder's config.json instead")
    ap.add_argument("--profile", action="store_true", help="profile one reachlens call (cProfile, own time)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--prompt", default=PROMPT, help="the prompt (escape sequences such as \\n are decoded)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from transformers import AutoModelForCausalLM

    from reachlens.engine import Row, describe, generate
    from reachlens.protocol import Protocol
    from reachlens.models import load_model
    from reachlens.models.testing import make_tiny_from_folder, make_tiny_llama, make_tiny_model

    if args.family:
        folder = str(make_tiny_model(args.family, Path(tempfile.mkdtemp()) / args.family))
    elif args.from_tokenizer:
        src = Path(args.from_tokenizer)
        folder = str(make_tiny_from_folder(src, Path(tempfile.mkdtemp()) / src.name, init_std=0.3))
    else:
        folder = args.model or str(
            make_tiny_llama(Path(tempfile.mkdtemp()) / "peer", n_layers=6, d_model=128, n_heads=4, n_kv_heads=4,
                            d_mlp=512)
        )
    bridge = load_model(folder)
    info = describe(bridge)
    hf = AutoModelForCausalLM.from_pretrained(folder, use_safetensors=True).eval()
    from reachlens.engine import tokenizer_of

    tok = tokenizer_of(bridge)
    prompt = args.prompt.encode().decode("unicode_escape")
    ids = tok(prompt, return_tensors="pt").input_ids
    n_params = sum(p.numel() for p in hf.parameters())
    print(f"model {folder} ({info.model_type}, engine path {info.path}): {n_params:,} parameters, prompt "
          f"{ids.shape[1]} tokens, K={K}, {NEW} new tokens, threads={torch.get_num_threads()}")

    # exactness first
    ref = hf.generate(ids, do_sample=False, max_new_tokens=NEW, eos_token_id=None, pad_token_id=tok.pad_token_id)
    ours = generate(bridge, [prompt], [Row(0)], Protocol.greedy("arith", max_new_tokens=NEW), stop_at_eos=False)[0]
    exact = list(ours.token_ids) == ref[0, ids.shape[1]:].tolist()
    print(f"greedy equal to HF generate(do_sample=False): {exact}")

    def hf_generate():
        with torch.inference_mode():
            out = hf.generate(ids, do_sample=True, temperature=TEMP, top_k=0, max_new_tokens=NEW, min_new_tokens=NEW,
                              num_return_sequences=K, eos_token_id=None, pad_token_id=tok.pad_token_id)
        assert out.shape == (K, ids.shape[1] + NEW)

    def bridge_generate():
        with torch.inference_mode():
            out = bridge.generate(ids.repeat(K, 1), max_new_tokens=NEW, do_sample=True, temperature=TEMP,
                                  stop_at_eos=False, verbose=False, return_type="tokens")
        assert out.shape[0] == K

    rows = [Row(0, seed=s) for s in range(K)]
    probe = Protocol("arith", k=K, temperature=TEMP, max_new_tokens=NEW)

    def reachlens_generate(share: bool = True):
        outs = generate(bridge, [prompt], rows, probe, stop_at_eos=False, share_prefixes=share)
        assert all(len(o.token_ids) == NEW for o in outs)
        return len({o.token_ids for o in outs})

    distinct = reachlens_generate()
    print(f"distinct samples: {distinct} of {K}")
    methods = {"(a) HF generate": hf_generate, "(b) Bridge generate": bridge_generate,
               "reachlens": reachlens_generate, "reachlens, no sharing": lambda: reachlens_generate(False)}
    times: dict[str, list[float]] = {m: [] for m in methods}
    for fn in methods.values():
        fn()  # warm-up
    for _ in range(args.rounds):
        for name, fn in methods.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["(a) HF generate"])
    result = {"model_type": info.model_type, "path": info.path, "exact_greedy": exact, "params": n_params,
              "distinct_samples": distinct, "methods": {}}
    print(f"{'method':22s} {'median s':>9s} {'tokens/s':>10s} {'ratio to (a)':>13s}")
    for name, ts in times.items():
        med = statistics.median(ts)
        result["methods"][name] = {"median_s": med, "tokens_per_s": K * NEW / med, "ratio_to_a": base / med}
        print(f"{name:22s} {med:9.3f} {K * NEW / med:10.0f} {base / med:13.2f}")
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(reachlens_generate)
        print("one reachlens call, by own time:")
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print(f"ratio: {result['methods']['reachlens']['ratio_to_a']:.2f}x")


if __name__ == "__main__":
    main()
