"""The file-based task loaders: on small files in each benchmark's exact format (``tests/data``, always
run), and on the full real files under ``../shared/data`` (skipped with a reason where they are absent)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import reachlens.tasks._file_loaders  # noqa: F401  (registers the loaders)
from reachlens.errors import ReachlensError
from reachlens.tasks.base import DataError
from reachlens.tasks.registry import load_task

from conftest import FIXTURE_DATA

# name, path under the data folder, number of questions, grader
REAL = [
    ("gsm8k", "gsm8k/test.jsonl", 1319, "numeric"),
    ("arc", "arc_challenge/ARC-Challenge-Test.jsonl", 1172, "choice"),
    ("math500", "math500/test.jsonl", 500, "math"),
    ("piqa", "piqa/valid.jsonl", 1838, "choice"),
    ("logiqa", "logiqa/Test.txt", 651, "choice"),
]


FIXTURES = [
    ("gsm8k", "gsm8k/test.jsonl", 4, "numeric"),
    ("arc", "arc_challenge/ARC-Challenge-Test.jsonl", 4, "choice"),
    ("math500", "math500/test.jsonl", 3, "math"),
    ("piqa", "piqa/valid.jsonl", 3, "choice"),
    ("logiqa", "logiqa/Test.txt", 3, "choice"),
]


@pytest.fixture(scope="module")
def data(shared_data: Path) -> Path:
    return shared_data


# --- the fixtures in tests/data: every quirk of each format, with values known by construction ----------


@pytest.mark.parametrize(("name", "rel", "count", "grader"), FIXTURES)
def test_fixture_loads_every_question_and_format(name: str, rel: str, count: int, grader: str) -> None:
    task = load_task(name, FIXTURE_DATA / rel)
    assert (len(task), task.grader, task.source) == (count, grader, str(FIXTURE_DATA / rel))
    for fmt in task.prompt_formats:
        assert all(task.prompt(q, fmt) for q in task.questions)
    assert [q.question_id for q in task.questions] == [q.question_id for q in load_task(name, FIXTURE_DATA / rel).questions]
    assert load_task(name, FIXTURE_DATA / rel, n=2).questions == task.questions[:2]


def test_gsm8k_fixture_golds_drop_separators_keep_signs_and_decimals() -> None:
    task = load_task("gsm8k", FIXTURE_DATA / "gsm8k/test.jsonl")
    assert [(q.question_id, q.gold) for q in task.questions] == [
        ("gsm8k-0", "180"), ("gsm8k-1", "1600"), ("gsm8k-2", "-3"), ("gsm8k-3", "2.5")]
    first = task.questions[0]
    assert first.solution is not None and first.solution.endswith("\n#### 180")
    assert task.prompt(first) == f"Question: {first.fields['question']}\nAnswer:"
    assert task.questions[2].fields["question"].startswith("Tom\u2019s thermometer")  # \u escapes decoded


def test_arc_fixture_keeps_labels_counts_and_numeric_keys() -> None:
    task = load_task("arc", FIXTURE_DATA / "arc_challenge/ARC-Challenge-Test.jsonl")
    assert [(q.question_id, q.gold, q.labels) for q in task.questions] == [
        ("Fixture_0001", "C", ("A", "B", "C", "D")), ("Fixture_0002", "B", ("A", "B", "C")),
        ("Fixture_0003", "B", ("A", "B", "C", "D", "E")), ("Fixture_0004", "1", ("1", "2", "3", "4"))]
    assert task.prompt(task.questions[3], "mc") == (
        "Question: Which state of water has a fixed shape?\n1. ice\n2. liquid water\n3. steam\n4. water vapor\nAnswer:")
    assert task.prompt(task.questions[0], "lm_eval") == "Question: Which of these is a source of light?\nAnswer:"


def test_math500_fixture_fields() -> None:
    task = load_task("math500", FIXTURE_DATA / "math500/test.jsonl")
    assert [(q.question_id, q.gold) for q in task.questions] == [
        ("test/prealgebra/9001.json", "\\frac{5}{6}"), ("test/algebra/9002.json", "4"), ("test/algebra/9003.json", "(1,1)")]
    assert [q.fields["level"] for q in task.questions] == [1, 2, 3]
    assert task.prompt(task.questions[1], "boxed") == (
        "Solve for $x$: $2x + 3 = 11$.\nPlease reason step by step, and put your final answer within \\boxed{}.")


def test_piqa_fixture_labels_align_and_option_texts_are_kept_exactly() -> None:
    from_file = load_task("piqa", FIXTURE_DATA / "piqa/valid.jsonl")
    assert from_file.questions == load_task("piqa", FIXTURE_DATA / "piqa").questions
    assert [q.gold for q in from_file.questions] == ["A", "B", "A"]
    assert from_file.questions[0].choices == ("Store it in a sealed bag in a cool, dry place.",
                                              "Store it in an open bowl of water. ")  # the trailing space stays
    assert from_file.prompt(from_file.questions[2], "lm_eval") == "Question: flashlight\nAnswer:"


def test_logiqa_fixture_reads_like_lm_eval_and_flags_the_quirks() -> None:
    task = load_task("logiqa", FIXTURE_DATA / "logiqa/Test.txt")
    assert [q.gold for q in task.questions] == ["C", "A", "D"]
    assert task.metadata["acbd_order"] == ("logiqa-1",) and task.metadata["irregular_prefix"] == ("logiqa-2",)
    first = task.questions[0]
    # every "." becomes ". " (lm-eval's reading), options lose their first two characters
    assert first.fields["context"] == ("Every member of the club plays chess. Some chess players also play go. "
                                       "Anna is a member of the club.")
    assert task.questions[2].choices == ("It rained", "The match was cancelled", "It may have rained", "It did not rain")
    assert task.prompt(first).endswith("\nC. Anna plays chess\nD. Every go player is in the club\nAnswer:")
    raw = load_task("logiqa", FIXTURE_DATA / "logiqa/Test.txt", lm_eval_text=False)
    assert raw.questions[0].fields["context"].startswith("Every member of the club plays chess.Some")


# --- the full real files under ../shared/data ----------------------------------------------------------


@pytest.mark.parametrize(("name", "rel", "count", "grader"), REAL)
def test_real_file_loads_with_documented_count(data: Path, name: str, rel: str, count: int, grader: str) -> None:
    task = load_task(name, data / rel)
    assert len(task) == count
    assert task.grader == grader
    assert task.source == str(data / rel)
    for fmt in task.prompt_formats:  # every format renders every question
        assert all(task.prompt(q, fmt) for q in task.questions)


@pytest.mark.parametrize(("name", "rel", "count", "grader"), REAL)
def test_ids_are_unique_and_stable_across_loads(data: Path, name: str, rel: str, count: int, grader: str) -> None:
    first = [q.question_id for q in load_task(name, data / rel).questions]
    second = [q.question_id for q in load_task(name, data / rel).questions]
    assert first == second
    assert len(set(first)) == count


@pytest.mark.parametrize(("name", "rel", "count", "grader"), REAL)
def test_load_task_head(data: Path, name: str, rel: str, count: int, grader: str) -> None:
    task = load_task(name, data / rel, n=5)
    assert len(task) == 5
    assert task.questions == load_task(name, data / rel).questions[:5]


@pytest.mark.parametrize("name", ["gsm8k", "arc", "math500", "piqa", "logiqa"])
def test_missing_file_names_the_path(tmp_path: Path, name: str) -> None:
    missing = tmp_path / "nowhere" / "missing.jsonl"
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        load_task(name, missing)


def test_gsm8k_gold_solution_and_formats(data: Path) -> None:
    task = load_task("gsm8k", data / "gsm8k/test.jsonl")
    first = task.questions[0]
    assert (first.question_id, first.gold) == ("gsm8k-0", "18")
    assert first.solution is not None and first.solution.endswith("#### 18")
    assert task.prompt(first) == f"Question: {first.fields['question']}\nAnswer:"
    assert task.prompt(first, "gsm8k_cot").startswith("Q: Janet")
    assert task.prompt(first, "gsm8k_cot").endswith("\nA: Let's think step by step.")
    assert task.prompt(first, "plain") == first.fields["question"]
    assert "\nQuestion:" in task.stop and "\nQ:" in task.stop
    with_commas = [q for q in task.questions if q.solution and q.solution.rsplit("####", 1)[1].count(",")]
    assert with_commas and all("," not in q.gold for q in with_commas)
    assert all(q.gold.lstrip("-").replace(".", "", 1).isdigit() for q in task.questions)


def test_arc_labels_kept_and_gold_among_them(data: Path) -> None:
    task = load_task("arc", data / "arc_challenge/ARC-Challenge-Test.jsonl")
    assert all(q.labels is not None and q.gold in q.labels for q in task.questions)
    assert sum(len(q.choices or ()) != 4 for q in task.questions) == 7
    assert Counter(len(q.choices or ()) for q in task.questions) == {4: 1165, 3: 4, 5: 3}
    digit = [q for q in task.questions if q.labels and q.labels[0] == "1"]
    assert len(digit) == 22 and all(q.gold in "1234" for q in digit)
    assert task.prompt(digit[0], "mc").count("\n1. ") == 1
    first = task.questions[0]
    assert (first.question_id, first.gold, first.labels) == ("Mercury_7175875", "C", ("A", "B", "C", "D"))
    stem = first.fields["question"]
    assert task.prompt(first, "lm_eval") == f"Question: {stem}\nAnswer:"
    assert task.prompt(first, "mc") == (
        f"Question: {stem}\nA. Planetary density will decrease.\nB. Planetary years will become longer.\n"
        "C. Planetary days will become shorter.\nD. Planetary gravity will become stronger.\nAnswer:"
    )
    assert task.metadata["recognition_format"] == "lm_eval"


def test_piqa_from_file_or_folder(data: Path) -> None:
    from_file = load_task("piqa", data / "piqa/valid.jsonl")
    from_dir = load_task("piqa", data / "piqa")
    assert from_file.questions == from_dir.questions
    assert Counter(q.gold for q in from_file.questions) == {"A": 910, "B": 928}
    first = from_file.questions[0]
    assert (first.question_id, first.gold, first.labels) == ("piqa-0", "A", ("A", "B"))
    assert first.choices is not None and "ripped paper strips" in first.choices[0]
    goal = "How do I ready a guinea pig cage for it's new occupants?"
    assert from_file.prompt(first, "lm_eval") == f"Question: {goal}\nAnswer:"
    with pytest.raises(ReachlensError, match="no split 'dev2'"):
        load_task("piqa", data / "piqa", split="dev2")


def test_logiqa_reads_like_lm_eval(data: Path) -> None:
    task = load_task("logiqa", data / "logiqa/Test.txt")
    assert Counter(q.gold for q in task.questions) == {"A": 132, "B": 159, "C": 179, "D": 181}
    assert len(task.metadata["acbd_order"]) == 19 and len(task.metadata["irregular_prefix"]) == 9
    first = task.questions[0]
    prompt = task.prompt(first)
    assert prompt.startswith("Passage: In the planning of a new district")
    assert "\nQuestion: Based on the above statement, which of the following can be derived?\nChoices:\n" in prompt
    assert "\nA. Civic Park is north of the administrative service area\nB. " in prompt
    assert prompt.endswith("\nD. The business district is southeast of the leisure area\nAnswer:")
    raw = load_task("logiqa", data / "logiqa/Test.txt", lm_eval_text=False)
    assert raw.questions[524].choices is not None and raw.questions[524].choices[0].startswith("When the land")


def test_math500_fields(data: Path) -> None:
    task = load_task("math500", data / "math500/test.jsonl")
    first = task.questions[0]
    assert first.question_id == "test/precalculus/807.json"
    assert first.gold == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert first.solution is not None and "\\boxed" in first.solution
    assert task.prompt(first, "boxed").endswith("put your final answer within \\boxed{}.")
    assert task.prompt(first, "qa") == f"Question: {first.fields['problem']}\nAnswer:"
    assert {q.fields["level"] for q in task.questions} == {1, 2, 3, 4, 5}


def test_unknown_default_format_lists_the_known_ones(data: Path) -> None:
    with pytest.raises(ReachlensError, match="'cot'.*'gsm8k_cot'"):
        load_task("gsm8k", data / "gsm8k/test.jsonl", default_format="cot")


# --- malformed files ---------------------------------------------------------------------------


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _gsm(question: str = "1+1?", answer: str = "1+1=2\n#### 2") -> str:
    return json.dumps({"question": question, "answer": answer})


def test_gsm8k_bad_json_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "broken.jsonl", [_gsm(), _gsm("2+2?"), '{"question": "3+3?", "answer": '])
    with pytest.raises(DataError, match=r"broken\.jsonl:3: invalid JSON") as info:
        load_task("gsm8k", path)
    assert info.value.line == 3


def test_gsm8k_missing_field_names_it(tmp_path: Path) -> None:
    path = _write(tmp_path / "nofield.jsonl", [_gsm(), json.dumps({"question": "2+2?"})])
    with pytest.raises(DataError, match=r"nofield\.jsonl:2: missing required field 'answer'"):
        load_task("gsm8k", path)


def test_gsm8k_answer_without_final_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "nofinal.jsonl", [_gsm(), _gsm("2+2?", "it is 4")])
    with pytest.raises(DataError, match=r"nofinal\.jsonl:2: .*'#### N'"):
        load_task("gsm8k", path)


def test_arc_answer_key_not_a_label(tmp_path: Path) -> None:
    choices = [{"text": "x", "label": "1"}, {"text": "y", "label": "2"}]
    good = {"id": "q1", "question": {"stem": "s", "choices": choices}, "answerKey": "2"}
    bad = {**good, "id": "q2", "answerKey": "C"}
    path = _write(tmp_path / "arc.jsonl", [json.dumps(good), "", json.dumps(bad)])
    with pytest.raises(DataError, match=r"arc\.jsonl:3: answerKey 'C' is not one of the choice labels \('1', '2'\)"):
        load_task("arc", path)
    nested = {**good, "question": {"stem": "s"}}
    path = _write(tmp_path / "arc2.jsonl", [json.dumps(good), json.dumps(nested)])
    with pytest.raises(DataError, match=r"arc2\.jsonl:2: missing required field 'question\.choices'"):
        load_task("arc", path)


def test_piqa_labels_must_align(tmp_path: Path) -> None:
    row = json.dumps({"goal": "g", "sol1": "a", "sol2": "b"})
    _write(tmp_path / "valid.jsonl", [row, row, row])
    _write(tmp_path / "valid-labels.lst", ["0", "1"])
    with pytest.raises(DataError, match=r"valid-labels\.lst: has 2 labels but .* has 3 records"):
        load_task("piqa", tmp_path)
    _write(tmp_path / "valid-labels.lst", ["0", "2", "1"])
    with pytest.raises(DataError, match=r"valid-labels\.lst:2: label '2'"):
        load_task("piqa", tmp_path / "valid.jsonl")


def _logiqa_block(answer: str = "a") -> list[str]:
    return ["", answer, "Some passage.", "What follows?", "A.one", "B.two", "C.three", "D.four"]


def test_logiqa_malformed_block_names_its_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "Test.txt", _logiqa_block() + _logiqa_block("e"))
    with pytest.raises(DataError, match=r"Test\.txt:10: answer line 'e'"):
        load_task("logiqa", path)
    path = _write(tmp_path / "Short.txt", _logiqa_block() + _logiqa_block()[:-1] + _logiqa_block())
    with pytest.raises(DataError, match=r"Short\.txt:10: record has 6 non-blank lines, expected 7"):
        load_task("logiqa", path)
    task = load_task("logiqa", _write(tmp_path / "Ok.txt", _logiqa_block("c") + _logiqa_block("d")))
    assert [q.gold for q in task.questions] == ["C", "D"]
    assert task.questions[0].choices == ("one", "two", "three", "four")


def test_empty_file_is_a_data_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "empty.jsonl", [""])
    with pytest.raises(DataError, match=r"empty\.jsonl: holds no questions"):
        load_task("math500", path)
