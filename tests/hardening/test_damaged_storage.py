"""Damaged storage never turns into a traceback or a silently short audit (issue 25, second pass).

Before issue 25: a truncated or corrupt part file made resume, report, compare and rescore die with a pyarrow
traceback; deleting the named samples part gave an audit that "finished" with that question's K samples missing,
and ``rescore`` then reported n_scored 0 with a summary still saying k=2; ``rescore`` of an unfinished audit
wrote ``summary.json``; ``report`` overwrote a ``report.md`` / ``report.html`` it did not write, non-atomically.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import StopAudit, stop_after
from hostile import cli, copy_of, edit_record, error_line
from pandas.testing import assert_frame_equal

from reachlens import audit
from reachlens.errors import ReachlensError
from reachlens.store import PartsDir, audit_tables, read_run


@pytest.fixture(scope="module")
def interrupted(tiny_model, audit_setup, tmp_path_factory) -> Path:
    """The session audit stopped after two of its three batches: two parts on disk, status interrupted."""
    task, protocol, ex = audit_setup
    out = tmp_path_factory.mktemp("interrupted") / "audit"
    with pytest.raises(StopAudit):
        audit(tiny_model, task, protocol, out=out, exec_config=ex, progress=stop_after(2))
    assert sorted(p.name for p in (out / "parts").iterdir()) == [
        "0.0.questions.parquet", "0.0.samples.parquet", "0.1.questions.parquet", "0.1.samples.parquet"]
    return out


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if how == "truncated" else data[:64] + b"\xff" * 256 + data[320:])


@pytest.mark.parametrize("how", ["truncated", "corrupt"])
def test_a_damaged_part_is_one_line_naming_it_for_resume_and_report(interrupted, tiny_dir, tmp_path, capsys, how) -> None:
    run = copy_of(interrupted, tmp_path / "a")
    part = run / "parts" / "0.1.samples.parquet"
    _damage(part, how)
    resume = ["audit", tiny_dir, "--task", "arith", "--n", "3", "--k", "2", "--temperature", "1.0",
              "--max-new-tokens", "4", "--max-batch-rows", "3", "--out", run]
    for argv in (resume, ["report", run]):
        code, out, err = cli(capsys, *argv)
        line = error_line(err)
        assert code == 2 and str(part) in line, (argv[0], line)
        assert "delete it and re-run the same audit command" in line
    code, out, _ = cli(capsys, "show", run)  # show reads the record alone: the damage does not stop it
    assert code == 0 and "status:     failed" in out
    assert not (run / "summary.json").exists()


@pytest.mark.parametrize("command", ["compare", "rescore", "report"])
def test_a_damaged_table_of_a_finished_audit_is_one_line(finished_audit, tmp_path, capsys, command) -> None:
    run = copy_of(finished_audit, tmp_path / "a")
    _damage(run / "samples.parquet", "truncated")
    code, _, err = cli(capsys, command, *([finished_audit] if command == "compare" else []), run)
    assert code == 2 and str(run / "samples.parquet") in error_line(err)


def test_a_deleted_samples_part_is_redone_on_resume(
        interrupted, finished_audit, tiny_model, audit_setup, tmp_path) -> None:
    """The obvious repair (delete the damaged part) gives the audit an uninterrupted run gives, all K samples."""
    run = copy_of(interrupted, tmp_path / "a")
    (run / "parts" / "0.0.samples.parquet").unlink()
    questions, _ = audit_tables(PartsDir(run))
    assert set(questions["question_id"]) == {audit_setup[0].questions[1].question_id}  # question 0 is not finished
    task, protocol, ex = audit_setup
    resumed = audit(tiny_model, task, protocol, out=run, exec_config=ex)
    whole = read_run(finished_audit)
    assert (resumed.samples.groupby("question_id").size() == protocol.k).all() and len(resumed.samples) == 3 * protocol.k
    assert_frame_equal(resumed.samples, whole.samples)
    assert_frame_equal(resumed.questions, whole.questions)


def test_a_complete_audit_lacking_samples_is_refused_naming_the_question(
        finished_audit, tiny_model, audit_setup, tmp_path, capsys) -> None:
    run = copy_of(finished_audit, tmp_path / "a")
    samples = pd.read_parquet(run / "samples.parquet")
    qid = samples["question_id"].iloc[-1]
    samples[~((samples["question_id"] == qid) & (samples["candidate_idx"] == 1))].to_parquet(run / "samples.parquet")
    with pytest.raises(ReachlensError, match=rf"question '{qid}' has 1 of its 2 samples"):
        read_run(run)
    for argv in (["report", run], ["rescore", run]):
        code, _, err = cli(capsys, *argv)
        assert code == 2 and f"question '{qid}' has 1 of its 2 samples" in error_line(err), argv
    # the fix the message names: resume redoes that question
    task, protocol, ex = audit_setup
    redone = audit(tiny_model, task, protocol, out=run, exec_config=ex)
    assert_frame_equal(redone.samples, read_run(finished_audit).samples)


def test_rescore_of_an_unfinished_audit_writes_nothing(interrupted, tmp_path, capsys) -> None:
    run = copy_of(interrupted, tmp_path / "a")
    before = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    code, _, err = cli(capsys, "rescore", run)
    assert code == 2 and "has not finished (status failed)" in error_line(err)  # stopped by an error
    after = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before and not (run / "summary.json").exists()
    record = json.loads((run / "run.json").read_text())
    edit_record(run, status="running", finished=None)  # as a kill -9 leaves it: reads interrupted
    code, _, err = cli(capsys, "rescore", run)
    assert code == 2 and "has not finished (status interrupted)" in error_line(err)
    assert record["status"] == "failed" and not (run / "summary.json").exists()


def test_report_never_overwrites_a_page_it_did_not_write(finished_audit, tmp_path, capsys) -> None:
    run = copy_of(finished_audit, tmp_path / "a")
    (run / "report.md").write_text("my notes")
    code, _, err = cli(capsys, "report", run)
    line = error_line(err)
    assert code == 2 and "report.md" in line and "--force" in line and "--out" in line
    assert (run / "report.md").read_text() == "my notes"
    assert cli(capsys, "report", run, "--out", tmp_path / "elsewhere")[0] == 0
    assert cli(capsys, "report", run, "--force")[0] == 0
    assert cli(capsys, "report", run)[0] == 0  # a page it wrote is its own to replace
    assert (run / "report.md").read_text().startswith("<!-- generator: reachlens report -->")


def test_a_report_is_written_atomically(finished_audit, tmp_path, monkeypatch) -> None:
    """A write that fails midway (a full disk) leaves the old page whole, never half a new one."""
    import errno

    from reachlens.errors import DiskFullError
    from reachlens.report import report_run

    run = copy_of(finished_audit, tmp_path / "a")
    report_run(run)
    old = (run / "report.html").read_text()
    real = Path.write_text

    def fill_disk(self, text, *a, **k):
        real(self, text[: len(text) // 3], *a, **k)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", fill_disk)
    with pytest.raises(DiskFullError):
        report_run(run)
    monkeypatch.undo()
    assert (run / "report.html").read_text() == old
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]
