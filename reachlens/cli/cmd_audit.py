"""``reachlens audit MODEL --task T ... --out DIR``: realized vs reachable for one model."""

from __future__ import annotations

import argparse
import sys

from reachlens.cli._common import add_model_args, add_protocol_args, add_task_args, echo, protocol_from_args
from reachlens.cli._scale_args import add_scale_args, exec_from_args, source_from_args

NAME = "audit"
HELP = "audit one model: realized (greedy) vs reachable (K samples)"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    add_model_args(p)
    add_task_args(p)
    add_protocol_args(p)
    p.add_argument("--out", required=True, help="audit directory (re-running resumes it)")
    add_scale_args(p)
    return p


BAR_DELAY = 0.5
"""Seconds before the progress bar shows: a refusal before anything decodes prints no bar."""


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from reachlens.cli._common import CLIError
    from reachlens.studies import audit
    from reachlens.tasks import load_task

    if args.backend == "vllm" and args.device != "cpu":
        raise CLIError("--device is the engine's; vLLM places the model itself (drop --device with --backend vllm)")
    task = load_task(args.task, args.data, split=args.split, n=args.n)
    protocol = protocol_from_args(args, task)
    exec_config = exec_from_args(args)
    bar = tqdm(total=len(task), unit="q", desc=f"audit {args.model}", file=sys.stderr, delay=BAR_DELAY)
    try:  # the runner refuses a bad --out, another run in it or a budget that cannot fit before the model loads
        result = audit(source_from_args(args), task, protocol, out=args.out, exec_config=exec_config,
                       progress=lambda done, total: bar.update(done - bar.n))
    finally:
        bar.close()
    backend = "" if args.backend == "engine" else f", backend {args.backend}"
    echo(f"{args.model} on {args.task} (n={result.n}, K={result.k}, T={protocol.temperature}{backend}): "
          f"D={result.D:.3f}  O_{result.k}={result.O_K:.3f}  gap={result.gap:+.3f}   -> {args.out}")
    return 0
