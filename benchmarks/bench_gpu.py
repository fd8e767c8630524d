"""K-sample probe on a GPU: reachlens' sampler against HuggingFace ``generate`` on a ~0.5B model.

    python benchmarks/bench_gpu.py [--device cuda] [--dtype bfloat16] [--k 64] [--new 128] [--rounds 3]
    python benchmarks/bench_gpu.py --prompts 4 --shape 1.5b             # 4 prompts x K, the Qwen2.5-1.5B shape
    python benchmarks/bench_gpu.py --tiny --device cpu --dtype float32     # a smoke test of the script

The model is Qwen2.5-0.5B-shaped (24 layers, d=896, 14 query / 2 key-value heads, d_mlp=4864,
vocabulary 151,936, tied embeddings; 494M parameters; ``--shape 1.5b``: Qwen2.5-1.5B's, 28 layers, d=1,536, 12 / 2
heads, d_mlp=8,960, 1.5B parameters) with random weights, built here from
``transformers.Qwen2Config`` and saved as safetensors with a tokenizer of the same vocabulary size
(characters plus filler tokens; nothing is downloaded). It runs on the engine's fused path.

Hot loop, one model in one process, methods round-robin after one warm-up each:

* (a) HuggingFace ``generate(do_sample=True, num_return_sequences=K)`` on the plain HF model
  (its default attention, SDPA);
* reachlens ``generate``: K seeded rows of one prompt (prefill once, shared-prefix decoding; the bridge's hook
  points in place, none attached);
* reachlens with ``share_prefixes=False`` (one batch row per sample, what a user hook gets);
* reachlens with a capture hook live: a user hook on the middle block's ``hook_resid_post`` adds each step's
  activations into a running sum on the device (capture during sampled generation, no host copy per step).

EOS stopping is off everywhere so every method emits K x NEW tokens. The script prints median
seconds, tokens/s, peak GPU memory and the ratio to (a), last ``ratio: N.NNx`` (the capture-hook run's over
(a)), and says whether reachlens' greedy output equals HF ``generate(do_sample=False)`` (in bfloat16 the two
may part at a near-tie; the first differing position is printed). Random weights make the K samples diverge at
once, so prefix sharing has nothing to share: this is the engine's worst case.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

PROMPT = "Question: Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. " \
         "How many clips did Natalia sell altogether in April and May?\nAnswer:"


def vocab_tokenizer(size: int):
    """A character tokenizer padded with filler tokens to ``size`` ids (so it can decode any sampled id)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from reachlens.models.char_tokenizer import SPECIAL_TOKENS

    chars = sorted(set(PROMPT + "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ .,?!:;+-*/=\n"))
    vocab = {t: i for i, t in enumerate(list(SPECIAL_TOKENS) + chars)}
    for i in range(len(vocab), size):
        vocab[f"<x{i}>"] = i
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>")


SHAPES = {
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2),
}


def prompts_of(n: int) -> list[str]:
    """``n`` distinct prompts of the same length (PROMPT with its first number changed): no padding in HF's batch."""
    return [PROMPT.replace("48", f"{48 + i:02d}" if 48 + i < 100 else f"{i:02d}") for i in range(n)]


