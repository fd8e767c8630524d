"""One hooked experiment written four ways: reachlens, TransformerLens' bridge, HuggingFace hooks and nnsight.

    python benchmarks/bench_peers.py --shape zoo [--n 32] [--rounds 3]
    python benchmarks/bench_peers.py --shape qwen2.5-0.5b [--n 4] [--max-new-tokens 4] [--rounds 0]
    python benchmarks/bench_peers.py --model DIR --device cuda --dtype bfloat16        # on a GPU machine

What a researcher who wants interpretability with generation would write with the tools they already use:

* **(a) the zero-ablation sweep**: every layer x {mlp, attn} zeroed, plus the plain model, each decoding greedy
  answers to ``--n`` arith questions (EOS on, up to ``--max-new-tokens``). reachlens: one ``generate`` whose rows
  carry their condition as an arm (``Row.arm``, the per-arm hooks of
  :func:`~reachlens.interventions.zero_ablation`), so every condition decodes in one batch (chunks of
  ``ExecConfig``'s default ``max_batch_rows``, what the runner decodes with). TransformerLens 4:
  ``with bridge.hooks(fwd_hooks=[("blocks.L.hook_mlp_out", zero)]): bridge.generate(...)``, one call per condition
  over the left-padded questions (``do_sample=False``: the bridge samples by default). HuggingFace:
  ``register_forward_hook`` on ``model.layers[L].mlp`` (or ``.self_attn``) around ``generate``. nnsight:
  ``with lm.generate(...)`` whose body zeroes ``lm.model.layers[L].mlp.output`` at every step
  (``tracer.all()``). The peers run one condition at a time, as their APIs are written for.
* **(b) capture while sampling**: K=``--k`` samples of one prompt at T=0.8 (EOS off, ``--capture-tokens`` tokens)
  with a hook on every layer's ``resid_post`` (the decoder layer's output) that keeps each step's activations
  (a clone, kept to the end). reachlens: the hooks on ``blocks.L.hook_resid_post`` around ``generate`` of K seeded
  rows (with a user hook attached every row keeps its own batch entry, prefill included); **reachlens, shared
  prefixes**: the same hooks with ``share_prefixes=True``, the documented opt-in (``reachlens.engine.hooks``): the
  prompt is prefilled once and samples that agree so far share an entry, and the hook keeps, beside each entry's
  activation, which entry stands for which sample (``current_rows().row_of_entry``); the bridge: the same hooks around
  ``bridge.generate`` of the prompt repeated K times; HF: forward hooks on ``model.layers[L]`` around
  ``generate(num_return_sequences=K)``; nnsight: ``.output`` of every ``lm.model.layers[L]`` saved at each step.

Outputs are checked before any time is printed: (a) every tool's greedy tokens for every (question, condition)
equal (cut at EOS); (b) sample 0's captured activations, concatenated over the prefill and every step, against one
reference computed another way (a plain HF forward of sample 0's tokens, no cache, hooks on the decoder layers):
largest |difference| over largest |value| per layer, under 1e-4 in float32 (the tools' kernels sum in different
orders). In float32 an experiment whose outputs differ gets no time (and the script exits 1). In bfloat16 or
float16 (a GPU's dtype) the tools' rounding parts greedy tokens at near-ties, so the check reports how many pairs
agree and where the first differing one parts, the capture's tolerance is 5e-2, and the times are printed with that
caveat. Tools are the same weights in one process: the bridge's own tensors, HF (and
nnsight, on a second HF module) built on them (``bench_sampling.hf_on_bridge_weights``); prompts tokenized once
(reachlens' encoding: one BOS) and left-padded for the peers, with their attention mask.

Timing: one untimed run of each tool (the checked one), then ``--rounds`` rounds, the tools round-robin in an order
that alternates (``--rounds 0``: the checked run is the timed one, after a warm-up of two conditions or two samples
of two tokens: for a GPU machine's short lease); on a CPU the figure is this process's CPU seconds (``--threads 1`` by default: steady on a shared
host), on CUDA wall seconds between synchronisations. Prints each tool's median and, last, ``ratio: N.NNx``:
the fastest peer's median over reachlens' on the sweep (the capture's ratio the line before, against reachlens'
faster way), with the same ratio within each timed round beside it (the host's drift between rounds shows there;
the quoted ratio stays the medians'). A tool that cannot run here (nnsight not installed) gets a row saying why.

Shapes: ``--shape zoo`` is zoo:base itself (trained: 6 layers, d=128, 26-symbol vocabulary); ``--shape
qwen2.5-0.5b`` (or ``llama3-1b``) a random model of that shape (``bench_sampling.build_shape``: the config class
at those dimensions, the family's real tokenizer from ``../shared/tokenizers``); ``--model DIR`` any HF folder
(``benchmarks/gpu/run.sh`` passes the Qwen2.5-0.5B-shaped folder ``bench_gpu.py`` builds, whose tokenizer needs
nothing from ``../shared``).
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sampling import SHAPES, build_shape, hf_on_bridge_weights  # noqa: E402

TEMP = 0.8
COMPONENTS = ("mlp", "attn")
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 5e-2}
"""Largest |difference| / largest |value| of a layer's captured activations allowed against the reference."""


