"""The training audit as one study: audits of several checkpoints, their pairwise joins and controls.

A study directory holds one audit directory per checkpoint (``audits/NAME``), the budget control's
extended audits (``audits/NAME-k{2K}``), the prompt-format control's audits
(``audits/NAME-fmt-{FORMAT}``) and ``study.json``, which names the pairs. Everything in it can be
re-read without a model, and :mod:`reachlens.report` renders it.

Controls:

* **budget**: O_K and O_2K for both checkpoints of each pair. If training only concentrates mass, a
  larger budget shows the base reaching what training "gained" (base O_2K >= trained O_K).
* **prompt format**: the trained model audited under the base model's prompt (``shared``) and under
  its own (``native``); the share of the realization gain retained under the shared prompt is
  ``(D_trained,shared - D_base) / (D_trained,native - D_base)`` (undefined when the native gain is 0).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.protocol import Protocol
from reachlens.store import read_json, write_json
from reachlens.studies.auditing import AuditResult, audit
from reachlens.studies.budget import extend_budget
from reachlens.studies._progress import ProgressBoard
from reachlens.studies.compare import Comparison, compare, crossings

__all__ = ["StudyPlan", "TrainingAudit", "load_training_audit", "pairs_from_dirs", "run_training_audit"]


@dataclass(frozen=True)
class StudyPlan:
    """What a training audit runs."""

    models: dict[str, str]
    """Checkpoint name -> model spec (``zoo:base``, a folder, a hub name)."""
    pairs: tuple[tuple[str, str], ...]
    """(parent, descendant) names to compare."""
    protocol: Protocol
    """The shared protocol (budget K); the budget control extends it to ``budget_k``."""
    n: int | None = None
    """First n questions of the task (all when None)."""
    data: str | None = None
    """Data file for file-based tasks."""
    budget_k: int | None = None
    """Budget of the budget control (typically 2K); None skips it."""
    native_formats: dict[str, str] = field(default_factory=dict)
    """Descendant name -> its native prompt format, for the prompt-format control (skipped when empty)."""

    def __post_init__(self) -> None:
        for a, b in self.pairs:
            for name in (a, b):
                if name not in self.models:
                    raise ReachlensError(f"pair ({a!r}, {b!r}) names {name!r}, which is not among the models "
                                     f"{sorted(self.models)}")
        if self.budget_k is not None and self.budget_k <= self.protocol.k:
            raise ReachlensError(f"budget_k={self.budget_k!r} must exceed the protocol's k={self.protocol.k}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["protocol"] = self.protocol.to_dict()
        d["pairs"] = [list(p) for p in self.pairs]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StudyPlan:
        d = dict(d)
        d["protocol"] = Protocol.from_dict(d["protocol"])
        d["pairs"] = tuple(tuple(p) for p in d["pairs"])
        return cls(**d)


@dataclass(frozen=True)
class TrainingAudit:
    """A finished (or partial) study, read back from its directory."""

    plan: StudyPlan
    path: Path
    audits: dict[str, AuditResult]
    extended: dict[str, AuditResult]
    formats: dict[str, AuditResult]
    wall_seconds: dict[str, float]

    @property
    def protocol(self) -> Protocol:
        """The protocol every main audit ran under, resolved against the task (explicit prompt format,
        stop strings and grader), as stored in the audit directories; the plan's when none is done yet."""
        return next((r.protocol for r in self.audits.values()), self.plan.protocol)

    def comparisons(self) -> dict[tuple[str, str], Comparison]:
        """Each pair's question-by-question join (made once per study object; every table reads it)."""
        return dict(self._comparisons)

    @functools.cached_property
    def _comparisons(self) -> dict[tuple[str, str], Comparison]:
        return {(a, b): compare(self.audits[a], self.audits[b]) for a, b in self.plan.pairs
                if a in self.audits and b in self.audits}

    def headline(self) -> pd.DataFrame:
        """Per pair: D and O_K on both sides, gained, lost, gained from base-reachable."""
        rows = []
        for (a, b), c in self.comparisons().items():
            s = c.summary
            rows.append({"pair": f"{a} -> {b}", "D_base": s["D_base"], "D_trained": s["D_trained"],
                         "O_K_base": s["O_K_base"], "O_K_trained": s["O_K_trained"], "gained": s["gained"],
                         "lost": s["lost"], "gained_from_base_reachable": s["gained_from_base_reachable"],
                         "entered": s["entered"], "left": s["left"]})
        return pd.DataFrame(rows)

    def pass_at_k_crossovers(self) -> pd.DataFrame:
        """Per pair: pass@1 and pass@K on both sides, the ks where the curves cross (``none``: they do not),
        and those of them whose new order is outside noise (the paired 95 % bootstrap interval of the
        difference at that k excludes 0)."""
        rows = []
        for (a, b), c in self.comparisons().items():
            curve = c.pass_at_k()
            first, last = curve.iloc[0], curve.iloc[-1]
            rows.append({"pair": f"{a} -> {b}", "pass@1_base": first["base"], "pass@1_trained": first["trained"],
                         "K": int(last["k"]), "pass@K_base": last["base"], "pass@K_trained": last["trained"],
                         "crossover_k": ", ".join(map(str, crossings(curve))) or "none",
                         "outside_noise": ", ".join(map(str, crossings(curve, outside_noise=True))) or "none"})
        return pd.DataFrame(rows)

    def budget_control(self) -> pd.DataFrame:
        """O_K and O_2K per checkpoint (from the same seed stream)."""
        rows = []
        for name, r in self.audits.items():
            e = self.extended.get(name)
            rows.append({"model": name, "K": r.k, "O_K": r.O_K, "K2": e.k if e else None,
                         "O_2K": e.O_K if e else math.nan, "D": r.D})
        return pd.DataFrame(rows)

    def format_control(self) -> pd.DataFrame:
        """Per pair with a native format: D under the shared and the native prompt, gain retained.

        ``D_base_in_native`` is the parent under the descendant's native format when the study audited
        it so (a parent trained in that format itself), else NaN: for such a pair the like-for-like
        comparison is ``D_base_in_native`` against ``D_trained_native``.
        """
        rows = []
        for a, b in self.plan.pairs:
            fmt = self.plan.native_formats.get(b)
            if fmt is None or a not in self.audits or b not in self.audits:
                continue
            native = self.formats.get(b) if fmt != self.audits[b].protocol.prompt_format else self.audits[b]
            if native is None:
                continue
            d_base, d_shared, d_native = self.audits[a].D, self.audits[b].D, native.D
            gain_native = d_native - d_base
            parent_native = self.formats.get(a)
            rows.append({"pair": f"{a} -> {b}", "shared_format": self.audits[b].protocol.prompt_format,
                         "native_format": fmt, "D_base": d_base, "D_trained_shared": d_shared,
                         "D_trained_native": d_native,
                         "gain_retained": (d_shared - d_base) / gain_native if gain_native else math.nan,
                         "D_base_in_native": parent_native.D if parent_native is not None
                         and parent_native.protocol.prompt_format == fmt else math.nan})
        return pd.DataFrame(rows)


