"""The verified paired delta of two audits: the change in reaching a *solution*, not just an answer.

When both audits of a comparison are trace-graded (:mod:`reachlens.studies.trace_reach`), their questions are
joined on the verified outcomes too: ``realized_trace`` (the deployment solves the question) and
``reachable_trace`` (one of the K samples does). Each delta comes as the answer-based one does in
:class:`~reachlens.studies.compare.Comparison`: the rates with Wilson intervals, the paired bootstrap interval of the
delta, the exact McNemar p of its discordant questions and the minimum detectable effect at this n; the fates are
counted the same way (gained / lost, entered / left). Both lucky-guess nulls stand beside them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from reachlens.power import detectable
from reachlens.stats import N_BOOT, mcnemar_exact_p, paired_bootstrap_ci, wilson_interval
from reachlens.studies.trace_reach import verified_questions

__all__ = ["VERIFIED_DELTAS", "verified_delta", "verified_row"]


VERIFIED_DELTAS = (("D_trace", "gained", "lost"), ("O_K_trace", "entered", "left"))
"""The verified deltas of a pair (:func:`verified_delta`) and their fates."""


def _side(audit: Any) -> pd.DataFrame:
    q = verified_questions(audit.questions, audit.samples, audit.trace)
    return q[["question_id", "realized_trace", "reachable_trace"]].set_index("question_id")


def _delta(name: str, before: np.ndarray, after: np.ndarray, fates: tuple[str, str], n_boot: int,
           seed: int) -> dict[str, Any]:
    n = len(before)
    d = after.astype(float) - before.astype(float)
    up, down = int((~before & after).sum()), int((before & ~after).sum())
    return {
        f"{name}_base": float(before.mean()) if n else float("nan"),
        f"{name}_base_ci": list(wilson_interval(int(before.sum()), n)),
        f"{name}_trained": float(after.mean()) if n else float("nan"),
        f"{name}_trained_ci": list(wilson_interval(int(after.sum()), n)),
        f"delta_{name}": float(d.mean()) if n else float("nan"),
        f"delta_{name}_ci": list(paired_bootstrap_ci(d, n_boot=n_boot, seed=seed)),
        f"delta_{name}_mde": detectable(d),
        f"{name}_{fates[0]}": up, f"{name}_{fates[1]}": down, f"mcnemar_{name}_p": mcnemar_exact_p(up, down),
    }


def verified_delta(base: Any, trained: Any, *, n_boot: int = N_BOOT, seed: int = 0) -> dict[str, Any]:
    """The verified figures of a comparison of two audits (each an :class:`~reachlens.studies.AuditResult`), keys
    ``*_trace``; with both lucky-guess nulls (``O_K_null_base``, ``O_K_null_trained`` and their 95th percentiles).
    Only the nulls when either audit has no trace table."""
    out: dict[str, Any] = {}
    for side, audit in (("base", base), ("trained", trained)):
        null = audit.lucky_null()
        out[f"O_K_null_{side}"], out[f"O_K_null_p95_{side}"] = null.O_K_null, null.O_K_null_p95
    if base.trace is None or trained.trace is None:
        return out
    b, t = _side(base), _side(trained)
    j = b.add_suffix("_b").join(t.add_suffix("_t"), how="inner")
    for (key, up, down), column in zip(VERIFIED_DELTAS, ("realized_trace", "reachable_trace")):
        out.update(_delta(key, j[f"{column}_b"].to_numpy(bool), j[f"{column}_t"].to_numpy(bool), (up, down), n_boot, seed))
    return out


def verified_row(s: dict[str, Any]) -> dict[str, Any]:
    """A :meth:`Comparison.summary`'s verified figures as one flat row: both lucky-guess nulls and, when both
    audits are trace-graded, D^trace and O_K^trace on both sides, each delta with its paired interval, minimum
    detectable effect, fates and exact McNemar p (NaN when not trace-graded)."""
    row: dict[str, Any] = {f"O_K_null_{side}": s.get(f"O_K_null_{side}", math.nan) for side in ("base", "trained")}
    for key, up, down in VERIFIED_DELTAS:
        lo, hi = s.get(f"delta_{key}_ci", [math.nan, math.nan])
        row.update({f"{key}_base": s.get(f"{key}_base", math.nan), f"{key}_trained": s.get(f"{key}_trained", math.nan),
                    f"delta_{key}": s.get(f"delta_{key}", math.nan), f"delta_{key}_lo": lo, f"delta_{key}_hi": hi,
                    f"delta_{key}_mde": s.get(f"delta_{key}_mde", math.nan),
                    f"{key}_{up}": s.get(f"{key}_{up}", math.nan), f"{key}_{down}": s.get(f"{key}_{down}", math.nan),
                    f"p_{key}": s.get(f"mcnemar_{key}_p", math.nan)})
    return row
