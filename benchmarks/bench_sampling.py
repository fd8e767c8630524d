"""K-sample probe throughput: reachlens' sampler against HuggingFace and TransformerBridge generate.

    python benchmarks/bench_sampling.py [--rounds 5] [--model PATH | --family NAME | --from-tokenizer DIR]
                                        [--profile] [--json OUT]
    python benchmarks/bench_sampling.py --shape qwen2.5-0.5b --threads 1 [--profile]   # or --shape llama3-1b

``--model DIR`` runs on any HF folder (any family: the engine's path is printed); ``--family NAME``
builds a tiny random checkpoint of that family first (``reachlens.models.testing.make_tiny_model``:
2 layers, d=64; ``gemma2``, ``gpt2``, ...) with the 50-symbol character vocabulary;
``--from-tokenizer DIR`` builds one from a real tokenizer folder's tiny config (``../shared/tokenizers/
qwen2.5-instruct``: the same 2 layers and d=64 as ``--family qwen2``, with Qwen2.5's 151,936-id
vocabulary). ``--profile`` prints where one reachlens call spends its time (cProfile, by own time).

``--shape NAME`` builds a random model of a released checkpoint's shape from its ``transformers`` config
class, nothing downloaded (weights drawn at the config's ``initializer_range``, saved to a temporary
folder beside the family's real tokenizer from ``../shared/tokenizers``): ``qwen2.5-0.5b`` (24 layers,
d=896, 14/2 heads, MLP 4,864, vocabulary 151,936, tied head) and ``llama3-1b`` (Llama 3.2 1B: 16 layers,
d=2048, 32/8 heads, MLP 8,192, vocabulary 128,256, tied head, Llama 3 rope scaling). It times K=64 samples
of 64 tokens (``--k``, ``--new-tokens``) against HF ``generate(num_return_sequences=64, do_sample=True)``
only, each warmed up on 2 tokens, one round by default; HF runs on the same weight tensors as the bridge
(one copy in memory). With ``--profile`` it then profiles both on ``--profile-tokens`` new tokens
(torch.profiler) and prints where the CPU time goes: the LM head, the passes over the vocabulary (the
sampler), the other linear layers, attention, the remaining operators, and Python (the time outside
any operator).

Hot loop: K=200 completions of 32 new tokens at T=0.8 for one 40-token prompt, EOS stopping off
everywhere so every method emits exactly 200 x 32 tokens, on one model in one process:

* (a) HuggingFace ``generate(do_sample=True, num_return_sequences=200)`` on the plain HF model;
* (b) ``TransformerBridge.generate`` with the prompt repeated 200 times (KV cache on);
* reachlens ``generate``: prefill once, fan the cache out, in-place KV cache, hooks live, and one
  batch entry per distinct sample prefix (samples that agree so far are computed once);
* reachlens with ``share_prefixes=False`` (one batch entry per live sample after the prompt, which is still
  prefilled once), to show what sharing the samples' common prefixes adds.

On the default random model the samples diverge at once, so prefix sharing has nothing to share;
on a trained model (``--model reachlens/assets/zoo/base --prompt "Q: 48*8-42+27+17=?\\nA:"``) it does.

``--chat`` (a real instruct checkpoint, ``--model DIR``): EOS-terminated samples of varied length on a chat
prompt, what an audit decodes: ``--prompt`` (default ``Q: 48*8-42+27+17=?\\nA:``) as the user turn of the model's
own chat template (``apply_chat_template(add_generation_prompt=True)``), K=64 samples of at most 96 new tokens
(``--k``, ``--new-tokens``), EOS on everywhere: HF ``generate(num_return_sequences=K)`` with its EOS stop (the
batch runs until its longest sample ends), reachlens ``generate(stop_at_eos=True)`` with and without prefix
sharing. Each method's samples differ (different random streams), so the figure is each method's own generated
tokens (up to and including EOS) per second, and the ratio is of tokens/s; the tokens, the longest sample and
the samples that reached EOS are printed per method. Exactness: greedy with EOS on, reachlens against HF.

Methods run round-robin (each warmed up once, then one run per method per round) so a slow phase of
the shared host hits all alike; the script prints median tokens/s and the ratio to (a) measured in
this run. It also checks exactness: reachlens' greedy output equals HF ``generate(do_sample=False)``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

K, NEW, TEMP = 200, 32, 0.8
PROMPT = "q: is 12+34 = 46? answer yes or no. a: "  # 40 characters -> 40 tokens

LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
SHAPES = {
    "qwen2.5-0.5b": ("qwen2.5-base", {
        "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
        "num_key_value_heads": 2, "layer_types": ["full_attention"] * 24, "tie_word_embeddings": True}),
    "llama3-1b": ("llama3-instruct", {
        "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 64, "tie_word_embeddings": True, "rms_norm_eps": 1e-5,
        "max_position_embeddings": 131072, "rope_parameters": LLAMA3_ROPE}),
}
"""Per shape: the real tokenizer folder (``../shared/tokenizers/NAME``) and the released checkpoint's dimensions."""


