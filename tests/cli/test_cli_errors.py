"""Every user error is one line and exit status 2, before the model loads where it can be; a bug keeps
its traceback; Ctrl-C is one line and exit 130 and keeps what was finished (issue 13, item 10).

Before issue 13 each of these was a traceback or an unclear line: ``--out`` naming a file
(``FileExistsError`` after the model loaded), a truncated ``model.safetensors``, a lone surrogate in a
JSONL question, ``--max-new-tokens`` beyond the model's context, Ctrl-C, a corrupt ``run.json``
("Expecting value: line 2 column 1", no file named), ``zoo:../../..``; bad multiple-choice labels
were found at grading time; ``--n`` past the task's end said nothing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from reachlens.cli import main


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def error_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if "error:" in ln]
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if the command loads the model (the error must come before)."""
    import reachlens.models
    import reachlens.models.loading

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the user error was found")

    monkeypatch.setattr(reachlens.models, "load_model", refuse)
    monkeypatch.setattr(reachlens.models.loading, "load_model", refuse)  # what ModelSource.load calls


def audit_args(model, out, *more):
    return ["audit", model, "--task", "arith", "--n", "3", "--k", "2", "--max-new-tokens", "6", "--out", out, *more]


def test_out_naming_a_file(capsys, tiny_dir, tmp_path, no_model_load) -> None:
    (tmp_path / "f").write_text("precious")
    code, _, err = run(capsys, *audit_args(tiny_dir, tmp_path / "f"))
    assert code == 2 and "is a file" in error_line(err)
    assert (tmp_path / "f").read_text() == "precious"


def test_out_naming_a_folder_of_other_files(capsys, tiny_dir, tmp_path, no_model_load) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "thesis.tex").write_text("x")
    code, _, err = run(capsys, *audit_args(tiny_dir, tmp_path / "d"))
    assert code == 2 and "thesis.tex" in error_line(err) and (tmp_path / "d" / "thesis.tex").exists()


def test_a_truncated_weights_file(capsys, tiny_dir, tmp_path) -> None:
    folder = tmp_path / "cut"
    shutil.copytree(tiny_dir, folder)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:-100])
    code, _, err = run(capsys, *audit_args(folder, tmp_path / "o"))
    assert code == 2 and "model.safetensors' is truncated" in error_line(err)


def test_a_lone_surrogate_in_a_question(capsys, tiny_dir, tmp_path, no_model_load) -> None:
    data = tmp_path / "q.jsonl"
    data.write_text('{"question": "1+1?", "answer": "2"}\n{"question": "bad \\ud800 text", "answer": "3"}\n')
    code, _, err = run(capsys, "audit", tiny_dir, "--task", "jsonl", "--data", data, "--out", tmp_path / "o")
    line = error_line(err)
    assert code == 2 and f"{data}:2: field 'question' holds a lone surrogate" in line


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"q": "x", "a": "b", "opts": [{"text": "u", "label": "a"}, {"text": "v", "label": "b"}]}],
         r":1: choice labels \('a', 'b'\) cannot be graded"),
        ([{"q": "x", "a": "A", "opts": [f"o{i}" for i in range(12)]}], r":1: choice labels .*at most 10 options"),
        ([{"q": "x", "a": "A", "opts": ["u", "v"]}, {"q": "y", "a": "C", "opts": ["u", "v"]}],
         r":2: answer 'C' is not one of the labels"),
    ],
)
def test_bad_choice_labels_are_found_at_load_time(capsys, tiny_dir, tmp_path, no_model_load, rows, message) -> None:
    from reachlens.tasks import DataError, load_task

    data = tmp_path / "mc.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=message):
        load_task("jsonl", data, question_field="q", answer_field="a", choices_field="opts")


