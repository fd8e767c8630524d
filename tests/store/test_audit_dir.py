"""Audit directories never destroy anything and never take two writers (issue 13, items 5, 6, 9, 10).

Each test here fails on the code before issue 13: ``--out`` on a folder of other files deleted some of
them, two writers were both accepted, ``rescore --grader`` wrote its header before its tables, and
``summary.json`` could hold ``NaN``.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from reachlens.execution import ExecConfig
from reachlens import Protocol, audit, load_task, rescore
from reachlens.errors import ReachlensError
from reachlens.store import PartsDir, write_json
from reachlens.store.convert import convert
from reachlens.studies import AuditResult

PROTO = Protocol("arith", k=3, temperature=1.0, max_new_tokens=10)


@pytest.fixture(scope="module")
def task():
    return load_task("arith", n=4)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- item 5: --out on a directory of other files ------------------------------------------------

def test_a_directory_of_other_files_is_refused_and_left_untouched(tiny_model, task, tmp_path) -> None:
    out = tmp_path / "mine"
    (out / "parts").mkdir(parents=True)
    (out / "parts" / "notes.txt").write_text("my notes")
    (out / "summary.json").write_text('{"mine": true}\n')
    pd.DataFrame({"x": [1, 2]}).to_parquet(out / "questions.parquet")
    before = snapshot(out)
    with pytest.raises(ReachlensError, match=r"is not empty .* and is not a reachlens run directory \(no run.json\)"):
        audit(tiny_model, task, PROTO, out=out, exec_config=ExecConfig(max_batch_rows=8))
    assert snapshot(out) == before


def test_a_file_as_out_is_refused(tiny_model, task, tmp_path) -> None:
    out = tmp_path / "a-file"
    out.write_text("precious")
    with pytest.raises(ReachlensError, match="is a file"):
        audit(tiny_model, task, PROTO, out=out, exec_config=ExecConfig(max_batch_rows=8))
    assert out.read_text() == "precious"


def test_an_empty_directory_is_used_and_a_finished_audit_keeps_foreign_files(tiny_model, task, tmp_path) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    audit(tiny_model, task, PROTO, out=out, exec_config=ExecConfig(max_batch_rows=8))
    assert PartsDir(out).exists()
    # a file someone put into parts/ of an audit directory survives its consolidation
    (out / "parts").mkdir(exist_ok=True)
    (out / "parts" / "keep.txt").write_text("x")
    audit(tiny_model, load_task("arith", n=5), PROTO, out=out, exec_config=ExecConfig(max_batch_rows=8))
    assert (out / "parts" / "keep.txt").read_text() == "x"


def test_a_corrupt_header_is_named_in_one_line(tiny_model, task, tmp_path) -> None:
    out = tmp_path / "d"
    audit(tiny_model, task, PROTO, out=out, exec_config=ExecConfig(max_batch_rows=8))
    (out / "run.json").write_text('{\n')
    with pytest.raises(ReachlensError, match=re.escape(str(out / "run.json")) + r".* is not valid JSON"):
        audit(tiny_model, task, PROTO, out=out, exec_config=ExecConfig(max_batch_rows=8))
    with pytest.raises(ReachlensError, match="run.json"):
        AuditResult.load(out)


# --- item 6: two writers --------------------------------------------------------------------------

def test_a_second_writer_is_refused_naming_the_owner(tiny_model, task, tmp_path) -> None:
    from reachlens.store import DirectoryLock, DirectoryLocked

    out = tmp_path / "d"
    out.mkdir()
    with DirectoryLock(out):
        with pytest.raises(DirectoryLocked, match=rf"is being written by process {os.getpid()}\b") as err:
            audit(tiny_model, task, PROTO, out=out, exec_config=ExecConfig(max_batch_rows=8))
        assert err.value.owner["pid"] == os.getpid()
        assert not PartsDir(out).exists()  # the refused writer wrote nothing
    audit(tiny_model, task, PROTO, out=out, exec_config=ExecConfig(max_batch_rows=8))  # released: the next writer runs


def test_a_stale_lock_of_a_dead_writer_is_taken_over(tiny_model, task, tmp_path) -> None:
    out = tmp_path / "d"
    out.mkdir()
    # what a writer killed with -9 leaves: its lock file, no flock held on it, its pid long gone
    (out / ".lock").write_text(json.dumps({"pid": 2**22 + 12345, "host": os.uname().nodename, "started": "1"}))
    os.utime(out / ".lock", (0, 0))
    r = audit(tiny_model, task, PROTO, out=out, exec_config=ExecConfig(max_batch_rows=8))
    assert r.n == len(task) and not (out / ".lock").exists()


def test_temporary_names_are_unique_to_the_writer(tmp_path, monkeypatch) -> None:
    seen: list[str] = []
    real = os.replace

    def spy(src, dst):
        seen.append(Path(src).name)
        return real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    write_json(tmp_path / "a.json", {"x": 1})
    write_json(tmp_path / "a.json", {"x": 2})
    assert len(set(seen)) == 2 and all(f".{os.getpid()}." in name and name != "a.json.tmp" for name in seen)


# --- item 9: rescore writes the header last ---------------------------------------------------------

def _crash_when_moving(monkeypatch, name: str):
    import reachlens.store.run_dir as mod

    real = os.replace

    def replace(src, dst):
        if Path(dst).name == name and Path(src).name != name:
            raise OSError(f"simulated crash while moving {name}")
        return real(src, dst)

    monkeypatch.setattr(mod.os, "replace", replace)


def test_a_rescore_that_crashes_before_it_commits_changes_nothing(tiny_model, task, tmp_path, monkeypatch) -> None:
    out = tmp_path / "d"
    first = audit(tiny_model, task, PROTO, out=out, exec_config=ExecConfig(max_batch_rows=8))
    import reachlens.store.run_dir as mod

    real = mod.write_durably

    def crash(path, write, **kw):
        if path.name == "questions.parquet":
            raise OSError("simulated crash while staging the questions table")
        return real(path, write, **kw)

    monkeypatch.setattr(mod, "write_durably", crash)
    with pytest.raises(OSError, match="simulated crash"):
        rescore(out, grader="math")
    monkeypatch.undo()
    assert PartsDir(out).protocol().grader == "numeric"  # the header still matches the stored grades
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    resumed = audit(tiny_model, task, PROTO, out=out, exec_config=ExecConfig(max_batch_rows=8))  # not blocked
    pd.testing.assert_frame_equal(resumed.samples, first.samples)


def test_a_rescore_that_crashes_after_it_commits_is_completed(tiny_model, task, tmp_path, monkeypatch) -> None:
    out = tmp_path / "d"
    audit(tiny_model, task, PROTO, out=out, exec_config=ExecConfig(max_batch_rows=8))
    _crash_when_moving(monkeypatch, "run.json")  # tables and summary moved, header not yet
    with pytest.raises(OSError, match="simulated crash"):
        rescore(out, grader="math")
    monkeypatch.undo()
    with pytest.raises(ReachlensError, match="holds a rewrite that was interrupted"):
        AuditResult.load(out)  # a reader never commits the journal
    convert(out)  # a writer does: it finishes the journaled rewrite
    done = AuditResult.load(out)
    assert done.protocol.grader == "math" and PartsDir(out).protocol().grader == "math"
    again = rescore(out)  # the stored grades are the math grader's
    pd.testing.assert_frame_equal(again.samples, done.samples)
    pd.testing.assert_frame_equal(again.questions, done.questions)
    assert json.loads((out / "summary.json").read_text())["protocol_hash"] == done.protocol.hash


# --- item 10: NaN never in summary.json ---------------------------------------------------------------

def test_summary_json_holds_null_for_undefined_numbers_and_reads_back_nan(tmp_path) -> None:
    def strict(text):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))

    from conftest import fake_audit

    run = fake_audit([True, False], [1, 0]).save(tmp_path / "run")  # a complete run whose summary we replace
    write_json(run / "summary.json", {"D": math.nan, "O_K": 0.5, "pass_at_k": {"1": math.inf}})
    assert strict((run / "summary.json").read_text()) == {"D": None, "O_K": 0.5, "pass_at_k": {"1": None}}
    s = PartsDir(run).summary()
    assert math.isnan(s["D"]) and s["O_K"] == 0.5 and math.isnan(s["pass_at_k"]["1"])


def test_an_audit_with_no_graded_deployment_writes_null_d(tiny_model, task, tmp_path, monkeypatch) -> None:
    import reachlens.grading.numeric as numeric

    monkeypatch.setattr(numeric, "extract_numeric_answer", lambda text: 1 / 0)  # every grade fails
    r = audit(tiny_model, task, PROTO, out=tmp_path / "d", exec_config=ExecConfig(max_batch_rows=8))
    assert math.isnan(r.D) and r.summary()["n_unscored_samples"] == len(task) * PROTO.k
    raw = json.loads((tmp_path / "d" / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert raw["D"] is None and raw["n_unscored_deployed"] == len(task)
