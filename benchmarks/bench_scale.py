"""Past one process: the same audit single-process vs Ray workers, and vLLM vs the engine vs HF tokens/s.

    python benchmarks/bench_scale.py [--model zoo:base] [--n 24] [--k 64] [--workers 2] [--skip-ray] [--skip-vllm]

Part 1 (Ray): one audit (``--n`` arith questions, K=``--k``) run twice from an empty directory, once
in this process and once on a local Ray cluster with ``--workers`` actors (``RayExecutor``); prints
both wall times, their ratio, and whether the tables are equal (they must be). The Ray time includes
the actors' start-up and model loads, as a user's run does; the cluster's own start-up is reported apart.

Part 2 (throughput): K samples of each of the first ``--prompts`` questions (T=0.8, ``--max-new-tokens``,
EOS on, no stop strings) by HuggingFace ``generate(do_sample=True, num_return_sequences=K)``, by
reachlens' engine (``generate``) and by vLLM (``VLLMModel.generate_rows``, one seeded request per
sample); generated tokens per second, the median of ``--rounds`` rounds run round-robin after one
warm-up each, and each method's ratio to the engine measured in this run.

Ray and vLLM start servers: run this in a loopback-only network namespace with scratch folders
(what the tests do; ../shared/notes/scale-out.md):

    export RAY_TMPDIR=$(mktemp -d) HOME=$(mktemp -d) RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 \\
           VLLM_HOST_IP=127.0.0.1 VLLM_NO_USAGE_STATS=1 REACHLENS_VLLM_PYTHON=.venv-vllm/bin/python
    unshare -n sh -c 'ip link set lo up && exec .venv/bin/python benchmarks/bench_scale.py'

On a GPU machine (vLLM installed with ``pip install 'reachlens[vllm]'``):

    python benchmarks/bench_scale.py --model Qwen/Qwen2.5-0.5B --device cuda --dtype bfloat16 \\
        --task gsm8k --data test.jsonl --k 200 --max-new-tokens 256 --skip-ray
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch


def ray_vs_single(args) -> dict:
    import pandas as pd

    import reachlens
    from reachlens import Protocol
    from reachlens.runner import RayExecutor

    task = reachlens.load_task(args.task, args.data, n=args.n)
    protocol = Protocol(args.task, k=args.k, max_new_tokens=args.max_new_tokens)
    root = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    t0 = time.perf_counter()
    model = reachlens.load_model(args.model, device=args.device, dtype=getattr(torch, args.dtype))
    single = reachlens.audit(model, task, protocol, out=root / "single",
                             exec_config=reachlens.ExecConfig(max_batch_rows=args.max_batch_rows))
    t_single = time.perf_counter() - t0
    del model
    import ray

    t0 = time.perf_counter()
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    t_cluster = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        with RayExecutor(workers=args.workers) as executor:
            on_ray = reachlens.audit(args.model, task, protocol, out=root / "ray",
                                     exec_config=reachlens.ExecConfig(max_batch_rows=args.max_batch_rows),
                                     executor=executor)
        t_ray = time.perf_counter() - t0
    finally:
        ray.shutdown()
    equal = single.samples.equals(on_ray.samples) and single.questions.equals(on_ray.questions)
    pd.testing.assert_frame_equal(single.samples, on_ray.samples)
    return {"n": args.n, "k": args.k, "single_s": t_single, "ray_s": t_ray, "ray_cluster_start_s": t_cluster,
            "workers": args.workers, "ratio_single_over_ray": t_single / t_ray, "tables_equal": equal}


def throughput(args) -> dict:
    from transformers import AutoModelForCausalLM

    import reachlens
    from reachlens import Protocol
    from reachlens.engine import Row, generate, row_seed
    from reachlens.models import load_vllm
    from reachlens.engine.tokens import encode_prompts
    from reachlens.models.loading import resolve_spec

    task = reachlens.load_task(args.task, args.data, n=args.prompts)
    fmt = task.format(task.default_format)
    prompts = [fmt.render(q) for q in task.questions]
    qids = [q.question_id for q in task.questions]
    params = Protocol(args.task, k=args.k, temperature=0.8, max_new_tokens=args.max_new_tokens, stop=())
    rows = [Row(i, row_seed(0, q, j)) for i, q in enumerate(qids) for j in range(args.k)]
    dtype = getattr(torch, args.dtype)
    engine = reachlens.load_model(args.model, device=args.device, dtype=dtype)
    target, _ = resolve_spec(args.model)
    hf = AutoModelForCausalLM.from_pretrained(target, use_safetensors=True, dtype=dtype).to(args.device).eval()
    tok = engine.tokenizer
    ids = encode_prompts(tok, prompts)

    def run_engine() -> int:
        return sum(len(c.token_ids) for c in generate(engine, prompts, rows, params, max_batch_rows=args.max_batch_rows))

    @torch.inference_mode()
    def run_hf() -> int:
        n = 0
        for p in ids:
            x = torch.tensor([p], device=args.device)
            out = hf.generate(x, do_sample=True, temperature=0.8, top_p=1.0, top_k=0, max_new_tokens=args.max_new_tokens,
                              num_return_sequences=args.k, pad_token_id=tok.pad_token_id or tok.eos_token_id)
            new = out[:, x.shape[1]:]
            eos = tok.eos_token_id
            for row in new.tolist():  # tokens up to and including the first EOS, as the others count
                n += row.index(eos) + 1 if eos in row else len(row)
        return n

    methods = {"hf": run_hf, "engine": run_engine}
    vllm = None
    if not args.skip_vllm:
        vllm = load_vllm(args.model, dtype=args.dtype)

        def run_vllm() -> int:
            return sum(len(c.token_ids) for c in vllm.generate_rows(prompts, rows, params))

        methods["vllm"] = run_vllm
    for fn in methods.values():  # warm-up (vLLM's first batch also builds its kernels)
        fn()
    speeds: dict[str, list[float]] = {m: [] for m in methods}
    for _ in range(args.rounds):
        for name, fn in methods.items():
            t0 = time.perf_counter()
            n = fn()
            speeds[name].append(n / (time.perf_counter() - t0))
    if vllm is not None:
        vllm.close()
    med = {m: statistics.median(v) for m, v in speeds.items()}
    return {"tokens_per_s": med, "ratio_to_engine": {m: med[m] / med["engine"] for m in med},
            "prompts": args.prompts, "k": args.k, "max_new_tokens": args.max_new_tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="zoo:base")
    ap.add_argument("--task", default="arith")
    ap.add_argument("--data", default=None)
    ap.add_argument("--n", type=int, default=24, help="questions of the Ray comparison")
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=4, help="questions of the throughput comparison")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--max-batch-rows", type=int, default=4 * 65)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--skip-vllm", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    result = {}
    if not args.skip_ray:
        r = result["ray"] = ray_vs_single(args)
        print(f"audit n={r['n']} K={r['k']}: one process {r['single_s']:.1f} s, Ray {r['workers']} workers "
              f"{r['ray_s']:.1f} s (+ cluster start {r['ray_cluster_start_s']:.1f} s): "
              f"ratio {r['ratio_single_over_ray']:.2f}x, tables equal: {r['tables_equal']}")
    t = result["throughput"] = throughput(args)
    for m, v in t["tokens_per_s"].items():
        print(f"{m:>7s}: {v:,.0f} tokens/s  ({t['ratio_to_engine'][m]:.2f}x the engine)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
