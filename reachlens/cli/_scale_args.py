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
                       help="processes decoding side by side, one model replica and one torch thread each (with "
                            "--ray: Ray actors, default 2; without: default 1, this process)")
    p.add_argument("--gpus-per-worker", type=float, default=0.0, metavar="G",
                   help="with --ray: GPUs each actor reserves (default 0: CPU)")


def exec_from_args(args: argparse.Namespace):
    """The :class:`~reachlens.execution.ExecConfig` the flags give (batch rows, device, dtype, device map, and who
    decodes: ``--workers`` processes, or Ray actors with ``--ray``)."""
    from reachlens.cli._common import CLIError
    from reachlens.execution import ExecConfig

    ray = getattr(args, "ray", None)
    if getattr(args, "gpus_per_worker", 0.0) and ray is None:
        raise CLIError("--gpus-per-worker goes with --ray (add --ray to use a Ray cluster)")
    workers = getattr(args, "workers", None) or (2 if ray is not None else 1)
    return ExecConfig(max_batch_rows=args.max_batch_rows, device=args.device, dtype=args.dtype,
                      device_map=getattr(args, "device_map", None), workers=workers, ray=ray,
                      gpus_per_worker=getattr(args, "gpus_per_worker", 0.0))


def source_from_args(args: argparse.Namespace):
    """The :class:`~reachlens.models.ModelSource` the flags name (what each worker loads)."""
    from reachlens.models import ModelSource

    return ModelSource(args.model, backend=getattr(args, "backend", "engine"), device=args.device, dtype=args.dtype,
                       device_map=getattr(args, "device_map", None),
                       trust_remote_code=getattr(args, "trust_remote_code", False))
