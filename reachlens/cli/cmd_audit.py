"""``reachlens audit MODEL --task T ... --out DIR``: realized vs reachable for one model."""

from __future__ import annotations

import argparse
import sys

from reachlens.cli._common import (
    add_model_args,
    add_protocol_args,
    add_task_args,
    echo,
    load_model_from_args,
    positive_int,
    protocol_from_args,
)
from reachlens.cli._scale_args import add_scale_args, exec_from_args, executor_from_args, source_from_args

NAME = "audit"
HELP = "audit one model: realized (greedy) vs reachable (K samples)"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    add_model_args(p)
    add_task_args(p)
    add_protocol_args(p)
    p.add_argument("--max-batch-rows", type=positive_int("--max-batch-rows"), default=1024,
                   help="most completions decoded together (memory bound; rows sharing a prefix share compute)")
    p.add_argument("--out", required=True, help="audit directory (re-running resumes it)")
    add_scale_args(p)
    return p


def run(args: argparse.Namespace) -> int:
    import dataclasses
    import warnings

    from tqdm import tqdm

    from reachlens.cli._common import CLIError
    from reachlens.errors import ReachlensWarning
    from reachlens.execution import model_exec
    from reachlens.models import model_identity
    from reachlens.runner import check_budget, check_context
    from reachlens.store import AuditDir, RunRecord
    from reachlens.studies import audit
    from reachlens.tasks import load_task

    task = load_task(args.task, args.data, split=args.split, n=args.n)
    protocol = protocol_from_args(args, task)
    exec_config = exec_from_args(args)
    check_budget(protocol, exec_config.max_batch_rows)
    # Refuse a bad --out (a file, a folder of other files, another run) before the model loads.
    store = AuditDir(args.out)
    store.check_target()
    with warnings.catch_warnings():  # its notes come once, from the audit itself
        warnings.simplefilter("ignore", ReachlensWarning)
        ident = model_identity(args.model, trust_remote_code=args.trust_remote_code)
        store.check_run(RunRecord.new("audit", protocol, dataclasses.asdict(ident), task.data_identity,
                                      exec=exec_config.recorded(model_exec(source_from_args(args)))))
    if args.backend == "vllm" and args.device != "cpu":
        raise CLIError("--device is the engine's; vLLM places the model itself (drop --device with --backend vllm)")
    if args.workers is not None and args.ray is None:
        raise CLIError("--workers goes with --ray (add --ray to use a Ray cluster)")
    executor = executor_from_args(args)
    if executor is not None:  # every Ray actor loads its own replica; this process only writes the directory
        model = source_from_args(args)
    elif args.backend == "engine" and args.device_map is None:
        model = load_model_from_args(args)
    else:
        model = source_from_args(args).load()
    if executor is None:
        check_context(model, task, protocol)
    bar = tqdm(total=len(task), unit="q", desc=f"audit {args.model}", file=sys.stderr)
    try:
        result = audit(model, task, protocol, out=args.out, exec_config=exec_config,
                       progress=lambda done: bar.update(done - bar.n), executor=executor)
    finally:
        bar.close()
        if executor is not None:
            executor.close()
    backend = "" if args.backend == "engine" else f", backend {args.backend}"
    echo(f"{args.model} on {args.task} (n={result.n}, K={result.k}, T={protocol.temperature}{backend}): "
          f"D={result.D:.3f}  O_{result.k}={result.O_K:.3f}  gap={result.gap:+.3f}   -> {args.out}")
    return 0