def run_training_audit(
    plan: StudyPlan,
    out: str | Path,
    *,
    load: Callable[[str], Any] | None = None,
    max_batch_rows: int = 1024,
    workers: int = 1,
    log: Callable[[str], None] | None = None,
    device: str = "cpu",
    dtype: Any = None,
    executor=None,
) -> TrainingAudit:
    """Run (or resume) every audit the plan needs into ``out``; return the study.

    While it runs, each audit has one progress line with its ETA (:class:`ProgressBoard`, on stderr)
    and each finished audit logs its D and O_K (``log``, default: printed between the progress lines).

    Args:
        load: model loader (default :func:`reachlens.load_model` on ``device`` in ``dtype``).
        max_batch_rows: most completions decoded together.
        device, dtype: where and in which precision the default loader puts each checkpoint
            (``cuda``, ``torch.bfloat16``; default CPU, float32).
        workers: checkpoints audited side by side, each in its own process with one torch thread
            (on a small CPU two single-thread processes outrun one two-thread process); 1 runs them
            here, in order. Needs the default loader.
        executor: a :class:`reachlens.scale.RayExecutor` (or any executor): the lineage's
            checkpoints x question slices go to its workers instead (``workers`` is then unused).
    """
    if workers < 1:
        raise ReachlensError(f"workers={workers!r} must be at least 1")
    if workers > 1 and load is not None:
        raise ReachlensError("workers > 1 audits in separate processes with reachlens.load_model; "
                         "pass load=None, or workers=1 to use a custom loader")
    root = Path(out)
    study_file = root / "study.json"
    if root.exists() and not root.is_dir():
        raise ReachlensError(f"study directory {str(root)!r} is a file; choose a directory for the study")
    if root.is_dir() and not study_file.is_file():
        foreign = sorted(p.name for p in root.iterdir() if p.name != "audits")
        if foreign:
            raise ReachlensError(f"{str(root)!r} is not empty ({', '.join(foreign[:5])}) and is not a study directory "
                                 "(no study.json); choose a new or empty directory (nothing in it was touched)")
    (root / "audits").mkdir(parents=True, exist_ok=True)
    if study_file.is_file():
        old = StudyPlan.from_dict(read_json(study_file, "study file")["plan"])
        if old != plan:
            raise ReachlensError(f"study directory {str(root)!r} holds another plan; use a new --out or delete it")
    write_json(study_file, {"plan": plan.to_dict()})
    walls: dict[str, float] = {}
    board = ProgressBoard()
    log = log or board.write
    try:
        if executor is not None:  # checkpoints x question slices on one pool (reachlens.scale.lineage)
            from reachlens.scale.lineage import audit_lineage

            walls = audit_lineage(plan, root, executor, max_batch_rows=max_batch_rows, device=device, dtype=dtype,
                                  log=log, progress=board.update)
        elif workers == 1:
            for name in plan.models:
                walls[name] = _audit_checkpoint(plan, name, root, max_batch_rows, load, log, board.update, device, dtype)
        else:
            walls = _audit_in_workers(plan, root, max_batch_rows, workers, board, log, device, dtype)
    finally:
        board.close()
    old_walls = read_json(study_file, "study file").get("wall_seconds", {})
    write_json(study_file, {"plan": plan.to_dict(), "wall_seconds": {**old_walls, **walls}})
    return load_training_audit(root)


