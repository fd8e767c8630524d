"""Reading data files line by line, shared pieces of the file loaders, and the generic loaders.

:func:`read_jsonl` and :func:`read_csv` yield ``(line_number, record)`` pairs and raise
:class:`~reachlens.tasks.base.DataError` naming the file and the 1-based line of the first bad
record: invalid JSON, a line that is not an object, a string with a lone surrogate (``"\ud800"``,
which no tokenizer or parquet file accepts), a missing or empty required field.
:func:`check_answer` checks, at load time, that the task's grader can read a question's gold
answer and labels, so a bad label is reported with its line before any model runs. Blank lines
are skipped (line numbers still count them). Required fields may be dotted paths into nested
objects (``"question.stem"``).

The generic loaders ``"jsonl"`` and ``"csv"`` map fields of any such file onto questions. Their
default question id is ``f"{file stem}-{sha1(question text)[:12]}"``: the same question text gets the
same id on every load, whatever its position in the file; the k-th repeat (k >= 2) of a text in
one file gets ``-k`` appended. Pass ``id_field`` to use the file's own ids instead.
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from reachlens.errors import ReachlensError
from reachlens.tasks.base import DataError, PromptFormat, Question, Task
from reachlens.tasks.registry import register_task, require_file

__all__ = [
    "LETTERS", "QA_TEMPLATE", "mc_formats", "get_field", "check_answer", "check_fields", "read_jsonl", "read_csv",
    "stable_id", "make_task", "load_jsonl", "load_csv",
]

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
"""Option labels used where the data set has none of its own."""
QA_TEMPLATE = "Question: {question}\nAnswer:"
MAX_NESTING = 64
"""The deepest nesting of lists and objects a data record may have (a question record is nearly flat;
deeper ones exhaust Python's recursion limit of about 1,000 in the code that reads them)."""
"""lm-eval-harness' ``Question: ...\\nAnswer:`` context (ARC, PIQA, GSM8K's plain QA)."""


def mc_formats() -> tuple[PromptFormat, PromptFormat]:
    """The two prompt formats of a multiple-choice question with a ``question`` field.

    ``lm_eval`` is lm-eval-harness' recognition context (each option is scored as the continuation
    ``" " + text``); ``mc`` lists the labelled options for generation of a label.

    >>> [f.name for f in mc_formats()]
    ['lm_eval', 'mc']
    """
    return (
        PromptFormat("lm_eval", QA_TEMPLATE, "lm-eval-harness context for recognition scoring"),
        PromptFormat("mc", "Question: {question}\n{choices_block}\nAnswer:", "labelled options; answer a label"),
    )


def get_field(record: Mapping[str, Any], field: str) -> Any:
    """The value of ``field`` in ``record``; a dotted name walks into nested objects.

    Raises:
        KeyError: ``field`` (or a step of its path) is missing.

    >>> get_field({"question": {"stem": "Why?"}}, "question.stem")
    'Why?'
    """
    if field in record:
        return record[field]
    value: Any = record
    for step in field.split("."):
        if not isinstance(value, Mapping) or step not in value:
            raise KeyError(field)
        value = value[step]
    return value


def _is_empty(value: Any) -> bool:
    if isinstance(value, str):
        return not value.strip()
    return value is None or (isinstance(value, (list, tuple, dict)) and not value)


def check_fields(record: Mapping[str, Any], required: Iterable[str], path: str | Path, line: int) -> None:
    """Raise :class:`DataError` at ``path:line`` if a required field is missing or empty."""
    for field in required:
        try:
            value = get_field(record, field)
        except KeyError:
            raise DataError(
                str(path), line,
                f"missing required field {field!r} (the record has {sorted(record)}); add it, or map another field",
            ) from None
        if _is_empty(value):
            raise DataError(str(path), line, f"required field {field!r} is empty ({value!r}); give it a value")


def _lone_surrogate(value: Any, where: str = "") -> str | None:
    """The field path of the first string in ``value`` holding a lone surrogate, or None."""
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return where or "(the record)"
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _lone_surrogate(item, f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


def check_answer(question: Question, grader: str, path: str | Path, line: int | None) -> None:
    """Raise :class:`DataError` at ``path:line`` if ``grader`` cannot read the question's gold answer
    (a numeric gold that is no number) or its labels (choice labels other than distinct single
    letters A-J or digits 1-9, or a gold that is not one of them)."""
    from reachlens.grading import ChoiceGrader
    from reachlens.grading.extract import number_key

    if grader == "choice":
        labels = question.labels or ("A", "B", "C", "D")
        try:
            ChoiceGrader(labels=labels)
        except ReachlensError:
            raise DataError(str(path), line, f"choice labels {labels} cannot be graded: the choice grader takes "
                            "distinct single letters A-J or digits 1-9 (at most 10 options); relabel them") from None
        if question.gold.strip().upper() not in labels:
            raise DataError(str(path), line, f"gold answer {question.gold!r} is not one of the labels {labels}")
    elif grader == "numeric" and number_key(question.gold) is None:
        raise DataError(str(path), line, f"gold answer {question.gold!r} is not a number, which the numeric grader "
                        "needs (e.g. '18', '-3.5', '1,234', '3/4'); pass grader='math' for LaTeX answers")


def read_jsonl(path: str | Path, required: Sequence[str] = ()) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, record)`` for each non-blank line of a JSONL file.

    Raises:
        DataError: a line is not UTF-8, not valid JSON, not an object, nested deeper than
            :data:`MAX_NESTING`, holds an integer past Python's digit limit or a lone surrogate, or lacks
            a required field.
    """
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise DataError(str(path), number, f"is not valid UTF-8 ({err.reason}); re-save it as UTF-8") from None
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as err:
                raise DataError(
                    str(path), number,
                    f"invalid JSON ({err.msg} at column {err.colno}); each line must be one JSON object",
                ) from None
            except (ValueError, RecursionError) as err:
                raise DataError(str(path), number, _unreadable(err)) from None
            if _nesting(record) > MAX_NESTING:
                raise DataError(str(path), number, f"is nested more than {MAX_NESTING} lists or objects deep; a "
                                "question record is flat: drop or flatten the nested field")
            if not isinstance(record, dict):
                got = f"{type(record).__name__} {text.strip()[:40]!r}"
                raise DataError(str(path), number, f"expected a JSON object, got {got}")
            bad = _lone_surrogate(record)
            if bad is not None:
                raise DataError(str(path), number, f"field {bad!r} holds a lone surrogate (an unpaired \\ud800-\\udfff "
                                "escape), which is not text; fix or drop that character")
            check_fields(record, required, path, number)
            yield number, record


def _unreadable(err: ValueError | RecursionError) -> str:
    """Why valid-looking JSON could not be read: nesting past the recursion limit, or an integer past
    Python's limit on the digits of an integer read from text."""
    if isinstance(err, RecursionError):
        return f"is nested too deeply to read (more than {MAX_NESTING} lists or objects); a question record is flat"
    if "digits" in str(err):
        return (f"holds an integer of more than {sys.get_int_max_str_digits()} digits, which JSON cannot read as "
                "a number; write it as a string (in quotes)")
    return f"cannot be read as JSON ({err}); each line must be one JSON object"


def _nesting(value: Any) -> int:
    """How deep lists and objects nest in ``value`` (0 for a scalar), counted without recursion and
    no further than one past :data:`MAX_NESTING`."""
    deepest, stack = 0, [(value, 1)]
    while stack and deepest <= MAX_NESTING:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def read_csv(path: str | Path, required: Sequence[str] = ()) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line_number, row)`` for each data row of a CSV file with a header row.

    The line number is the line a row starts on. Blank rows are skipped.

    Raises:
        DataError: the header lacks a required column or repeats one, a row has the wrong number of
            cells, a required cell is empty, or the CSV is malformed.
    """
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        header: list[str] | None = None
        while True:
            start = reader.line_num + 1
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as err:
                raise DataError(str(path), start, f"malformed CSV ({err})") from None
            except UnicodeDecodeError as err:
                raise DataError(str(path), None, f"is not valid UTF-8 ({err.reason}); re-save it as UTF-8") from None
            if not any(cell.strip() for cell in row):
                continue
            if header is None:
                header = [cell.strip() for cell in row]
                repeated = sorted({h for h in header if header.count(h) > 1})
                if repeated:
                    raise DataError(str(path), start, f"header repeats column(s) {repeated}; rename them")
                missing = [field for field in required if field not in header]
                if missing:
                    raise DataError(str(path), start, f"missing required column {missing[0]!r}; header: {header}")
                continue
            if len(row) != len(header):
                raise DataError(str(path), start, f"row has {len(row)} cells but the header has {len(header)} columns")
            record = dict(zip(header, row))
            check_fields(record, required, path, start)
            yield start, record


def stable_id(prefix: str, text: str) -> str:
    """A content id: ``prefix`` plus the first 12 hex digits of the SHA-1 of ``text``.

    >>> stable_id("demo", "What is 1+1?")
    'demo-f8b325929401'
    """
    return f"{prefix}-{hashlib.sha1(text.encode('utf-8')).hexdigest()[:12]}"


def make_task(
    name: str, path: str | Path, questions: Sequence[Question], formats: Sequence[PromptFormat],
    default_format: str, grader: str, stop: Sequence[str], metadata: Mapping[str, Any] | None = None,
) -> Task:
    """A :class:`Task` read from ``path``; checks that it has questions and that every format renders."""
    if not questions:
        raise DataError(str(path), None, f"holds no questions for task {name!r}; is it the right file?")
    task = Task(
        name, tuple(questions), {f.name: f for f in formats}, default_format, grader,
        tuple(stop), str(path), dict(metadata or {}),
    )
    for fmt in formats:
        fmt.render(task.questions[0])  # a template naming an unknown field fails now, not mid-run
    return task


def _load_generic(
    kind: str, path: str | Path | None, *, question_field: str = "question", answer_field: str = "answer",
    id_field: str | None = None, choices_field: str | Sequence[str] | None = None, answer_is_index: bool = False,
    grader: str | None = None, prompt_template: str = QA_TEMPLATE, stop: str | Sequence[str] = ("\nQuestion:",),
) -> Task:
    file = require_file(kind, path)
    if isinstance(choices_field, str):
        choices_field = [c.strip() for c in choices_field.split(",")]
    required = [question_field, answer_field, *([id_field] if id_field else []), *(choices_field or [])]
    grader_name = grader or ("choice" if choices_field else "numeric")
    rows = read_jsonl(file, required) if kind == "jsonl" else read_csv(file, required)
    questions: list[Question] = []
    first_line: dict[str, int] = {}
    repeats: dict[str, int] = {}
    for line, record in rows:
        text = str(get_field(record, question_field))
        choices = labels = None
        if choices_field:
            choices, labels = _choices(record, choices_field, file, line)
        answer = str(get_field(record, answer_field)).strip()
        if labels is not None and answer_is_index:
            if not answer.isdigit() or int(answer) >= len(labels):
                raise DataError(str(file), line, f"answer {answer!r} is not a 0-based option index below {len(labels)}")
            answer = labels[int(answer)]
        if labels is not None and answer not in labels:
            raise DataError(str(file), line, f"answer {answer!r} is not one of the labels {labels}; "
                            "pass answer_is_index=True if it is an option index")
        if id_field:
            qid = str(get_field(record, id_field))
        else:
            qid = stable_id(file.stem, text)
            repeats[qid] = repeats.get(qid, 0) + 1
            qid = qid if repeats[qid] == 1 else f"{qid}-{repeats[qid]}"
        if qid in first_line:
            first = first_line[qid]
            raise DataError(str(file), line, f"question id {qid!r} already used on line {first}; make ids unique")
        first_line[qid] = line
        scalars = {k: v for k, v in record.items() if isinstance(v, (str, int, float))}
        question = Question(qid, {**scalars, "question": text}, answer, choices, labels)
        check_answer(question, grader_name, file, line)
        questions.append(question)
    fmt = PromptFormat("default", prompt_template, f"template given to the {kind!r} loader")
    stops = (stop,) if isinstance(stop, str) else tuple(stop)
    return make_task(f"{kind}:{file.stem}", file, questions, [fmt], "default", grader_name, stops)


def _choices(
    record: Mapping[str, Any], fields: Sequence[str], path: Path, line: int
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if len(fields) > 1:  # one field per option, labelled A, B, C, ...
        return tuple(str(get_field(record, f)) for f in fields), tuple(LETTERS[: len(fields)])
    value = get_field(record, fields[0])
    if not isinstance(value, list):
        raise DataError(str(path), line, f"field {fields[0]!r} holds a {type(value).__name__}, not a list of options; "
                        "for one column per option pass choices_field='A,B,C,D'")
    if all(isinstance(v, dict) and "text" in v for v in value):  # ARC style [{"text", "label"}]
        texts = tuple(str(v["text"]) for v in value)
        return texts, tuple(str(v.get("label", LETTERS[i])) for i, v in enumerate(value))
    return tuple(str(v) for v in value), tuple(LETTERS[: len(value)])


@register_task("jsonl")
def load_jsonl(path: str | Path | None = None, split: str = "test", seed: int = 0, **options: Any) -> Task:
    """Questions from any JSONL file, one object a line, by a field mapping.

    ``split`` and ``seed`` are unused (the file is the split; nothing is shuffled). An unknown
    option raises :class:`TypeError`.

    Args:
        path: the JSONL file.
        **options: ``question_field`` (default ``"question"``) and ``answer_field`` (``"answer"``),
            which may be dotted paths (``"question.stem"``); ``id_field`` (default: a hash of the
            question text, see the module docstring); ``choices_field``: one field holding a list of
            options (strings, or ``{"text", "label"}`` objects), or several fields (``"A,B,C,D"``)
            holding one option each; ``answer_is_index`` (the answer is a 0-based option index);
            ``grader`` (default ``"choice"`` with choices, else ``"numeric"``); ``prompt_template``
            (default ``"Question: {question}\\nAnswer:"``; every top-level string or number field of
            a record is available to it); ``stop`` (default ``("\\nQuestion:",)``).

    >>> task = load_jsonl("qs.jsonl", question_field="problem", grader="math")  # doctest: +SKIP
    """
    return _load_generic("jsonl", path, **options)


@register_task("csv")
def load_csv(path: str | Path | None = None, split: str = "test", seed: int = 0, **options: Any) -> Task:
    """Questions from a CSV file with a header row; the options of :func:`load_jsonl`.

    >>> task = load_csv("mmlu.csv", choices_field="A,B,C,D", answer_field="target")  # doctest: +SKIP
    """
    return _load_generic("csv", path, **options)
