"""ARC (AI2 Reasoning Challenge, Clark et al. 2018), from the hub or AI2's original JSONL.

By name (no path) it reads ``allenai/ai2_arc`` (config ``ARC-Challenge``, or ``subset="ARC-Easy"``), as
lm-eval-harness does; its rows (``choices`` as ``{"text": [...], "label": [...]}``) are read as the
original records. Each line of the original holds ``id``, ``question.stem``, ``question.choices`` (``[{"text", "label"}, ...]`` in
display order) and ``answerKey``. Labels are kept exactly as given: most questions use ``A``-``D``,
22 ARC-Challenge test questions use ``1``-``4``, and a few have 3 or 5 options. The gold answer is
the ``answerKey`` label, which must be one of the question's labels.

Prompt formats: ``lm_eval`` is lm-eval-harness' ``"Question: {stem}\\nAnswer:"`` (recognition
scoring, each option the continuation ``" " + text``); ``mc`` lists the labelled options for
generating a label. The question id is the file's ``id``.
"""

from __future__ import annotations

from pathlib import Path

from typing import Any

from reachlens.tasks.base import DataError, Question, Task
from reachlens.tasks.hub import HubDataset, is_hub_copy, read_hub
from reachlens.tasks.jsonl import check_answer, check_fields, make_task, mc_formats, read_jsonl
from reachlens.tasks.registry import register_task, require_file

__all__ = ["HUB_PATH", "load_arc"]

STOP = ("\nQuestion:",)
REQUIRED = ("id", "question.stem", "question.choices", "answerKey")
HUB_PATH = "allenai/ai2_arc"
_HUB_SPLITS = {"test": "test", "validation": "validation", "train": "train"}


def _original_record(row: dict[str, Any], source: str, number: int) -> dict[str, Any]:
    """A hub row (``question`` the stem, ``choices`` two parallel lists) as an AI2 JSONL record."""
    choices = row.get("choices") or {}
    texts, labels = choices.get("text") or [], choices.get("label") or []
    record = {"id": row.get("id"), "answerKey": row.get("answerKey"), "question": {
        "stem": row.get("question"), "choices": [{"text": t, "label": lab} for t, lab in zip(texts, labels)]}}
    check_fields(record, REQUIRED, source, number)
    return record


@register_task("arc")
def load_arc(
    path: str | Path | None = None, split: str = "test", seed: int = 0, *, default_format: str = "mc",
    subset: str = "ARC-Challenge",
) -> Task:
    """ARC-Challenge or ARC-Easy from the hub (``allenai/ai2_arc``) or an AI2 JSONL file; grader ``"choice"``.

    ``split`` picks the hub split (``test``, ``validation``, ``train``); a file is its own split.
    ``seed`` is unused (nothing is shuffled). The task's ``metadata["recognition_format"]`` names the
    format to score options with (``"lm_eval"``).

    Args:
        path: None for the hub, the JSONL file (e.g. ``ARC-Challenge-Test.jsonl``), or a folder holding
            a copy of the hub repository.
        default_format: ``"mc"`` (generation of a label) or ``"lm_eval"``.
        subset: the hub config, ``"ARC-Challenge"`` or ``"ARC-Easy"`` (a file is read as it is).

    >>> task = load_arc("shared/data/arc_challenge/ARC-Challenge-Test.jsonl")  # doctest: +SKIP
    >>> task.questions[0].labels, task.questions[0].gold  # doctest: +SKIP
    (('A', 'B', 'C', 'D'), 'C')
    """
    if is_hub_copy(path):
        source, hub_rows = read_hub("arc", HubDataset(HUB_PATH, subset, _HUB_SPLITS), split, path)
        rows = ((number, _original_record(row, source, number)) for number, row in hub_rows)
    else:
        source = require_file("arc", path)
        rows = read_jsonl(source, REQUIRED)
    questions = []
    for line, record in rows:
        stem, options = record["question"]["stem"], record["question"]["choices"]
        if not isinstance(options, list) or not all(
            isinstance(o, dict) and str(o.get("text", "")).strip() and str(o.get("label", "")).strip() for o in options
        ):
            raise DataError(str(source), line, "field 'question.choices' must be a list of {'text': ..., 'label': ...} "
                            "objects with non-empty text and label")
        labels = tuple(str(o["label"]).strip() for o in options)
        gold = str(record["answerKey"]).strip()
        if gold not in labels:
            raise DataError(str(source), line, f"answerKey {gold!r} is not one of the choice labels {labels}")
        question = Question(str(record["id"]), {"question": stem}, gold, tuple(str(o["text"]) for o in options), labels)
        check_answer(question, "choice", source, line)
        questions.append(question)
    return make_task("arc", source, questions, mc_formats(), default_format, "choice", STOP,
                     {"recognition_format": "lm_eval"})