def _audit_in_workers(
    plan: StudyPlan, root: Path, max_batch_rows: int, workers: int, board: ProgressBoard, log: Callable[[str], None],
    device: str = "cpu", dtype: Any = None,
) -> dict[str, float]:
    """Each checkpoint in a worker process; their progress and log lines come back through a queue."""
    import concurrent.futures
    import multiprocessing
    import queue as queue_module

    from reachlens._verbosity import dependencies_quiet

    # by expected cost, largest first, so the last worker to finish is not the one with the most
    order = sorted(plan.models, key=lambda n: -(1 + bool(plan.budget_k) + bool(plan.native_formats.get(n))))
    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue()
    walls: dict[str, float] = {}

    def handle(event: tuple) -> None:
        if event[0] == "progress":
            board.update(*event[1:])
        else:
            log(event[1])

    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init,
                                                initargs=(events, dependencies_quiet())) as pool:
        futures = {pool.submit(_audit_checkpoint, plan, name, root, max_batch_rows, None, None, None, device, dtype): name
                   for name in order}
        pending = set(futures)
        while pending:
            try:
                handle(events.get(timeout=0.2))
            except queue_module.Empty:
                pass
            for fut in [f for f in pending if f.done()]:
                pending.discard(fut)
                walls[futures[fut]] = fut.result()
        while True:  # what the last worker sent before it returned
            try:
                handle(events.get(timeout=0.2))
            except queue_module.Empty:
                break
    return walls


_EVENTS: Any = None
"""In a worker process: the queue its progress and log lines go to."""
_QUIET: Any = None
"""In a worker process of a CLI command: the entered :func:`quiet_dependencies` (held for the worker's life)."""


def _worker_init(events: Any, quiet: bool) -> None:
    import torch

    global _EVENTS, _QUIET
    torch.set_num_threads(1)
    _EVENTS = events
    if quiet:  # the parent runs a CLI command: keep the libraries quiet here too
        from reachlens._verbosity import quiet_dependencies

        _QUIET = quiet_dependencies()
        _QUIET.__enter__()


