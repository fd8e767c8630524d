"""A training audit's audits on an executor: the lineage's checkpoints x question slices, one pool.

:func:`reachlens.studies.training_audit.run_training_audit` calls :func:`audit_lineage` when given an
executor (``reachlens demo --ray``). The main audit of every checkpoint and the prompt-format
control's audits go to the executor together, so its workers move from checkpoint to checkpoint
as slices run out (a worker keeps the checkpoint it holds while that one has slices left); then each
checkpoint's budget control draws its samples K..2K-1, every slice of it on the pool as well.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reachlens.engine.backends import ModelSource
from reachlens.scale.jobs import AuditJob, run_audits

__all__ = ["audit_lineage"]


def audit_lineage(
    plan, root: Path, executor, *, max_batch_rows: int, device: str = "cpu", dtype: Any = None,
    log: Callable[[str], None], progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, float]:
    """Run (or resume) every audit of ``plan`` (a :class:`~reachlens.studies.training_audit.StudyPlan`)
    into ``root/audits`` on ``executor``; return the wall time as ``{"executor": seconds}``."""
    from reachlens.studies.budget import extend_budget
    from reachlens.tasks import load_task

    t0 = time.perf_counter()
    task = load_task(plan.protocol.task, plan.data, split=plan.protocol.split, n=plan.n)
    dtype_name = str(dtype).removeprefix("torch.") if dtype is not None else "float32"
    sources = {name: ModelSource(spec, device=device, dtype=dtype_name) for name, spec in plan.models.items()}
    shared_format = plan.protocol.resolved(task).prompt_format
    jobs, labels, what = [], [], []
    for name in plan.models:
        jobs.append(AuditJob(sources[name], task, plan.protocol, root / "audits" / name, max_batch_rows))
        labels.append(f"{name} K={plan.protocol.k}")
        what.append((name, None))
        fmt = plan.native_formats.get(name)
        if fmt and fmt != shared_format:
            jobs.append(AuditJob(sources[name], task, dataclasses.replace(plan.protocol, prompt_format=fmt),
                                 root / "audits" / f"{name}-fmt-{fmt}", max_batch_rows))
            labels.append(f"{name} in its {fmt!r} prompt")
            what.append((name, fmt))

    def bar(label: str, total: int) -> Callable[[int], None] | None:
        return None if progress is None else (lambda done: progress(label, done, total))

    results = run_audits(jobs, executor, progress=None if progress is None else
                         (lambda i, done: progress(labels[i], done, len(task))))
    main = {}
    for (name, fmt), r in zip(what, results):
        if fmt is None:
            main[name] = r
            log(f"{name:>10s}: D={r.D:.3f}  O_{r.k}={r.O_K:.3f}")
        else:
            log(f"{name:>10s}: D under its native prompt {fmt!r} = {r.D:.3f}")
    if plan.budget_k:
        for name, r in main.items():
            if name not in plan.paired_models:
                continue
            ext_dir = root / "audits" / f"{name}-k{plan.budget_k}"
            if (ext_dir / "summary.json").is_file():
                continue
            e = extend_budget(sources[name], task, r, plan.budget_k, out=ext_dir, max_batch_rows=max_batch_rows,
                              progress=bar(f"{name} K={plan.budget_k} (budget control)", r.n), executor=executor)
            log(f"{name:>10s}: O_{plan.budget_k}={e.O_K:.3f}")
    return {"executor": time.perf_counter() - t0}