def build_shape(name: str) -> str:
    """A folder with a random model of shape ``name`` (:data:`SHAPES`) and its family's real tokenizer."""
    from reachlens.models.testing import make_tiny_from_folder

    tokenizer, dims = SHAPES[name]
    source = Path(__file__).resolve().parents[1] / ".." / "shared" / "tokenizers" / tokenizer
    if not source.is_dir():
        raise SystemExit(f"--shape {name} needs the real tokenizer folder {source} (../shared beside the checkout)")
    return str(make_tiny_from_folder(source, Path(tempfile.mkdtemp(prefix=f"shape-{name}-")) / name, **dims))


def hf_on_bridge_weights(bridge, folder: str):
    """The plain HF model of ``folder`` whose parameters are the bridge's own tensors (no second copy)."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    with init_empty_weights():  # parameters on the meta device, buffers (rotary tables) real
        hf = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    theirs = {k.replace("_original_component.", ""): v for k, v in bridge.original_model.state_dict().items()}
    hf.load_state_dict({k: theirs[k] for k in hf.state_dict()}, assign=True)
    hf.tie_weights()
    if any(t.is_meta for t in hf.state_dict().values()):
        raise SystemExit("a parameter of the HF model was not found among the bridge's")
    return hf.eval()


def profile_split(fn, vocab: int, label: str) -> None:
    """Run ``fn`` under torch.profiler and print its time by kind of work (the profiler times operators in
    wall seconds, so the split is of the call's wall time; Python is what no operator accounts for)."""
    from torch.profiler import ProfilerActivity, profile

    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    total = (time.perf_counter() - t0) * 1e6
    linear = {"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "mkldnn::_linear_pointwise"}
    attention = {"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_safe_softmax"}
    split = {"LM head": 0.0, "sampling over the vocabulary": 0.0, "other linear layers": 0.0, "attention": 0.0,
             "other operators": 0.0}
    for evt in prof.key_averages(group_by_input_shape=True):
        shapes = [tuple(x) for x in evt.input_shapes if isinstance(x, (list, tuple))]
        wide = any(vocab in shape for shape in shapes)
        heads = any(len(shape) == 4 for shape in shapes)  # [batch, heads, positions, d_head]: attention
        if wide:
            kind = "LM head" if evt.key in linear else "sampling over the vocabulary"
        elif evt.key in attention or (heads and evt.key in linear | {"aten::_softmax", "aten::index_select"}):
            kind = "attention"
        elif evt.key in linear:
            kind = "other linear layers"
        else:
            kind = "other operators"
        split[kind] += evt.self_cpu_time_total
    split["Python and the rest (outside operators)"] = max(total - sum(split.values()), 0.0)
    print(f"{label}: {total / 1e6:.2f} s under the profiler")
    for kind, us in split.items():
        print(f"  {kind:45s} {us / 1e6:8.2f} s  {100 * us / total:5.1f} %")


CHAT_PROMPT = "Q: 48*8-42+27+17=?\nA:"
"""``--chat``'s default user turn (the arith task's question format)."""


def generated_tokens(row: list[int], eos: set[int]) -> int:
    """The tokens a sample generated: up to and including its first EOS (all of them when none)."""
    for i, t in enumerate(row):
        if t in eos:
            return i + 1
    return len(row)


def chat_methods(args, bridge, hf, k: int, new: int) -> tuple[bool, dict]:
    """``--chat``'s setup: the greedy check (EOS on, reachlens against HF) and the three methods, each a function
    of the new-token budget returning every sample's generated-token count."""
    from reachlens.engine import Row, generate, tokenize_prompts, tokenizer_of
    from reachlens.engine.generate import _eos_ids
    from reachlens.engine.tokens import ChatPrompt
    from reachlens.protocol import Protocol

    tok = tokenizer_of(bridge)
    user = (args.prompt if args.prompt != PROMPT else CHAT_PROMPT).encode().decode("unicode_escape")
    turn = [{"role": "user", "content": user}]
    text = tok.apply_chat_template(turn, add_generation_prompt=True, tokenize=False)
    at = text.index(user)  # the template's own spans around the user turn: its special tokens are those tokens
    prompt = ChatPrompt(text, ((0, at), (at + len(user), len(text))))
    ids = torch.tensor(tokenize_prompts(tok, [prompt]))
    expected = tok.apply_chat_template(turn, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    if ids[0].tolist() != list(expected):
        raise SystemExit("the chat prompt's ids differ from apply_chat_template(tokenize=True)'s")
    eos = sorted(_eos_ids(bridge))
    print(f"chat prompt {ids.shape[1]} tokens: {text!r}; EOS ids {eos}; K={k}, at most {new} new tokens")
    with torch.inference_mode():
        ref = hf.generate(ids, do_sample=False, max_new_tokens=new, eos_token_id=eos,
                          pad_token_id=tok.pad_token_id)[0, ids.shape[1]:].tolist()
    ref = ref[: generated_tokens(ref, set(eos))]
    ours = generate(bridge, [prompt], [Row(0)], Protocol.greedy("arith", max_new_tokens=new), stop_at_eos=True)[0]
    exact = list(ours.token_ids) == ref
    print(f"greedy equal to HF generate(do_sample=False), EOS on: {exact} ({len(ref)} tokens: {ours.text!r})")

    def hf_generate(n: int = new) -> list[int]:
        with torch.inference_mode():
            out = hf.generate(ids, do_sample=True, temperature=TEMP, top_k=0, max_new_tokens=n,
                              num_return_sequences=k, eos_token_id=eos, pad_token_id=tok.pad_token_id)
        return [generated_tokens(r, set(eos)) for r in out[:, ids.shape[1]:].tolist()]

    rows = [Row(0, seed=s) for s in range(k)]

    def ours_generate(n: int = new, share: bool = True) -> list[int]:
        outs = generate(bridge, [prompt], rows, Protocol("arith", k=k, temperature=TEMP, max_new_tokens=n),
                        stop_at_eos=True, share_prefixes=share)
        return [len(o.token_ids) for o in outs]

    return exact, {"(a) HF generate": hf_generate, "reachlens": ours_generate,
                   "reachlens, no sharing": lambda n=new: ours_generate(n, False)}


def chat_race(args, bridge, hf, k: int, new: int, rounds: int) -> dict:
    """``--chat``: EOS-terminated samples on a chat prompt, HF ``generate`` vs reachlens with and without prefix
    sharing, round-robin in an alternating order; with ``--profile``, then each method's split by kind of work."""
    exact, methods = chat_methods(args, bridge, hf, k, new)
    for fn in methods.values():
        fn(2)  # warm-up
    result = {"mode": "chat", "exact_greedy": exact}
    runs: dict[str, list[tuple[float, float, list[int]]]] = {m: [] for m in methods}
    for r in range(rounds):
        for name in (list(methods) if r % 2 == 0 else list(methods)[::-1]):
            t0, c0 = time.perf_counter(), time.process_time()
            lengths = methods[name]()
            runs[name].append((time.perf_counter() - t0, time.process_time() - c0, lengths))
    if rounds:
        result = chat_report(runs, args.clock, new, exact)
    if args.profile:
        for name in ("(a) HF generate", "reachlens, no sharing"):
            c0 = time.process_time()
            profile_split(lambda: methods[name](args.profile_tokens), hf.config.vocab_size,
                          f"{name}, at most {args.profile_tokens} tokens")
            print(f"  ({time.process_time() - c0:.2f} CPU s of this process)")
    return result


def chat_report(runs: dict, clock: str, new: int, exact: bool) -> dict:
    """Print each method's tokens, seconds and tokens/s (medians over rounds) and the ratio to (a)'s tokens/s."""
    col = 1 if clock == "cpu" else 0
    rate = {m: statistics.median(sum(t[2]) / t[col] for t in ts) for m, ts in runs.items()}
    result = {"mode": "chat", "exact_greedy": exact, "clock": clock, "max_new_tokens": new, "methods": {}}
    print(f"{'method':22s} {'tokens':>7s} {'longest':>7s} {'at EOS':>6s} {'wall s':>8s} {'CPU s':>8s} "
          f"{'tokens/s':>9s} {'ratio to (a)':>13s}   (medians; tokens/s and ratio in {clock} seconds)")
    for m, ts in runs.items():
        toks = [sum(t[2]) for t in ts]
        longest, at_eos = max(max(t[2]) for t in ts), statistics.median(sum(x < new for x in t[2]) for t in ts)
        wall, cpu = statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts)
        ratio = rate[m] / rate["(a) HF generate"]
        result["methods"][m] = {"tokens": toks, "median_s": wall, "median_cpu_s": cpu, "tokens_per_s": rate[m],
                                "ratio_to_a": ratio, "longest": longest,
                                "per_round": [(t[0], t[1], sum(t[2])) for t in ts]}
        print(f"{m:22s} {statistics.median(toks):7.0f} {longest:7d} {at_eos:6.0f} {wall:8.2f} {cpu:8.2f} "
              f"{rate[m]:9.1f} {ratio:13.2f}")
        print(f"  rounds (wall s, CPU s, tokens): {', '.join(f'({a:.1f}, {b:.1f}, {sum(c)})' for a, b, c in ts)}")
    print(f"no sharing: {result['methods']['reachlens, no sharing']['ratio_to_a']:.2f}x")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds (default 5; 1 with --shape)")
    ap.add_argument("--model", default=None, help="HF folder (default: a random 6-layer d=128 Llama)")
    ap.add_argument("--family", default=None, help="build a tiny random checkpoint of this family instead")
    ap.add_argument("--from-tokenizer", default=None,
                    help="build a tiny random checkpoint from this real tokenizer folder's config.json instead")
    ap.add_argument("--shape", choices=sorted(SHAPES), default=None,
                    help="a random model of a released checkpoint's shape; HF and reachlens only, K=64 x 64 tokens")
    ap.add_argument("--k", type=int, default=None, help=f"samples (default {K}; 64 with --shape or --chat)")
    ap.add_argument("--new-tokens", type=int, default=None, help=f"new tokens per sample (default {NEW}; 64 with --shape, at most 96 with --chat)")
    ap.add_argument("--profile", action="store_true",
                    help="profile one reachlens call (cProfile, own time); with --shape or --chat, by kind of work")
    ap.add_argument("--profile-tokens", type=int, default=8, help="new tokens of the --shape or --chat profile")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="the ratio's seconds: wall, or this process's CPU (steadier on a shared host with --threads 1)")
    ap.add_argument("--prompt", default=PROMPT, help="the prompt (escape sequences such as \\n are decoded)")
    ap.add_argument("--chat", action="store_true",
                    help="EOS-terminated samples on a chat prompt (K=64, <= 96 new tokens; --model an instruct folder)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    k = args.k or (64 if args.shape or args.chat else K)
    new = args.new_tokens or (64 if args.shape else 96 if args.chat else NEW)
    rounds = args.rounds if args.rounds is not None else (1 if args.shape else 5)  # 0 with --chat: the profile only

    from transformers import AutoModelForCausalLM

    from reachlens.engine import Row, describe, generate
    from reachlens.protocol import Protocol
    from reachlens.models import load_model
    from reachlens.models.testing import make_tiny_from_folder, make_tiny_llama, make_tiny_model

    if args.shape:
        folder = build_shape(args.shape)
    elif args.family:
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
    if args.shape:
        hf = hf_on_bridge_weights(bridge, folder)
        shutil.rmtree(Path(folder).parent, ignore_errors=True)  # loaded: the temporary checkpoint can go
    else:
        hf = AutoModelForCausalLM.from_pretrained(folder, use_safetensors=True).eval()
    from reachlens.engine import tokenizer_of

    if args.chat:
        result = chat_race(args, bridge, hf, k, new, rounds)
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2))
        if "methods" in result:
            print(f"ratio: {result['methods']['reachlens']['ratio_to_a']:.2f}x")
        return
    tok = tokenizer_of(bridge)
    prompt = args.prompt.encode().decode("unicode_escape")
    ids = tok(prompt, return_tensors="pt").input_ids
    n_params = sum(p.numel() for p in hf.parameters())
    print(f"model {args.shape or folder} ({info.model_type}, engine path {info.path}): {n_params:,} parameters, "
          f"vocabulary {hf.config.vocab_size:,}, prompt {ids.shape[1]} tokens, K={k}, {new} new tokens, "
          f"threads={torch.get_num_threads()}")

    # exactness first
    ref = hf.generate(ids, do_sample=False, max_new_tokens=new, eos_token_id=None, pad_token_id=tok.pad_token_id)
    ours = generate(bridge, [prompt], [Row(0)], Protocol.greedy("arith", max_new_tokens=new), stop_at_eos=False)[0]
    exact = list(ours.token_ids) == ref[0, ids.shape[1]:].tolist()
    print(f"greedy equal to HF generate(do_sample=False): {exact}")

    def hf_generate(n: int = new):
        with torch.inference_mode():
            out = hf.generate(ids, do_sample=True, temperature=TEMP, top_k=0, max_new_tokens=n, min_new_tokens=n,
                              num_return_sequences=k, eos_token_id=None, pad_token_id=tok.pad_token_id)
        assert out.shape == (k, ids.shape[1] + n)

    def bridge_generate(n: int = new):
        with torch.inference_mode():
            out = bridge.generate(ids.repeat(k, 1), max_new_tokens=n, do_sample=True, temperature=TEMP,
                                  stop_at_eos=False, verbose=False, return_type="tokens")
        assert out.shape[0] == k

    rows = [Row(0, seed=s) for s in range(k)]

    def reachlens_generate(n: int = new, share: bool = True):
        probe = Protocol("arith", k=k, temperature=TEMP, max_new_tokens=n)
        outs = generate(bridge, [prompt], rows, probe, stop_at_eos=False, share_prefixes=share)
        assert all(len(o.token_ids) == n for o in outs)
        return len({o.token_ids for o in outs})

    methods = {"(a) HF generate": hf_generate, "(b) Bridge generate": bridge_generate,
               "reachlens": reachlens_generate, "reachlens, no sharing": lambda n=new: reachlens_generate(n, False)}
    if args.shape:  # minutes per call at these shapes: the two the target names
        methods = {name: methods[name] for name in ("(a) HF generate", "reachlens")}
    times: dict[str, list[tuple[float, float]]] = {m: [] for m in methods}
    for fn in methods.values():
        fn(2 if args.shape else new)  # warm-up
    distinct = None
    for _ in range(rounds):
        for name, fn in methods.items():
            t0, c0 = time.perf_counter(), time.process_time()
            got = fn()
            times[name].append((time.perf_counter() - t0, time.process_time() - c0))
            distinct = got if name == "reachlens" else distinct
    print(f"distinct samples: {distinct} of {k}")
    clock = 1 if args.clock == "cpu" else 0
    base = statistics.median(t[clock] for t in times["(a) HF generate"])
    result = {"model_type": info.model_type, "path": info.path, "exact_greedy": exact, "params": n_params,
              "distinct_samples": distinct, "k": k, "new_tokens": new, "clock": args.clock, "methods": {}}
    print(f"{'method':22s} {'median s':>9s} {'CPU s':>8s} {'tokens/s':>10s} {'ratio to (a)':>13s}   ({args.clock} seconds)")
    for name, ts in times.items():
        med, cpu = statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts)
        chosen = (med, cpu)[clock]
        result["methods"][name] = {"median_s": med, "median_cpu_s": cpu, "tokens_per_s": k * new / med,
                                   "ratio_to_a": base / chosen}
        print(f"{name:22s} {med:9.3f} {cpu:8.3f} {k * new / med:10.0f} {base / chosen:13.2f}")
    if args.profile and args.shape:
        for name, fn in methods.items():
            profile_split(lambda: fn(args.profile_tokens), hf.config.vocab_size, f"{name}, {args.profile_tokens} tokens")
    elif args.profile:
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