def build(folder: Path, tiny: bool, shape: str = "0.5b") -> Path:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    vocab = 512 if tiny else 151_936
    tok = vocab_tokenizer(vocab)
    shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2) if tiny else SHAPES[shape]
    cfg = Qwen2Config(vocab_size=vocab, max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                      tie_word_embeddings=True, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, **shape)
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=1, help="distinct prompts, K samples each")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="0.5b")
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--tiny", action="store_true", help="a 2-layer d=64 model (to check the script on a CPU)")
    ap.add_argument("--model", default=None, help="an existing HF folder instead of the built one")
    ap.add_argument("--json", default=None)
    ap.add_argument("--keep", default=None, help="build the model in this folder and keep it (for bench_scale.py)")
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: run this on a GPU machine (or --tiny --device cpu --dtype float32 to "
                         "check the script)")

    from transformers import AutoModelForCausalLM

    from reachlens.engine import Row, describe, generate, tokenizer_of
    from reachlens.protocol import Protocol
    from reachlens.models import load_model

    dtype = getattr(torch, args.dtype)
    folder = Path(args.model) if args.model else build(
        Path(args.keep) if args.keep else Path(tempfile.mkdtemp()) / f"qwen2.5-{args.shape}-shaped", args.tiny,
        args.shape)
    bridge = load_model(str(folder), device=args.device, dtype=dtype)
    hf = AutoModelForCausalLM.from_pretrained(str(folder), use_safetensors=True, dtype=dtype).to(args.device).eval()
    tok = tokenizer_of(bridge)
    texts = prompts_of(args.prompts)
    ids = tok(texts, return_tensors="pt").input_ids.to(args.device)
    n_params = sum(p.numel() for p in hf.parameters())
    gpu = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else args.device
    print(f"{gpu}, torch {torch.__version__}: {n_params / 1e6:.0f}M parameters in {args.dtype}, path "
          f"{describe(bridge).path}, {args.prompts} prompt(s) of {ids.shape[1]} tokens, K={args.k}, {args.new} new tokens")

    def sync():
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    with torch.inference_mode():
        ref = hf.generate(ids[:1], do_sample=False, max_new_tokens=args.new, eos_token_id=None,
                          pad_token_id=tok.pad_token_id)[0, ids.shape[1]:].tolist()
    ours = list(generate(bridge, [PROMPT], [Row(0)], Protocol.greedy("arith", max_new_tokens=args.new),
                         stop_at_eos=False)[0].token_ids)
    first_diff = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), None)
    print(f"greedy equal to HF generate(do_sample=False): {ours == ref}"
          + ("" if first_diff is None else f" (first difference at token {first_diff})"))

    def hf_generate():
        with torch.inference_mode():
            out = hf.generate(ids, do_sample=True, temperature=args.temperature, top_k=0, max_new_tokens=args.new,
                              min_new_tokens=args.new, num_return_sequences=args.k, eos_token_id=None,
                              pad_token_id=tok.pad_token_id)
        assert out.shape == (args.prompts * args.k, ids.shape[1] + args.new)

    rows = [Row(p, seed=s) for p in range(args.prompts) for s in range(args.k)]
    probe = Protocol("arith", k=args.k, temperature=args.temperature, max_new_tokens=args.new)

    def reachlens_generate(share: bool = True):
        outs = generate(bridge, texts, rows, probe, stop_at_eos=False, share_prefixes=share)
        assert all(len(o.token_ids) == args.new for o in outs)

    captured = torch.zeros((), device=args.device, dtype=torch.float32)
    middle = f"blocks.{len(bridge.blocks) // 2}.hook_resid_post"

    def capture(x, *, hook):
        captured.add_(x.float().sum())  # stays on the device: no synchronisation per step

    def reachlens_capturing():
        with bridge.hooks(fwd_hooks=[(middle, capture)]):
            reachlens_generate()

    methods = {"(a) HF generate": hf_generate, "reachlens": reachlens_generate,
               "reachlens, no sharing": lambda: reachlens_generate(False),
               "reachlens, capture hook": reachlens_capturing}
    times: dict[str, list[float]] = {m: [] for m in methods}
    peak: dict[str, float] = {}
    for name, fn in methods.items():  # warm-up, and peak memory
        if args.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats(args.device)
        fn()
        sync()
        if args.device.startswith("cuda"):
            peak[name] = torch.cuda.max_memory_allocated(args.device) / 2**30
    for _ in range(args.rounds):
        for name, fn in methods.items():
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["(a) HF generate"])
    tokens = args.prompts * args.k * args.new
    result = {"device": gpu, "dtype": args.dtype, "params": n_params, "k": args.k, "new": args.new,
              "prompts": args.prompts, "shape": "tiny" if args.tiny else args.shape,
              "exact_greedy": ours == ref, "methods": {}}
    print(f"{'method':24s} {'median s':>9s} {'tokens/s':>10s} {'peak GiB':>9s} {'ratio to (a)':>13s}")
    for name, ts in times.items():
        med = statistics.median(ts)
        result["methods"][name] = {"median_s": med, "tokens_per_s": tokens / med,
                                   "peak_gib": peak.get(name), "ratio_to_a": base / med}
        mem = f"{peak[name]:9.2f}" if name in peak else f"{'-':>9s}"
        print(f"{name:24s} {med:9.3f} {tokens / med:10.0f} {mem} {base / med:13.2f}")
    result["capture_hook"] = middle
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print(f"ratio: {result['methods']['reachlens, capture hook']['ratio_to_a']:.2f}x")


if __name__ == "__main__":
    main()
