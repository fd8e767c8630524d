"""ARC (AI2 Reasoning Challenge, Clark et al. 2018), read from AI2's original JSONL.

Each line holds ``id``, ``question.stem``, ``question.choices`` (``[{"text", "label"}, ...]`` in
display order) and ``answerKey``. Labels are kept exactly as given: most questions use ``A``-``D``,
22 ARC-Challenge test questions use ``1``-``4``, and a few have 3 or 5 options. The gold answer is
the ``answerKey`` label, which must be one of the question's labels.

Prompt formats: ``lm_eval`` is lm-eval-harness' ``"Question: {stem}\\nAnswer:"`` (recognition
scoring, each option the continuation ``" " + text``); ``mc`` lists the labelled options for
generating a label. The question id is the file's ``id``.
"""

from __future__ import annotations

from pathlib import Path

from reachlens.tasks.base import DataError, Question, Task
from reachlens.tasks.jsonl import check_answer, make_task, mc_formats, read_jsonl
from reachlens.tasks.registry import register_task, require_file

__all__ = ["load_arc"]

STOP = ("\nQuestion:",)
REQUIRED = ("id", "question.stem", "question.choices", "answerKey")


@register_task("arc")
def load_arc(
    path: str | Path | None = None, split: str = "test", seed: int = 0, *, default_format: str = "mc"
) -> Task:
    """ARC-Challenge or ARC-Easy from an AI2 JSONL file; grader ``"choice"``.

    ``split`` and ``seed`` are unused: the file is the split, and nothing is shuffled. The task's
    ``metadata["recognition_format"]`` names the format to score options with (``"lm_eval"``).

    Args:
        path: the JSONL file, e.g. ``ARC-Challenge-Test.jsonl``.
        default_format: ``"mc"`` (generation of a label) or ``"lm_eval"``.

    >>> task = load_arc("shared/data/arc_challenge/ARC-Challenge-Test.jsonl")  # doctest: +SKIP
    >>> task.questions[0].labels, task.questions[0].gold  # doctest: +SKIP
    (('A', 'B', 'C', 'D'), 'C')
    """
    file = require_file("arc", path)
    questions = []
    for line, record in read_jsonl(file, REQUIRED):
        stem, options = record["question"]["stem"], record["question"]["choices"]
        if not isinstance(options, list) or not all(
            isinstance(o, dict) and str(o.get("text", "")).strip() and str(o.get("label", "")).strip() for o in options
        ):
            raise DataError(str(file), line, "field 'question.choices' must be a list of {'text': ..., 'label': ...} "
                            "objects with non-empty text and label")
        labels = tuple(str(o["label"]).strip() for o in options)
        gold = str(record["answerKey"]).strip()
        if gold not in labels:
            raise DataError(str(file), line, f"answerKey {gold!r} is not one of the choice labels {labels}")
        question = Question(str(record["id"]), {"question": stem}, gold, tuple(str(o["text"]) for o in options), labels)
        check_answer(question, "choice", file, line)
        questions.append(question)
    return make_task("arc", file, questions, mc_formats(), default_format, "choice", STOP,
                     {"recognition_format": "lm_eval"})
