"""JSONL/CSV readers (error lines and messages) and the generic ``jsonl``/``csv`` loaders."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest

import reachlens.tasks._file_loaders  # noqa: F401  (registers the loaders)
import reachlens.tasks.gsm8k as gsm8k_module
import reachlens.tasks.jsonl as jsonl_module
from reachlens.errors import ReachlensError
from reachlens.tasks.base import DataError
from reachlens.tasks.jsonl import read_csv, read_jsonl, stable_id
from reachlens.tasks.registry import load_task


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _row(**fields: object) -> str:
    return json.dumps(fields)


# --- read_jsonl --------------------------------------------------------------------------------


def test_read_jsonl_skips_blank_lines_and_counts_them(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.jsonl", [_row(q="x"), "", "   ", _row(q="y")])
    assert list(read_jsonl(path, ["q"])) == [(1, {"q": "x"}), (4, {"q": "y"})]


def test_read_jsonl_bad_json_at_line_3(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.jsonl", [_row(q="x"), _row(q="y"), "{'q': 'single quotes'}"])
    with pytest.raises(DataError) as info:
        list(read_jsonl(path, ["q"]))
    assert info.value.line == 3 and info.value.path == str(path)
    assert f"{path}:3: invalid JSON" in str(info.value)


def test_read_jsonl_missing_field_at_line_2(tmp_path: Path) -> None:
    path = _write(tmp_path / "miss.jsonl", [_row(q="x", a="1"), _row(q="y")])
    with pytest.raises(DataError, match=r"miss\.jsonl:2: missing required field 'a' \(the record has \['q'\]\)"):
        list(read_jsonl(path, ["q", "a"]))


@pytest.mark.parametrize(("line", "reason"), [
    (_row(q="   "), "required field 'q' is empty"),
    (_row(q=None), "required field 'q' is empty"),
    ("[1, 2]", "expected a JSON object, got list"),
    (_row(q={"stem": "x"}), "missing required field 'q.text'"),
])
def test_read_jsonl_bad_records(tmp_path: Path, line: str, reason: str) -> None:
    path = _write(tmp_path / "r.jsonl", [_row(q={"text": "ok"}), line])
    required = ["q.text"] if "q.text" in reason else ["q"]
    with pytest.raises(DataError, match=rf"r\.jsonl:2: {reason}"):
        list(read_jsonl(path, required))


def test_read_jsonl_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"q": "ok"}\n{"q": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"latin\.jsonl:2: is not valid UTF-8"):
        list(read_jsonl(path))


# --- read_csv ----------------------------------------------------------------------------------


def test_read_csv_rows_start_lines(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv", ["question,answer", '"two\nlines",2', "", "three,3"])
    assert list(read_csv(path, ["question", "answer"])) == [
        (2, {"question": "two\nlines", "answer": "2"}), (5, {"question": "three", "answer": "3"}),
    ]


def test_read_csv_errors_name_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "nohead.csv", ["question,target", "q,1"])
    with pytest.raises(DataError, match=r"nohead\.csv:1: missing required column 'answer'"):
        list(read_csv(path, ["question", "answer"]))
    path = _write(tmp_path / "empty.csv", ["question,answer", "q,1", "q2,"])
    with pytest.raises(DataError, match=r"empty\.csv:3: required field 'answer' is empty"):
        list(read_csv(path, ["question", "answer"]))
    path = _write(tmp_path / "cells.csv", ["question,answer", "q,1,extra"])
    with pytest.raises(DataError, match=r"cells\.csv:2: row has 3 cells but the header has 2"):
        list(read_csv(path, ["question"]))


# --- generic loaders ---------------------------------------------------------------------------


def test_jsonl_loader_with_field_mapping(tmp_path: Path) -> None:
    path = _write(tmp_path / "mine.jsonl", [
        _row(uid="a1", problem="What is 2+3?", target=5, context="Be brief."),
        _row(uid="a2", problem="What is 7-1?", target=6, context="Be brief."),
    ])
    task = load_task("jsonl", path, question_field="problem", answer_field="target", id_field="uid",
                     prompt_template="{context}\nQ: {question}\nA:", stop="\nQ:")
    assert task.name == "jsonl:mine" and task.grader == "numeric" and task.stop == ("\nQ:",)
    assert [(q.question_id, q.gold) for q in task.questions] == [("a1", "5"), ("a2", "6")]
    assert task.prompt(task.questions[0]) == "Be brief.\nQ: What is 2+3?\nA:"
    assert len(load_task("jsonl", path, n=1, question_field="problem", answer_field="target")) == 1
    with pytest.raises(TypeError, match="questoin_field"):
        load_task("jsonl", path, questoin_field="problem")


def test_jsonl_loader_default_ids_follow_the_question_text(tmp_path: Path) -> None:
    rows = [_row(question="q one", answer="1"), _row(question="q two", answer="2"), _row(question="q one", answer="1")]
    ids = [q.question_id for q in load_task("jsonl", _write(tmp_path / "d.jsonl", rows)).questions]
    assert ids == [stable_id("d", "q one"), stable_id("d", "q two"), stable_id("d", "q one") + "-2"]
    reordered = load_task("jsonl", _write(tmp_path / "d.jsonl", rows[1::-1])).questions
    assert {q.fields["question"]: q.question_id for q in reordered} == {"q one": ids[0], "q two": ids[1]}


def test_jsonl_loader_duplicate_ids_and_bad_template(tmp_path: Path) -> None:
    rows = [_row(id="x", question="a", answer="1"), _row(id="x", question="b", answer="2")]
    path = _write(tmp_path / "dup.jsonl", rows)
    with pytest.raises(DataError, match=r"dup\.jsonl:2: question id 'x' already used on line 1"):
        load_task("jsonl", path, id_field="id")
    with pytest.raises(ReachlensError, match="needs field 'passage'"):
        load_task("jsonl", path, prompt_template="{passage}\n{question}")


def test_jsonl_loader_choices(tmp_path: Path) -> None:
    path = _write(tmp_path / "mc.jsonl", [
        _row(question="Sky?", options=["blue", "green"], answer="A"),
        _row(question="Grass?", options=[{"text": "blue", "label": "1"}, {"text": "green", "label": "2"}], answer="2"),
    ])
    task = load_task("jsonl", path, choices_field="options")
    assert task.grader == "choice"
    assert [(q.choices, q.labels, q.gold) for q in task.questions] == [
        (("blue", "green"), ("A", "B"), "A"), (("blue", "green"), ("1", "2"), "2"),
    ]
    path = _write(tmp_path / "idx.jsonl", [_row(question="Sky?", options=["blue", "green"], label=1)])
    by_index = load_task("jsonl", path, choices_field="options", answer_field="label", answer_is_index=True)
    assert by_index.questions[0].gold == "B"
    with pytest.raises(DataError, match=r"idx\.jsonl:1: answer '1' is not one of the labels \('A', 'B'\)"):
        load_task("jsonl", path, choices_field="options", answer_field="label")


def test_csv_loader_with_one_column_per_option(tmp_path: Path) -> None:
    path = _write(tmp_path / "mmlu.csv", [
        "question,A,B,C,D,target,id", "2+2?,3,4,5,6,B,m1", '"Say ""hi"", then?",x,y,z,w,D,m2',
    ])
    task = load_task("csv", path, choices_field="A,B,C,D", answer_field="target", id_field="id")
    assert task.grader == "choice" and len(task) == 2
    q = task.questions[1]
    assert (q.question_id, q.fields["question"], q.gold) == ("m2", 'Say "hi", then?', "D")
    assert q.choices == ("x", "y", "z", "w") and q.labels == ("A", "B", "C", "D")
    assert task.prompt(task.questions[0]) == "Question: 2+2?\nAnswer:"
    with pytest.raises(DataError, match=r"mmlu\.csv:1: missing required column 'E'"):
        load_task("csv", path, choices_field=["A", "B", "C", "D", "E"], answer_field="target")
    with pytest.raises(DataError, match=r"mmlu\.csv:2: field 'A' holds a str, not a list"):
        load_task("csv", path, choices_field="A", answer_field="target")


def test_generic_loaders_missing_file(tmp_path: Path) -> None:
    for name in ("jsonl", "csv"):
        with pytest.raises(FileNotFoundError, match="absent.data"):
            load_task(name, tmp_path / "absent.data")


@pytest.mark.parametrize("module", [jsonl_module, gsm8k_module], ids=lambda m: m.__name__)
def test_docstring_examples(module: object) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)  # type: ignore[arg-type]
    assert result.attempted > 0 and result.failed == 0
