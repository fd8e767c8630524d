"""GSM8K: grade-school maths word problems (Cobbe et al. 2021), from the hub or the original JSONL.

By name (no path) it reads ``openai/gsm8k`` (config ``main``), as lm-eval-harness does; a path is the
original JSONL file (or a folder holding a copy of the hub repository). Each record holds
``question`` and ``answer``; the answer is a worked solution with calculator (``<<48/2=24>>``) whose last line is ``#### N``. The gold answer is N with thousands
separators removed (``#### 1,600`` -> ``"1600"``); the whole solution is kept in
:attr:`Question.solution`.

Question ids are ``gsm8k-{index}``, the 0-based index of the record in the file (the file's line
index when it has no blank lines, as the original has none). That is stable for the same file and
equals lm-eval-harness' ``doc_id`` on the test split, so audits can be joined with its samples.
"""

from __future__ import annotations

import re
from pathlib import Path

from reachlens.tasks.base import DataError, PromptFormat, Question, Task
from reachlens.tasks.hub import HubDataset, is_hub_copy, read_hub
from reachlens.tasks.jsonl import QA_TEMPLATE, make_task, read_jsonl
from reachlens.tasks.registry import register_task, require_file

__all__ = ["FORMATS", "HUB", "parse_gsm8k_answer", "load_gsm8k"]

HUB = HubDataset("openai/gsm8k", "main", {"test": "test", "train": "train"})

FORMATS = (
    PromptFormat("qa", QA_TEMPLATE, "lm-eval-harness gsm8k context"),
    PromptFormat("gsm8k_cot", "Q: {question}\nA: Let's think step by step.", "zero-shot chain of thought"),
    PromptFormat("plain", "{question}", "the bare question, e.g. for a chat template"),
)
STOP = ("\nQuestion:", "\nQ:")
REQUIRED = ("question", "answer")
_NUMBER = re.compile(r"-?\d+(\.\d+)?")


def parse_gsm8k_answer(answer: str) -> str:
    """The final answer of a GSM8K solution: the text after the last ``####``, without commas.

    Raises:
        ValueError: the solution has no ``####`` line, or what follows it is not a number.

    >>> parse_gsm8k_answer("She has 1,000 + 600 = <<1000+600=1600>>1,600 eggs.\\n#### 1,600")
    '1600'
    """
    if "####" not in answer:
        raise ValueError("the answer has no final '#### N' line; GSM8K answers end with '#### <number>'")
    gold = answer.rsplit("####", 1)[1].strip().replace(",", "")
    if not _NUMBER.fullmatch(gold):
        raise ValueError(f"the final answer {gold!r} after '####' is not a number")
    return gold


@register_task("gsm8k")
def load_gsm8k(
    path: str | Path | None = None, split: str = "test", seed: int = 0, *, default_format: str = "qa"
) -> Task:
    """GSM8K from the hub (``openai/gsm8k``, ``main``) or its JSONL file; grader ``"numeric"``.

    ``split`` picks the hub split (``test`` or ``train``); a file is its own split. ``seed`` is unused
    (nothing is shuffled).

    Args:
        path: None for the hub, the JSONL file (``test.jsonl`` or ``train.jsonl``), or a folder
            holding a copy of the hub repository.
        default_format: ``"qa"`` (lm-eval's ``Question: ...\\nAnswer:``), ``"gsm8k_cot"`` or ``"plain"``.

    >>> task = load_gsm8k("shared/data/gsm8k/test.jsonl")  # doctest: +SKIP
    >>> task.questions[0].gold  # doctest: +SKIP
    '18'
    """
    if is_hub_copy(path):
        source, rows = read_hub("gsm8k", HUB, split, path, REQUIRED)
    else:
        source = require_file("gsm8k", path)
        rows = read_jsonl(source, REQUIRED)
    questions = []
    for index, (line, record) in enumerate(rows):
        try:
            gold = parse_gsm8k_answer(str(record["answer"]))
        except ValueError as err:
            raise DataError(str(source), line, f"field 'answer': {err}") from None
        questions.append(
            Question(f"gsm8k-{index}", {"question": record["question"]}, gold, solution=record["answer"])
        )
    return make_task("gsm8k", source, questions, FORMATS, default_format, "numeric", STOP)
