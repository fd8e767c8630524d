"""The flags that take a command past one process: ``--backend``, ``--device-map``, ``--ray``, ``--workers``."""

from __future__ import annotations

import argparse

from reachlens.cli._common import positive_int


def add_scale_args(p: argparse.ArgumentParser, *, backend: bool = True, workers: bool = True) -> None:
    """``--ray``, ``--gpus-per-worker``; ``--workers`` unless the command has its own; ``--backend`` and
    ``--device-map`` unless the command loads several models its own way."""
    if backend:
        p.add_argument("--backend", default="engine", choices=("engine", "vllm"),
                       help="who draws the completions: reachlens' engine (hooks live) or vLLM (no hooks; see "
                            "docs/scale.md for its install); part of the run's identity")
        p.add_argument("--device-map", default=None, metavar="MAP",
                       help="spread a model larger than one GPU over several (HuggingFace device_map, e.g. auto); "
                            "replaces --device")
    p.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="send the question slices to Ray actors: a cluster's address (HOST:PORT, auto), or none "
                        "to start a local cluster (needs reachlens[ray])")
    if workers:
        p.add_argument("--workers", type=positive_int("--workers"), default=None,
                       help="with --ray: actors, each holding one model replica (default 2)")
    p.add_argument("--gpus-per-worker", type=float, default=0.0, metavar="G",
                   help="with --ray: GPUs each actor reserves (default 0: CPU)")


def exec_from_args(args: argparse.Namespace):
    """The :class:`~reachlens.execution.ExecConfig` the flags give (batch rows, device, dtype, device map)."""
    from reachlens.execution import ExecConfig

    return ExecConfig(max_batch_rows=args.max_batch_rows, device=args.device, dtype=args.dtype,
                      device_map=getattr(args, "device_map", None))


def source_from_args(args: argparse.Namespace):
    """The :class:`~reachlens.models.ModelSource` the flags name (what each worker loads)."""
    from reachlens.models import ModelSource

    return ModelSource(args.model, backend=getattr(args, "backend", "engine"), device=args.device, dtype=args.dtype,
                       device_map=getattr(args, "device_map", None),
                       trust_remote_code=getattr(args, "trust_remote_code", False))


def executor_from_args(args: argparse.Namespace):
    """A :class:`~reachlens.runner.RayExecutor` for ``--ray``; None without it (one process)."""
    from reachlens.cli._common import CLIError

    if args.ray is None:
        if args.gpus_per_worker:
            raise CLIError("--gpus-per-worker goes with --ray (add --ray to use a Ray cluster)")
        return None
    from reachlens.runner import RayExecutor

    if args.gpus_per_worker < 0:
        raise CLIError(f"--gpus-per-worker {args.gpus_per_worker!r} must be >= 0")
    return RayExecutor(None if args.ray == "local" else args.ray, workers=args.workers or 2,
                       gpus_per_worker=args.gpus_per_worker)
