"""``reachlens audit MODEL --task T ... --out DIR``: realized vs reachable for one model."""

from __future__ import annotations

import argparse

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
    from reachlens.cli._common import CLIError
    from reachlens.cli._progress import RunProgress
    from reachlens.cli.cmd_show import reach_lines
    from reachlens.store import PartsDir
    from reachlens.studies import audit
    from reachlens.tasks import load_task

    if args.backend == "vllm" and args.device != "cpu":
        raise CLIError("--device is the engine's; vLLM places the model itself (drop --device with --backend vllm)")
    task = load_task(args.task, args.data, split=args.split, n=args.n)
    protocol = protocol_from_args(args, task)
    exec_config = exec_from_args(args)
    # the runner refuses a bad --out, another run in it or a budget that cannot fit before the model loads
    with RunProgress(f"audit {args.model}", "q", delay=BAR_DELAY) as bar:
        result = audit(source_from_args(args), task, protocol, out=args.out, exec_config=exec_config,
                       progress=bar.done)
    backend = "" if args.backend == "engine" else f", backend {args.backend}"
    echo(f"{args.model} on {args.task} (n={result.n}, K={result.k}, T={protocol.temperature}{backend}): "
          f"D={result.D:.3f}  O_{result.k}={result.O_K:.3f}  gap={result.gap:+.3f}   -> {args.out}")
    for line in reach_lines(PartsDir(args.out).summary() or {}):  # the null, and the verified reach when traced
        echo(line)
    return 0
