"""LogiQA (English; Liu et al. 2020), from the hub or the authors' plain-text ``Test.txt``.

By name (no path) it reads ``EleutherAI/logiqa`` (config ``logiqa``), as lm-eval-harness does: rows of
``label`` (``a``-``d``), ``context``, ``question`` and ``options``, already read from the authors' file
the way described below (prefixes dropped, ``"."`` -> ``". "``), so they give the same questions.

In the authors' file each record is a blank line followed by 7 lines: the correct option as a lower-case letter
(``a``-``d``), the passage, the question and four options, normally prefixed ``A.`` to ``D.``.
Reading follows lm-eval-harness' ``logiqa`` task exactly (so recognition scores can equal its own):
options are read by position and lose their first two characters (the printed prefix), every
``.`` in the passage, question and options becomes ``". "`` before stripping, the gold answer is
the option at the answer letter's position, and the prompt is::

    Passage: {context}
    Question: {question}
    Choices:
    A. {option 1}
    ...
    Answer:

``lm_eval_text=False`` keeps the texts as written instead, removing only a real prefix (``A.``,
``A?`` or ``A `` before the text).

Quirks of the original file, flagged in ``Task.metadata`` by question id: 19 records print their
options in the order ``A. C. B. D.`` (``"acbd_order"``; the answer letter is read as the position,
as lm-eval does, and the prompt relabels options A-D by position); 9 have irregular prefixes
(``"irregular_prefix"``: no dot, a ``?``, or the letter garbled into the text). The hub's rows no
longer show the printed prefixes, so read from the hub both flags are None (unknown). Question ids are
``logiqa-{index}``, the 0-based record index, stable for the same file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from reachlens.errors import ReachlensError
from reachlens.tasks.base import DataError, PromptFormat, Question, Task
from reachlens.tasks.hub import HubDataset, is_hub_copy, read_hub
from reachlens.tasks.jsonl import make_task
from reachlens.tasks.registry import register_task, require_file

__all__ = ["FORMATS", "HUB", "read_logiqa", "load_logiqa"]

HUB = HubDataset("EleutherAI/logiqa", "logiqa", {"test": "test", "validation": "validation", "train": "train"})

FORMATS = (
    PromptFormat(
        "lm_eval", "Passage: {context}\nQuestion: {question}\nChoices:\n{choices_block}\nAnswer:",
        "lm-eval-harness logiqa context; also asks for a letter in generation",
    ),
)
STOP = ("\nPassage:", "\nQuestion:")
_PREFIX = re.compile(r"[A-D][.?]\s*|[A-D]\s+")


def _lm_eval_normalize(text: str) -> str:
    return text.replace(".", ". ").strip()


def read_logiqa(path: str | Path, lm_eval_text: bool = True) -> list[tuple[int, dict[str, Any]]]:
    """``(line_number, record)`` for each record of a LogiQA text file.

    ``line_number`` is the 1-based line of the record's answer letter. A record has keys
    ``answer`` (``A``-``D``), ``context``, ``question``, ``options`` (4 texts) and ``prefixes`` (the
    first two characters of each option line, as printed).

    Raises:
        DataError: a record does not have 7 lines, its answer is not ``a``-``d``, or a line is empty.

    >>> read_logiqa("shared/data/logiqa/Test.txt")[0][1]["answer"]  # doctest: +SKIP
    'A'
    """
    try:
        lines = Path(path).read_bytes().decode("utf-8-sig").split("\n")
    except UnicodeDecodeError as err:
        raise DataError(str(path), None, f"is not valid UTF-8 ({err.reason}); re-save it as UTF-8") from None
    blocks: list[tuple[int, list[str]]] = []
    for number, line in enumerate((line.rstrip("\r") for line in lines), start=1):
        if not line.strip():
            continue
        if blocks and blocks[-1][0] + len(blocks[-1][1]) == number:
            blocks[-1][1].append(line)
        else:
            blocks.append((number, [line]))
    records = []
    for start, block in blocks:
        if len(block) != 7:
            raise DataError(str(path), start, f"record has {len(block)} non-blank lines, expected 7 (answer letter, "
                            "passage, question, 4 options); records are separated by one blank line")
        answer = block[0].strip()
        if answer not in ("a", "b", "c", "d"):
            raise DataError(str(path), start, f"answer line {block[0]!r} is not one of 'a', 'b', 'c', 'd'")
        if lm_eval_text:
            options = [_lm_eval_normalize(option[2:]) for option in block[3:]]
        else:
            options = [option[m.end():] if (m := _PREFIX.match(option)) else option for option in block[3:]]
        for offset, option in enumerate(options, start=3):
            if not option.strip():
                raise DataError(str(path), start + offset, f"option {block[offset]!r} is empty without its prefix")
        clean = _lm_eval_normalize if lm_eval_text else str.strip
        records.append((start, {
            "answer": answer.upper(), "context": clean(block[1]), "question": clean(block[2]),
            "options": options, "prefixes": [option[:2] for option in block[3:]],
        }))
    return records


@register_task("logiqa")
def load_logiqa(
    path: str | Path | None = None, split: str = "test", seed: int = 0, *, lm_eval_text: bool = True
) -> Task:
    """LogiQA from the hub or a ``Test.txt``-format file; labels ``A``-``D``, grader ``"choice"``.

    ``split`` picks the hub split (``test``, ``validation``, ``train``); a file is its own split.
    ``seed`` is unused (nothing is shuffled).

    Args:
        path: None for the hub (``EleutherAI/logiqa``), the text file (e.g. ``Test.txt`` or
            ``Eval.txt``), or a folder holding a copy of the hub repository.
        lm_eval_text: read texts as lm-eval-harness does (default) or keep them as written (needs the
            authors' file: the hub holds lm-eval's text only).

    >>> task = load_logiqa("shared/data/logiqa/Test.txt")  # doctest: +SKIP
    >>> len(task), task.metadata["acbd_order"][:1]  # doctest: +SKIP
    (651, ('logiqa-...',))
    """
    if is_hub_copy(path):
        if not lm_eval_text:
            raise ReachlensError("lm_eval_text=False keeps LogiQA's texts as the authors wrote them, which only "
                                 "their Test.txt has (the hub holds lm-eval's text): pass its path (data=PATH)")
        return _load_logiqa_hub(path, split)
    file = require_file("logiqa", path)
    questions, acbd, irregular = [], [], []
    for index, (_, record) in enumerate(read_logiqa(file, lm_eval_text)):
        qid = f"logiqa-{index}"
        printed = "".join(prefix[:1] for prefix in record["prefixes"])
        if printed == "ACBD":
            acbd.append(qid)
        elif printed != "ABCD" or any(prefix[1:] != "." for prefix in record["prefixes"]):
            irregular.append(qid)
        questions.append(Question(
            qid, {"context": record["context"], "question": record["question"]}, record["answer"],
            tuple(record["options"]), ("A", "B", "C", "D"),
        ))
    metadata = {"recognition_format": "lm_eval", "acbd_order": tuple(acbd), "irregular_prefix": tuple(irregular),
                "lm_eval_text": lm_eval_text}
    return make_task("logiqa", file, questions, FORMATS, "lm_eval", "choice", STOP, metadata)


def _load_logiqa_hub(path: str | Path | None, split: str) -> Task:
    source, rows = read_hub("logiqa", HUB, split, path, ("label", "context", "question", "options"))
    questions = []
    for index, (number, row) in enumerate(rows):
        answer, options = str(row["label"]).strip(), row["options"]
        if answer not in ("a", "b", "c", "d"):
            raise DataError(source, number, f"label {answer!r} is not one of 'a', 'b', 'c', 'd'")
        if not isinstance(options, list) or len(options) != 4 or not all(str(o).strip() for o in options):
            raise DataError(source, number, f"options {options!r} are not 4 non-empty texts")
        questions.append(Question(
            f"logiqa-{index}", {"context": row["context"], "question": row["question"]}, answer.upper(),
            tuple(str(o) for o in options), ("A", "B", "C", "D"),
        ))
    metadata = {"recognition_format": "lm_eval", "acbd_order": None, "irregular_prefix": None, "lm_eval_text": True}
    return make_task("logiqa", source, questions, FORMATS, "lm_eval", "choice", STOP, metadata)
