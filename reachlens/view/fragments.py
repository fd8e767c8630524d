"""The fragments both of the viewer's renderers use (:mod:`reachlens.view.render` for audits and comparisons,
:mod:`reachlens.view.render_runs` for probe, routing and recognition runs): a problem said in the page, and a
question's candidates grouped by answer. Run text goes through :func:`reachlens.escape.html_text` here too.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from reachlens.escape import html_text as h

__all__ = ["answer_groups", "problem_fragment"]


def problem_fragment(message: str) -> str:
    return f'<p class="problem">{h(message)}</p>'


def answer_groups(samples: pd.DataFrame, key: str = "candidate_idx") -> list[dict[str, Any]]:
    """The samples grouped by extracted answer (no answer: one group), most frequent first, each with its samples'
    ``key`` (``idx``); the majority's pick (the answers tied for the most votes among graded samples with an
    answer, :mod:`reachlens.selectors`) marked."""
    groups = []
    for answer, g in samples.groupby(samples["answer"].astype(object).where(samples["answer"].notna(), None),
                                     dropna=False, sort=False):
        eligible = int((g["scored"].astype(bool) & g["answer"].notna()).sum())
        answer = None if not isinstance(answer, str) and pd.isna(answer) else answer
        groups.append({"answer": answer, "n": len(g), "eligible": eligible,
                       "correct": int((g["correct"].astype(bool) & g["scored"].astype(bool)).sum()),
                       "idx": g[key].tolist(), "rows": g})
    top = max((g["eligible"] for g in groups), default=0)
    for g in groups:
        g["majority"] = top > 0 and g["eligible"] == top
    return sorted(groups, key=lambda g: (-g["n"], str(g["answer"])))