def _audit_checkpoint(
    plan: StudyPlan,
    name: str,
    root: Path,
    max_batch_rows: int,
    load: Callable[[str], Any] | None = None,
    log: Callable[[str], None] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    device: str = "cpu",
    dtype: Any = None,
) -> float:
    """Every audit of one checkpoint (the plan's, the budget control's, the format control's), resumable."""
    import dataclasses

    import torch

    from reachlens.models import load_model
    from reachlens.tasks import load_task

    if _EVENTS is not None:  # in a worker: report to the parent
        log = log or (lambda text: _EVENTS.put(("log", text)))
        progress = progress or (lambda label, done, total: _EVENTS.put(("progress", label, done, total)))
    log = log or print

    def bar(label: str, total: int) -> Callable[[int], None] | None:
        """The progress callback of one audit; its line starts now (so its clock and ETA count from here)."""
        if progress is None:
            return None
        progress(label, 0, total)
        return lambda done: progress(label, done, total)

    t0 = time.perf_counter()
    task = load_task(plan.protocol.task, plan.data, split=plan.protocol.split, n=plan.n)
    if load is None:
        model = load_model(plan.models[name], device=device, dtype=dtype or torch.float32)
    else:
        model = load(plan.models[name])
    r = audit(model, task, plan.protocol, out=root / "audits" / name, max_batch_rows=max_batch_rows,
              progress=bar(f"{name} K={plan.protocol.k}", len(task)))
    log(f"{name:>10s}: D={r.D:.3f}  O_{r.k}={r.O_K:.3f}")
    if plan.budget_k:
        ext_dir = root / "audits" / f"{name}-k{plan.budget_k}"
        if not (ext_dir / "summary.json").is_file():
            e = extend_budget(model, task, r, plan.budget_k, out=ext_dir, max_batch_rows=max_batch_rows,
                              progress=bar(f"{name} K={plan.budget_k} (budget control)", r.n))
            log(f"{name:>10s}: O_{plan.budget_k}={e.O_K:.3f}")
    fmt = plan.native_formats.get(name)
    if fmt and fmt != r.protocol.prompt_format:
        f = audit(model, task, dataclasses.replace(plan.protocol, prompt_format=fmt),
                  out=root / "audits" / f"{name}-fmt-{fmt}", max_batch_rows=max_batch_rows,
                  progress=bar(f"{name} in its {fmt!r} prompt", len(task)))
        log(f"{name:>10s}: D under its native prompt {fmt!r} = {f.D:.3f}")
    return time.perf_counter() - t0


def load_training_audit(path: str | Path) -> TrainingAudit:
    """Read a study directory written by :func:`run_training_audit`."""
    root = Path(path)
    meta = read_json(root / "study.json", "study file")
    plan = StudyPlan.from_dict(meta["plan"])
    audits, extended, formats = {}, {}, {}
    for name in plan.models:
        d = root / "audits" / name
        if (d / "summary.json").is_file():
            audits[name] = AuditResult.load(d)
        if plan.budget_k and (root / "audits" / f"{name}-k{plan.budget_k}" / "summary.json").is_file():
            extended[name] = AuditResult.load(root / "audits" / f"{name}-k{plan.budget_k}")
        fmt = plan.native_formats.get(name)
        if fmt and (root / "audits" / f"{name}-fmt-{fmt}" / "summary.json").is_file():
            formats[name] = AuditResult.load(root / "audits" / f"{name}-fmt-{fmt}")
    return TrainingAudit(plan, root, audits, extended, formats, meta.get("wall_seconds", {}))


def pairs_from_dirs(dirs: Sequence[str | Path], *, k: int | None = None) -> TrainingAudit:
    """A study view over plain audit directories: the first is the base, each other one a descendant.

    Each is named by its folder's name (its path where two names coincide); ``k`` cuts every audit to its
    first k samples."""
    if len(dirs) < 2:
        raise ReachlensError(f"need at least two audit directories (a base and a descendant), got {len(dirs)}")
    names = [Path(d).name for d in dirs]
    if len(set(names)) < len(names):
        names = [str(d) for d in dirs]
    results = {name: AuditResult.load(d) for name, d in zip(names, dirs)}
    if k is not None:
        results = {name: r.restrict_k(k) for name, r in results.items()}
    names = list(results)
    first = results[names[0]]
    plan = StudyPlan({n: r.model.get("spec", n) for n, r in results.items()},
                     tuple((names[0], n) for n in names[1:]), first.protocol)
    return TrainingAudit(plan, Path(dirs[0]).parent, results, {}, {}, {})
