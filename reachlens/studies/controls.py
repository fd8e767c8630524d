"""The temperature and length controls: would a lost answer come back, were long traces cut off?

Both rerun part of a comparison's audits under a protocol that differs in one field, the way the
budget control (:mod:`reachlens.studies.budget`) reruns at a larger K, and both check first that the
model and data are those the audit was made with (:func:`~reachlens.studies.budget.require_audited_with`).

* **Temperature** (:func:`temperature_control`): the questions that *left* the reachable set (reachable
  by the base, unreachable by the trained model at the protocol's temperature) are re-probed with the
  trained model at other temperatures, with the same K and the same seed stream (sample j of question q
  still draws from seed (seed, q, j)). Per temperature: how many are reachable again, the share and its
  Wilson interval. A share near 0 at every temperature says the answer is gone, not merely cooled out
  of the sampler's reach.
* **Length** (:func:`rerun_at_length`, :func:`length_table`): both audits of a pair rerun with a larger
  ``max_new_tokens``. When the trained model's outputs hit the length limit more often than the base's
  (truncation parity, :func:`~reachlens.studies.compare.truncation_parity`), part of its loss can be
  outputs cut before the answer; the deltas at the longer budget say how much.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.studies.auditing import AuditResult, audit
from reachlens.studies.budget import require_audited_with
from reachlens.studies.compare import Comparison, compare
from reachlens.studies.stats import wilson_interval
from reachlens.tasks.base import Task

__all__ = ["left_reachable", "length_table", "rerun_at_length", "temperature_control", "temperature_table",
           "reprobe_left"]

TEMPERATURE_COLUMNS = ["temperature", "source", "n_reprobed", "n_reachable", "share", "share_lo", "share_hi"]
LENGTH_COLUMNS = ["max_new_tokens", "truncated_samples_base", "truncated_samples_trained", "D_base", "D_trained",
                  "delta_D", "delta_D_lo", "delta_D_hi", "mcnemar_realized_p", "O_K_base", "O_K_trained",
                  "delta_O_K", "delta_O_K_lo", "delta_O_K_hi", "mcnemar_reachable_p"]


def _result(a: AuditResult | str | Path) -> AuditResult:
    return a if isinstance(a, AuditResult) else AuditResult.load(a)


def _check_temperatures(temperatures: Sequence[float]) -> tuple[float, ...]:
    temps = tuple(float(t) for t in temperatures)
    if not temps:
        raise ReachlensError("temperatures=() is empty; give at least one, e.g. (0.6, 1.0, 1.2)")
    bad = [t for t in temps if not t > 0]
    if bad:
        raise ReachlensError(f"temperature {bad[0]!r} must be > 0 (a K-sample probe at temperature 0 repeats "
                             "the greedy answer)")
    return temps


def left_reachable(comparison: Comparison) -> list[str]:
    """The question ids that left the reachable set (base-reachable, trained-unreachable), in order."""
    q = comparison.questions
    return q.loc[q["reach_fate"] == "left", "question_id"].tolist()


def reprobe_left(
    model, task: Task, base: AuditResult | str | Path, trained: AuditResult | str | Path,
    temperatures: Sequence[float], *, out: str | Path | None = None, max_batch_rows: int = 1024,
    progress: Callable[[float, int, int], None] | None = None,
) -> dict[float, AuditResult]:
    """Audit ``model`` (the trained checkpoint) on the questions that left the reachable set, at each
    temperature; written to ``out/T{t}`` (audit directories, resumable) when ``out`` is given.

    ``progress(t, done, total)`` after each batch. No question left: nothing runs, ``{}``.
    """
    temps = _check_temperatures(temperatures)
    b, t = _result(base), _result(trained)
    require_audited_with(model, task, t, "re-probe")
    left = set(left_reachable(compare(b, t)))
    if not left:
        return {}
    sub = task.only(left)
    runs = {}
    for temp in temps:
        if progress is not None:
            progress(temp, 0, len(sub))  # the line (and its clock) starts now
        protocol = dataclasses.replace(t.protocol, temperature=temp)
        runs[temp] = audit(model, sub, protocol, out=None if out is None else Path(out) / f"T{temp:g}",
                           max_batch_rows=max_batch_rows,
                           progress=None if progress is None else (lambda done, temp=temp: progress(temp, done, len(sub))))
    return runs


def temperature_table(comparison: Comparison, reprobes: Mapping[float, AuditResult]) -> pd.DataFrame:
    """Temperature x (n re-probed, n reachable again, share, its 95 % Wilson interval).

    The first row is the audit itself (``source="audit"``): at the protocol's temperature none of the
    left questions is reachable by definition. Each re-probe counts only the questions that left.
    """
    left = left_reachable(comparison)
    rows = [{"temperature": comparison.trained.protocol.temperature, "source": "audit", "n_reprobed": len(left),
             "n_reachable": 0}]
    for temp in sorted(reprobes):
        q = reprobes[temp].questions
        q = q[q["question_id"].isin(left)]
        rows.append({"temperature": temp, "source": "re-probe", "n_reprobed": len(q),
                     "n_reachable": int(q["reachable"].sum())})
    df = pd.DataFrame(rows, columns=TEMPERATURE_COLUMNS[:4])
    n, hit = df["n_reprobed"].to_numpy(), df["n_reachable"].to_numpy()
    df["share"] = [h / m if m else float("nan") for h, m in zip(hit, n)]
    df["share_lo"], df["share_hi"] = wilson_interval(hit, n)
    return df[TEMPERATURE_COLUMNS]


def temperature_control(
    model, task: Task, base: AuditResult | str | Path, trained: AuditResult | str | Path,
    temperatures: Sequence[float] = (0.6, 1.0, 1.2), *, out: str | Path | None = None, max_batch_rows: int = 1024,
    progress: Callable[[float, int, int], None] | None = None,
) -> pd.DataFrame:
    """Re-probe the questions that left the reachable set at each temperature (:func:`reprobe_left`) and
    tabulate them (:func:`temperature_table`). ``model`` is the trained checkpoint.

    >>> temperature_control(load_model("zoo:dapo"), load_task("arith", n=300), "runs/base", "runs/dapo")  # doctest: +SKIP
    """
    b, t = _result(base), _result(trained)  # read each audit directory once
    runs = reprobe_left(model, task, b, t, temperatures, out=out, max_batch_rows=max_batch_rows, progress=progress)
    return temperature_table(compare(b, t), runs)


def rerun_at_length(
    model, task: Task, source: AuditResult | str | Path, max_new_tokens: int, *, out: str | Path | None = None,
    max_batch_rows: int = 1024, progress: Callable[[int], None] | None = None,
) -> AuditResult:
    """The audit ``source`` made again with ``max_new_tokens`` (> its own), on the same questions.

    Run it for both checkpoints of a pair and compare the two (:func:`length_table`).
    """
    src = _result(source)
    if max_new_tokens <= src.protocol.max_new_tokens:
        raise ReachlensError(f"max_new_tokens={max_new_tokens!r} must exceed the audit's "
                             f"{src.protocol.max_new_tokens} to test for truncation")
    require_audited_with(model, task, src, "rerun")
    return audit(model, task.only(src.questions["question_id"]),
                 dataclasses.replace(src.protocol, max_new_tokens=max_new_tokens), out=out,
                 max_batch_rows=max_batch_rows, progress=progress)


def length_table(before: Comparison, after: Comparison) -> pd.DataFrame:
    """One row per decode length (the audits', then the longer rerun's): truncation shares, D and O_K on
    both sides and their deltas with paired intervals and McNemar p-values."""
    rows = []
    for c in (before, after):
        s = c.summary()
        rows.append({"max_new_tokens": c.base.protocol.max_new_tokens,
                     "truncated_samples_base": s["truncation"]["samples_base"],
                     "truncated_samples_trained": s["truncation"]["samples_trained"],
                     "D_base": s["D_base"], "D_trained": s["D_trained"], "delta_D": s["delta_D"],
                     "delta_D_lo": s["delta_D_ci"][0], "delta_D_hi": s["delta_D_ci"][1],
                     "mcnemar_realized_p": s["mcnemar_realized_p"],
                     "O_K_base": s["O_K_base"], "O_K_trained": s["O_K_trained"], "delta_O_K": s["delta_O_K"],
                     "delta_O_K_lo": s["delta_O_K_ci"][0], "delta_O_K_hi": s["delta_O_K_ci"][1],
                     "mcnemar_reachable_p": s["mcnemar_reachable_p"]})
    return pd.DataFrame(rows, columns=LENGTH_COLUMNS)