@dataclass
class Setup:
    """The model as each tool sees it, and the questions."""

    bridge: object
    hf: object
    """A plain HF model on the bridge's weight tensors (the HF-hooks peer; nnsight wraps another one)."""
    folder: str
    tok: object
    prompts: list[str]
    ids: torch.Tensor
    """The questions' tokens, left-padded (``pad``), and their attention mask."""
    mask: torch.Tensor
    eos: int
    pad: int
    device: torch.device
    dtype: torch.dtype
    n_layers: int
    nnsight: object | None = None
    nnsight_why: str = ""
    notes: dict = field(default_factory=dict)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def left_pad(rows: list[list[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists as one left-padded tensor and its 0/1 attention mask."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
    return ids, mask


def load(args) -> Setup:
    from reachlens.engine import tokenize_prompts, tokenizer_of
    from reachlens.models import load_model
    from reachlens.tasks import load_task

    folder = args.model or ("reachlens/assets/zoo/base" if args.shape == "zoo" else build_shape(args.shape))
    dtype = getattr(torch, args.dtype)
    bridge = load_model(folder, device=args.device, dtype=dtype)
    hf = hf_on_bridge_weights(bridge, folder).to(args.device)
    tok = tokenizer_of(bridge)
    task = load_task("arith", n=args.n)
    prompts = [task.format("qa").render(q) for q in task.questions]
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    ids, mask = left_pad(tokenize_prompts(tok, prompts), pad, args.device)
    s = Setup(bridge, hf, folder, tok, prompts, ids, mask, int(tok.eos_token_id), int(pad),
              torch.device(args.device), dtype, len(bridge.blocks))
    try:
        from nnsight import LanguageModel
    except ImportError as err:
        s.nnsight_why = (f"nnsight is not installed here ({err}): pip install 'reachlens[peers]' (on a GPU machine: "
                         "benchmarks/gpu/kit.sh carries its wheels only where they fit the call's 64 MiB)")
    else:
        with warnings.catch_warnings():  # LanguageModel is deprecated in favour of TransformersModel: same thing
            warnings.simplefilter("ignore")
            s.nnsight = LanguageModel(hf_on_bridge_weights(bridge, folder).to(args.device), tokenizer=tok)
    if args.model is None and args.shape != "zoo":  # the random model is loaded: its folder (2 GB at 0.5B) goes
        shutil.rmtree(Path(folder).parent, ignore_errors=True)
    return s


# --- (a) the zero-ablation sweep ----------------------------------------------------------------------------------
Condition = tuple[int, str] | None
Answers = dict[tuple[int, Condition], tuple[int, ...]]
"""Per (question, condition), the greedy tokens before the first EOS."""


def conditions(n_layers: int) -> list[Condition]:
    return [None] + [(layer, comp) for layer in range(n_layers) for comp in COMPONENTS]


def cut(tokens, eos: int) -> tuple[int, ...]:
    tokens = [int(t) for t in tokens]
    return tuple(tokens[: tokens.index(eos)] if eos in tokens else tokens)


def sweep_reachlens(s: Setup, conds: list[Condition], new: int) -> Answers:
    from reachlens.engine import Row, generate
    from reachlens.execution import ExecConfig
    from reachlens.interventions import zero_ablation
    from reachlens.protocol import Protocol

    hooks = [h for c in conds if c is not None for h in zero_ablation(s.bridge, *c, arm=c)]
    rows = [Row(q, arm=c) for q in range(len(s.prompts)) for c in conds]
    protocol = Protocol("arith", k=1, temperature=0.0, max_new_tokens=new)  # no stop strings: EOS only
    with s.bridge.hooks(fwd_hooks=hooks):
        outs = generate(s.bridge, s.prompts, rows, protocol, max_batch_rows=ExecConfig().max_batch_rows)
    return {(r.prompt, r.arm): cut(o.token_ids, s.eos) for r, o in zip(rows, outs)}


def _zero(x, *, hook):
    return torch.zeros_like(x)


def sweep_bridge(s: Setup, conds: list[Condition], new: int) -> Answers:
    out: Answers = {}
    width = s.ids.shape[1]
    for c in conds:
        hooks = [] if c is None else [(f"blocks.{c[0]}.hook_{c[1]}_out", _zero)]
        with s.bridge.hooks(fwd_hooks=hooks), torch.inference_mode():
            toks = s.bridge.generate(s.ids, attention_mask=s.mask, max_new_tokens=new, do_sample=False,
                                     stop_at_eos=True, eos_token_id=s.eos, verbose=False, return_type="tokens")
        out.update({(q, c): cut(toks[q, width:], s.eos) for q in range(len(s.prompts))})
    return out


def _zero_output(module, args, output):
    """A forward hook that zeroes a module's output (an attention's is ``(output, weights)``)."""
    if isinstance(output, tuple):
        return (torch.zeros_like(output[0]), *output[1:])
    return torch.zeros_like(output)


def _hf_site(layers, c: tuple[int, str]):
    return layers[c[0]].mlp if c[1] == "mlp" else layers[c[0]].self_attn


def sweep_hf(s: Setup, conds: list[Condition], new: int) -> Answers:
    out: Answers = {}
    width = s.ids.shape[1]
    for c in conds:
        handle = None if c is None else _hf_site(s.hf.model.layers, c).register_forward_hook(_zero_output)
        try:
            with torch.inference_mode():
                toks = s.hf.generate(s.ids, attention_mask=s.mask, max_new_tokens=new, do_sample=False,
                                     eos_token_id=s.eos, pad_token_id=s.pad)
        finally:
            if handle is not None:
                handle.remove()
        out.update({(q, c): cut(toks[q, width:], s.eos) for q in range(len(s.prompts))})
    return out


def sweep_nnsight(s: Setup, conds: list[Condition], new: int) -> Answers:
    lm, out = s.nnsight, {}
    width = s.ids.shape[1]
    for c in conds:
        with warnings.catch_warnings():  # an open tracer.all() loop ends at the last step "by design", with a warning
            warnings.simplefilter("ignore")
            with lm.generate(max_new_tokens=new, do_sample=False, eos_token_id=s.eos, pad_token_id=s.pad) as tracer:
                with tracer.invoke({"input_ids": s.ids, "attention_mask": s.mask}):
                    if c is not None:
                        for _ in tracer.all():
                            site = _hf_site(lm.model.layers, c)
                            site.output = _zero_output(None, None, site.output)
                with tracer.invoke():
                    toks = tracer.result.save()
        out.update({(q, c): cut(toks[q, width:], s.eos) for q in range(len(s.prompts))})
    return out


# --- (b) capture on every layer while sampling --------------------------------------------------------------------
@dataclass
class Capture:
    """Sample 0's generated tokens, and every layer's kept activations (per forward, all K rows)."""

    tokens: list[int]
    kept: dict[int, list[torch.Tensor]]
    entry: list[int] | None = None
    """Per forward, the batch entry that holds sample 0 (None: entry 0 in every forward)."""

    def sample0(self, layer: int) -> torch.Tensor:
        """Layer ``layer``'s activations of sample 0 over the prompt and every step, ``[positions, d_model]``."""
        entries = self.entry or [0] * len(self.kept[layer])
        return torch.cat([x[e] for x, e in zip(self.kept[layer], entries)], dim=0).float()


def _keeper(kept: dict[int, list[torch.Tensor]], layer: int):
    def keep(x, *, hook=None):
        kept[layer].append(x.detach().clone())

    return keep


def capture_reachlens(s: Setup, k: int, new: int) -> Capture:
    from reachlens.engine import Row, generate
    from reachlens.protocol import Protocol

    kept = {layer: [] for layer in range(s.n_layers)}
    hooks = [(f"blocks.{layer}.hook_resid_post", _keeper(kept, layer)) for layer in range(s.n_layers)]
    protocol = Protocol("arith", k=k, temperature=TEMP, max_new_tokens=new)
    with s.bridge.hooks(fwd_hooks=hooks):
        outs = generate(s.bridge, s.prompts[:1], [Row(0, seed=i) for i in range(k)], protocol, stop_at_eos=False,
                        max_batch_rows=k)
    return Capture(list(outs[0].token_ids), kept)


def capture_reachlens_shared(s: Setup, k: int, new: int) -> Capture:
    """The same hooks, opting in to prefix sharing (``share_prefixes=True``): the prompt is prefilled once and
    samples that agree so far share an entry; the hooks keep each entry's activation, and which entry stands for
    which sample in each forward (:func:`~reachlens.engine.current_rows`), as reachlens' hooks module documents."""
    from reachlens.engine import Row, current_rows, generate
    from reachlens.protocol import Protocol

    kept, where = {layer: [] for layer in range(s.n_layers)}, []

    def keep_where(x, *, hook=None):
        where.append(current_rows().row_of_entry.clone())  # per sample, its entry in this forward
        kept[0].append(x.detach().clone())

    hooks = [(f"blocks.{layer}.hook_resid_post", keep_where if layer == 0 else _keeper(kept, layer))
             for layer in range(s.n_layers)]
    protocol = Protocol("arith", k=k, temperature=TEMP, max_new_tokens=new)
    with s.bridge.hooks(fwd_hooks=hooks):
        outs = generate(s.bridge, s.prompts[:1], [Row(0, seed=i) for i in range(k)], protocol, stop_at_eos=False,
                        max_batch_rows=k, share_prefixes=True)
    return Capture(list(outs[0].token_ids), kept, [int(w[0]) for w in where])


def capture_bridge(s: Setup, k: int, new: int) -> Capture:
    kept = {layer: [] for layer in range(s.n_layers)}
    hooks = [(f"blocks.{layer}.hook_resid_post", _keeper(kept, layer)) for layer in range(s.n_layers)]
    prompt = s.ids[:1, s.mask[0].bool()]
    with s.bridge.hooks(fwd_hooks=hooks), torch.inference_mode():
        toks = s.bridge.generate(prompt.repeat(k, 1), max_new_tokens=new, do_sample=True, temperature=TEMP,
                                 stop_at_eos=False, verbose=False, return_type="tokens")
    return Capture(toks[0, prompt.shape[1]:].tolist(), kept)


def capture_hf(s: Setup, k: int, new: int) -> Capture:
    kept = {layer: [] for layer in range(s.n_layers)}
    handles = [layer.register_forward_hook(lambda m, a, o, keep=_keeper(kept, i): keep(o))
               for i, layer in enumerate(s.hf.model.layers)]
    prompt = s.ids[:1, s.mask[0].bool()]
    try:
        with torch.inference_mode():
            toks = s.hf.generate(prompt, do_sample=True, temperature=TEMP, top_k=0, max_new_tokens=new,
                                 min_new_tokens=new, num_return_sequences=k, pad_token_id=s.pad)
    finally:
        for h in handles:
            h.remove()
    return Capture(toks[0, prompt.shape[1]:].tolist(), kept)


def capture_nnsight(s: Setup, k: int, new: int) -> Capture:
    lm = s.nnsight
    kept = {layer: [] for layer in range(s.n_layers)}
    prompt = s.ids[:1, s.mask[0].bool()].repeat(k, 1)
    with lm.generate(max_new_tokens=new, min_new_tokens=new, do_sample=True, temperature=TEMP, top_k=0,
                     pad_token_id=s.pad) as tracer:
        with tracer.invoke({"input_ids": prompt, "attention_mask": torch.ones_like(prompt)}):
            for _ in tracer.iter[:new]:  # the prefill and new - 1 decoding forwards
                for layer in range(s.n_layers):
                    kept[layer].append(lm.model.layers[layer].output.detach().clone())
        with tracer.invoke():
            toks = tracer.result.save()
    return Capture(toks[0, prompt.shape[1]:].tolist(), kept)


def reference(s: Setup, tokens: list[int]) -> dict[int, torch.Tensor]:
    """Every decoder layer's output over the prompt and ``tokens`` (but the last), one HF forward without a cache."""
    kept = {layer: [] for layer in range(s.n_layers)}
    handles = [layer.register_forward_hook(lambda m, a, o, keep=_keeper(kept, i): keep(o))
               for i, layer in enumerate(s.hf.model.layers)]
    prompt = s.ids[0, s.mask[0].bool()].tolist()
    try:
        with torch.inference_mode():
            s.hf(torch.tensor([prompt + tokens[:-1]], device=s.device), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return {layer: xs[0][0].float() for layer, xs in kept.items()}


def capture_error(s: Setup, cap: Capture) -> float:
    """The largest, over layers, of sample 0's |captured - reference| / max |reference|."""
    ref = reference(s, cap.tokens)
    worst = 0.0
    for layer, want in ref.items():
        got = cap.sample0(layer)
        if got.shape != want.shape:
            raise SystemExit(f"layer {layer}: captured {tuple(got.shape)} positions, the reference has "
                             f"{tuple(want.shape)}")
        worst = max(worst, float((got - want).abs().max() / want.abs().max()))
    return worst


# --- running and timing -------------------------------------------------------------------------------------------
TOOLS = ("reachlens", "reachlens, shared prefixes", "TransformerLens bridge", "HF hooks", "nnsight")


def tools_for(s: Setup, experiment: str) -> dict[str, Callable | None]:
    fns = {"sweep": (sweep_reachlens, None, sweep_bridge, sweep_hf, sweep_nnsight),
           "capture": (capture_reachlens, capture_reachlens_shared, capture_bridge, capture_hf,
                       capture_nnsight)}[experiment]
    return {name: (fn if name != "nnsight" or s.nnsight is not None else None) for name, fn in zip(TOOLS, fns)
            if fn is not None or name == "nnsight"}


def timed(s: Setup, fn: Callable) -> tuple[object, float, float]:
    """``fn()``'s result, wall seconds and this process's CPU seconds (synchronised on CUDA)."""
    s.sync()
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    s.sync()
    return out, time.perf_counter() - t0, time.process_time() - c0


def race(s: Setup, ways: dict[str, Callable], rounds: int) -> dict[str, list[tuple[float, float]]]:
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    for r in range(rounds):
        for name in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
            _, wall, cpu = timed(s, ways[name])
            times[name].append((wall, cpu))
            print(f"    round {r + 1}: {name:28s} wall {wall:8.2f} s   CPU {cpu:8.2f} s", flush=True)
    return times


def check_sweep(s: Setup, results: dict[str, Answers]) -> bool:
    """Every tool's greedy tokens against the first's: equal for every (question, condition)?"""
    ref_name, ref = next(iter(results.items()))
    ok = True
    for name, got in list(results.items())[1:]:
        differ = [key for key in ref if got.get(key) != ref[key]]
        print(f"  {name:28s} greedy tokens equal to {ref_name}'s on {len(ref) - len(differ)} of {len(ref)} "
              f"(question, condition) pairs")
        if differ:
            ok = False
            q, c = differ[0]
            a, b = got[(q, c)], ref[(q, c)]
            at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            print(f"    e.g. question {q} under {c}: they part at token {at}: {s.tok.decode(a)!r} vs {s.tok.decode(b)!r}")
    return ok


def check_capture(s: Setup, results: dict[str, Capture]) -> bool:
    """Sample 0's captured activations of every tool against one reference computed another way."""
    tol, ok = TOLERANCE[s.dtype], True
    for name, cap in results.items():
        err = capture_error(s, cap)
        print(f"  {name:28s} sample 0 vs a no-cache HF forward of its tokens: largest relative difference "
              f"{err:.2e} over {s.n_layers} layers x {cap.sample0(0).shape[0]} positions ({len(cap.kept[0])} forwards)")
        ok = ok and err <= tol
    return ok


def calls(s: Setup, which: str, args, small: bool = False) -> dict[str, Callable]:
    """Each tool's run of experiment ``which`` (``small``: a warm-up of two conditions / two samples, 2 tokens)."""
    tools = {name: fn for name, fn in tools_for(s, which).items() if fn is not None}
    if which == "sweep":
        conds = conditions(s.n_layers)[: 2 if small else None]
        return {name: functools.partial(fn, s, conds, 2 if small else args.max_new_tokens) for name, fn in tools.items()}
    return {name: functools.partial(fn, s, 2 if small else args.k, 2 if small else args.capture_tokens)
            for name, fn in tools.items()}


def experiment(s: Setup, which: str, args) -> dict:
    """Run each tool once (checked), then the timed rounds (``--rounds 0``: the checked run is the timed one, after a
    small warm-up); return the medians, or None for them where the outputs were not all equal."""
    if which == "sweep":
        print(f"(a) sweep: {len(conditions(s.n_layers))} conditions ({s.n_layers} layers x {COMPONENTS} + plain) x "
              f"{len(s.prompts)} questions, greedy <= {args.max_new_tokens} tokens, EOS on")
    else:
        print(f"(b) capture: K={args.k} samples x {args.capture_tokens} tokens at T={TEMP} of one prompt, "
              f"every layer's resid_post kept")
    if args.rounds == 0:
        for fn in calls(s, which, args, small=True).values():
            fn()
    first, times = {}, {}
    for name, fn in calls(s, which, args).items():
        first[name], wall, cpu = timed(s, fn)
        times[name] = [(wall, cpu)]
        print(f"  checked run: {name:28s} wall {wall:8.2f} s   CPU {cpu:8.2f} s", flush=True)
    equal = (check_sweep if which == "sweep" else check_capture)(s, first)
    del first
    res = {"clock": "wall" if s.device.type == "cuda" else "cpu", "equal": equal,
           "missing": {name: s.nnsight_why for name in TOOLS if name == "nnsight" and s.nnsight is None}}
    strict = s.dtype == torch.float32
    if not equal and strict:
        print(f"  {which}: outputs differ in float32: no time is quoted")
        return {**res, "medians": None}
    if not equal:
        print(f"  {which}: outputs not all equal in {str(s.dtype)[6:]} (its rounding parts greedy tokens at near-ties; "
              "float32 is the strict check): times quoted with that caveat")
    if args.rounds:
        times = race(s, calls(s, which, args), args.rounds)
    clock = 0 if s.device.type == "cuda" else 1
    return {**res, "medians": {name: statistics.median(t[clock] for t in ts) for name, ts in times.items()},
            "rounds": {name: [t[clock] for t in ts] for name, ts in times.items()}}


def report(which: str, res: dict) -> float | None:
    """Each tool's median; returns the fastest peer's over reachlens' fastest way (None: no time quoted)."""
    med = res["medians"]
    if med is None:
        return None
    ours = {name: t for name, t in med.items() if name.startswith("reachlens")}
    peers = {name: t for name, t in med.items() if name not in ours}
    best, fastest = min(ours, key=ours.get), min(peers, key=peers.get)
    print(f"{which} ({res['clock']} seconds, median; each over {best}'s):")
    for name in TOOLS:
        if name in med:
            print(f"  {name:28s} {med[name]:9.2f} s   {med[name] / med[best]:6.2f}x")
        elif name in res["missing"]:
            print(f"  {name:28s} not run: {res['missing'][name]}")
    print(f"  {which}: {fastest} (the fastest peer) over {best}: {peers[fastest] / ours[best]:.2f}x")
    rounds = res["rounds"]
    if len(rounds[best]) > 1:  # the ratio of each round's two times: how far the host's drift moves it
        print(f"  {which}: the same within each round: "
              + ", ".join(f"{p / o:.2f}x" for p, o in zip(rounds[fastest], rounds[best])))
    return peers[fastest] / ours[best]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=("zoo", *sorted(SHAPES)), default="zoo")
    ap.add_argument("--model", default=None, help="an HF folder instead of --shape")
    ap.add_argument("--n", type=int, default=None, help="questions of the sweep (default 32 at zoo, 4 otherwise)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="sweep (default 96 at zoo, 4 otherwise)")
    ap.add_argument("--k", type=int, default=64, help="samples of the capture")
    ap.add_argument("--capture-tokens", type=int, default=None, help="capture (default 32 at zoo, 4 otherwise)")
    ap.add_argument("--experiment", choices=("both", "sweep", "capture"), default="both")
    ap.add_argument("--rounds", type=int, default=None,
                    help="timed rounds after the checked run (default 3 at zoo, 0 otherwise: the checked run is timed)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads on a CPU")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    small = args.shape == "zoo" and args.model is None
    args.n = args.n or (32 if small else 4)
    args.max_new_tokens = args.max_new_tokens or (96 if small else 4)
    args.capture_tokens = args.capture_tokens or (32 if small else 4)
    args.rounds = (3 if small else 0) if args.rounds is None else args.rounds
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: --device cuda runs on a GPU machine")
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    s = load(args)
    print(f"{args.model or args.shape}: {s.n_layers} layers, {sum(p.numel() for p in s.hf.parameters()):,} parameters, "
          f"{args.device} {args.dtype}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    out = {"shape": args.model or args.shape, "device": args.device, "dtype": args.dtype, "n": args.n}
    ratios = {}
    for which in (("capture", "sweep") if args.experiment == "both" else (args.experiment,)):
        out[which] = experiment(s, which, args)
        ratios[which] = report(which, out[which])
    if args.json:
        Path(args.json).write_text(json.dumps({**out, "ratios": ratios}, indent=2, default=str))
    for which, r in ratios.items():
        print(f"{which} ratio: " + ("not quoted (outputs differ)" if r is None else f"{r:.2f}x"))
    last = ratios["sweep" if "sweep" in ratios else "capture"]
    if last is None:
        raise SystemExit(1)
    print(f"ratio: {last:.2f}x")


if __name__ == "__main__":
    main()