def test_arc_labels_the_grader_cannot_read_name_the_line(tmp_path) -> None:
    from reachlens.tasks import DataError, load_task

    row = {"id": "x1", "question": {"stem": "s", "choices": [{"text": "u", "label": "a"}, {"text": "v", "label": "b"}]},
           "answerKey": "a"}
    (tmp_path / "arc.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError, match=r"arc.jsonl:1: choice labels \('a', 'b'\) cannot be graded"):
        load_task("arc", tmp_path / "arc.jsonl")


def test_max_new_tokens_beyond_the_context(capsys, tmp_path) -> None:
    from reachlens.models.testing import make_tiny_llama

    small = make_tiny_llama(tmp_path / "small", max_positions=32)
    code, _, err = run(capsys, *audit_args(small, tmp_path / "o"), "--max-new-tokens", "64")
    line = error_line(err)
    assert code == 2 and "max_new_tokens=64" in line and "context of 32 tokens" in line
    assert not (tmp_path / "o").exists()


def test_a_corrupt_run_json_is_named(capsys, tiny_dir, tmp_path) -> None:
    out = tmp_path / "o"
    assert run(capsys, *audit_args(tiny_dir, out))[0] == 0
    (out / "run.json").write_text('{"protocol":\n')
    for argv in (audit_args(tiny_dir, out), ["rescore", out], ["compare", out, out]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and f"{str(out / 'run.json')!r} is not valid JSON" in error_line(err), argv


def test_a_zoo_name_escaping_the_zoo(capsys, tmp_path, no_model_load) -> None:
    code, _, err = run(capsys, *audit_args("zoo:../../..", tmp_path / "o"))
    assert code == 2 and "is not a plain name" in error_line(err)


def test_n_larger_than_the_task_says_so(capsys, tmp_path, monkeypatch) -> None:
    (tmp_path / "q.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n{"question": "2+2?", "answer": "4"}\n')
    from reachlens.tasks import load_task

    with pytest.warns(UserWarning, match="n=5 but task 'jsonl' has 2 questions; using all 2"):
        assert len(load_task("jsonl", tmp_path / "q.jsonl", n=5)) == 2


def test_n_larger_than_the_task_is_one_note_on_the_cli(capsys, tiny_dir, tmp_path) -> None:
    (tmp_path / "q.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n{"question": "2+2?", "answer": "4"}\n')
    code, _, err = run(capsys, "audit", tiny_dir, "--task", "jsonl", "--data", tmp_path / "q.jsonl", "--n", "5",
                       "--k", "2", "--max-new-tokens", "4", "--out", tmp_path / "o")
    notes = [ln for ln in err.splitlines() if ": note: " in ln]
    assert code == 0 and len(notes) == 1 and "n=5 but task 'jsonl' has 2 questions" in notes[0], err


def test_ctrl_c_is_one_line_exit_130_and_keeps_what_was_finished(capsys, tiny_dir, tmp_path, monkeypatch) -> None:
    import reachlens.runner.decode as auditing

    whole = tmp_path / "whole"
    assert run(capsys, *audit_args(tiny_dir, whole, "--max-batch-rows", "3"))[0] == 0
    real = auditing.grade_questions
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(auditing, "grade_questions", interrupted)
    cut = tmp_path / "cut"
    code, _, err = run(capsys, *audit_args(tiny_dir, cut, "--max-batch-rows", "3"))
    assert code == 130 and "Traceback" not in err
    assert [ln for ln in err.strip().splitlines() if "interrupted" in ln][0].endswith("re-run the same command to resume)")
    assert len(pd.read_parquet(next((cut / "parts").glob("*.questions.parquet")))) == 1
    assert not (cut / ".lock").exists()
    monkeypatch.undo()
    assert run(capsys, *audit_args(tiny_dir, cut, "--max-batch-rows", "3"))[0] == 0
    for table in ("questions", "samples"):
        pd.testing.assert_frame_equal(pd.read_parquet(cut / f"{table}.parquet"), pd.read_parquet(whole / f"{table}.parquet"))


def test_a_bug_keeps_its_traceback(capsys, tiny_dir, tmp_path, monkeypatch) -> None:
    import reachlens.runner.decode as auditing

    def bug(*args, **kwargs):
        raise ValueError("a bug, not a user error")

    monkeypatch.setattr(auditing, "grade_questions", bug)
    with pytest.raises(ValueError, match="a bug, not a user error"):
        main([str(a) for a in audit_args(tiny_dir, tmp_path / "o")])


@pytest.mark.parametrize("more, message", [
    (["--data", "TEST"], "--train-data"),  # issue 53: elicit drew its demonstrations from the audited file
    (["--data", "TEST", "--train-data", "TEST"], "is the --data file"),
    (["--lr", "inf"], "--lr must be a finite number"),
    (["--lr", "nan"], "--lr must be a finite number"),
    (["--lr", "0"], "--lr must be a finite number"),
])
def test_elicit_never_trains_on_the_audited_file_nor_at_a_non_finite_rate(capsys, tmp_path, no_model_load, more,
                                                                           message) -> None:
    data = tmp_path / "test.jsonl"
    data.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    argv = ["elicit", "zoo:locked", "--task", "jsonl", "--out", tmp_path / "run",
            *[str(data) if a == "TEST" else a for a in more]]
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in error_line(err)
    assert not (tmp_path / "run").exists()  # refused before anything was written
