"""MATH-500: the 500-problem MATH test subset of Lightman et al. 2023, from the hub or its JSONL.

By name (no path) it reads ``HuggingFaceH4/MATH-500`` (lm-eval-harness' ``hendrycks_math500``), whose rows
are the records of the JSONL. Each record holds ``problem``, ``solution``, ``answer`` (LaTeX), ``subject``, ``level`` (1-5) and
``unique_id`` (the original MATH file, e.g. ``test/precalculus/807.json``), which is the question id.
Answers are LaTeX expressions, not only integers: the ``"math"`` grader checks equivalence with
math-verify, never by string equality.
"""

from __future__ import annotations

from pathlib import Path

from reachlens.tasks.base import PromptFormat, Question, Task
from reachlens.tasks.hub import HubDataset, is_hub_copy, read_hub
from reachlens.tasks.jsonl import QA_TEMPLATE, make_task, read_jsonl
from reachlens.tasks.registry import register_task, require_file

__all__ = ["FORMATS", "HUB", "load_math500"]

HUB = HubDataset("HuggingFaceH4/MATH-500", None)

FORMATS = (
    PromptFormat("qa", QA_TEMPLATE, "plain question and answer"),
    PromptFormat(
        "boxed",
        "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}.",
        "step-by-step, final answer in \\boxed{} (the Qwen2.5-Math / DeepSeek-R1 instruction)",
    ),
)
STOP = ("\nQuestion:", "\n\nProblem:")
REQUIRED = ("problem", "solution", "answer", "unique_id")


@register_task("math500")
def load_math500(
    path: str | Path | None = None, split: str = "test", seed: int = 0, *, default_format: str = "boxed"
) -> Task:
    """MATH-500 from the hub or its ``test.jsonl``; gold = ``answer``, id = ``unique_id``, grader ``"math"``.

    MATH-500 has one split, ``test``. ``seed`` is unused (nothing is shuffled). The fields
    ``question`` (= ``problem``), ``problem``, ``subject`` and ``level`` are available to templates.

    Args:
        path: None for the hub (``HuggingFaceH4/MATH-500``), the JSONL file, or a folder holding a copy
            of the hub repository.
        default_format: ``"boxed"`` (asks for ``\\boxed{}``, which the grader extracts best) or ``"qa"``.

    >>> load_task("math500", "shared/data/math500/test.jsonl").questions[0].question_id  # doctest: +SKIP
    'test/precalculus/807.json'
    """
    if is_hub_copy(path):
        source, rows = read_hub("math500", HUB, split, path, REQUIRED)
    else:
        source = require_file("math500", path)
        rows = read_jsonl(source, REQUIRED)
    questions = [
        Question(
            str(record["unique_id"]),
            {
                "question": record["problem"], "problem": record["problem"],
                "subject": record.get("subject", ""), "level": record.get("level", ""),
            },
            str(record["answer"]).strip(),
            solution=record["solution"],
        )
        for _, record in rows
    ]
    return make_task("math500", source, questions, FORMATS, default_format, "math", STOP)
