"""The execution flags of a command whose study decodes on the runner, and the objects they make."""

from __future__ import annotations

import argparse

from reachlens.cli.flags import BackendFlags, ExecutionFlags, add_flags


def add_scale_args(p: argparse.ArgumentParser, *, backend: bool = True) -> None:
    """The execution group of the flag table (:class:`~reachlens.cli.flags.ExecutionFlags`: ``--max-batch-rows``,
    ``--workers``, ``--ray``, ``--gpus-per-worker``), and ``--backend`` and ``--device-map``
    (:class:`~reachlens.cli.flags.BackendFlags`) unless the command loads several models its own way."""
    add_flags(p, ExecutionFlags)
    if backend:
        add_flags(p, BackendFlags)


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


def sweep_running(args: argparse.Namespace, bar) -> dict:
    """The keyword arguments of a causal sweep on the runner: its run directory, who decodes, the progress bar's
    callback."""
    return {"out": args.out, "exec_config": exec_from_args(args), "progress": bar.done}
