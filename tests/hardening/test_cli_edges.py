"""Edges of the audit and compare commands (issue 36, third pass, "Low").

Before: ``--stop '\\x'`` was a UnicodeDecodeError traceback; a stop string of 100,000 characters was still building
its table after 70 s; a killed pool worker was a BrokenProcessPool traceback; a full disk while recording
``failed`` was a traceback chained on the error that stopped the run; a comparison allowed across dtypes
(``--allow dtype``) recorded and printed only the base side's dtype, and the refusal suggested the Python form
``allow=('dtype',)`` to a CLI user.
"""

from __future__ import annotations

import errno
import json
import os
import signal

import pytest
from hostile import cli, copy_of, edit_record, error_line
from pandas.testing import assert_frame_equal

from reachlens import Protocol, audit, load_task, read_run
from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig

AUDIT = ["audit", "zoo:base", "--task", "arith", "--n", "2", "--k", "2", "--max-new-tokens", "4"]


@pytest.mark.parametrize("stop, says", [("\\x", "holds a broken escape (truncated \\xXX escape)"),
                                        ("ab\\u12", "holds a broken escape (truncated \\uXXXX escape)"),
                                        ("x" * 100_000, "a stop string of 100,000 characters")])
def test_a_bad_stop_string_is_one_line_before_anything_loads(tmp_path, capsys, stop, says) -> None:
    code, _, err = cli(capsys, *AUDIT, "--stop", stop, "--out", tmp_path / "run")
    assert code == 2 and says in error_line(err)
    assert not (tmp_path / "run").exists()


def test_stop_strings_are_bounded_in_the_protocol_itself() -> None:
    from reachlens.protocol import MAX_STOP_CHARS, MAX_STOPS

    Protocol("arith", stop=("x" * MAX_STOP_CHARS,))
    with pytest.raises(ReachlensError, match="longer than 1,000"):
        Protocol("arith", stop=("\n", "x" * (MAX_STOP_CHARS + 1)))
    with pytest.raises(ReachlensError, match="more than 100"):
        Protocol("arith", stop=tuple(str(i) for i in range(MAX_STOPS + 1)))


def test_a_full_disk_while_recording_failed_reports_the_first_error(tmp_path, capsys, monkeypatch) -> None:
    """The run's first batch hits a full disk, and so does writing ``failed``: one line naming the batch, the
    record left ``running`` (read as interrupted); with room again the same command completes the run."""
    import reachlens.store.files as files

    out = tmp_path / "run"
    real = files.os.replace
    started = []

    def full(src, dst, *a, **k):
        if os.path.basename(dst) == "run.json" and not started:
            started.append(dst)  # the run's first record goes through
        elif os.path.basename(dst).endswith((".parquet", "run.json")):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst, *a, **k)

    monkeypatch.setattr(files.os, "replace", full)
    code, _, err = cli(capsys, *AUDIT, "--out", out)
    assert code == 2 and "no space left to write" in error_line(err) and ".samples.parquet" in error_line(err)
    assert json.loads((out / "run.json").read_text())["status"] == "running"
    monkeypatch.undo()
    assert read_run(out).record.status == "interrupted"
    code, _, err = cli(capsys, *AUDIT, "--out", out)
    assert code == 0, err
    assert read_run(out).record.status == "complete"


def test_a_killed_pool_worker_is_one_line_and_the_resume_completes(tmp_path, monkeypatch) -> None:
    import concurrent.futures

    from reachlens.runner import ProcessPool

    task = load_task("arith", n=3)
    protocol = Protocol("arith", k=2, temperature=1.0, max_new_tokens=4)
    ex = ExecConfig(max_batch_rows=3)
    real = concurrent.futures.ProcessPoolExecutor.submit
    killed = []

    def submit_then_kill(self, *a, **k):
        future = real(self, *a, **k)
        if not killed:
            for process in list(self._processes.values()):
                os.kill(process.pid, signal.SIGKILL)
                killed.append(process.pid)
        return future

    monkeypatch.setattr(concurrent.futures.ProcessPoolExecutor, "submit", submit_then_kill)
    out = tmp_path / "run"
    with ProcessPool(1) as pool, pytest.raises(ReachlensError) as err:
        audit("zoo:base", task, protocol, out=out, exec_config=ex, executor=pool)
    assert killed and "a worker process died while decoding questions" in str(err.value)
    assert "run the same command again to resume" in str(err.value) and "\n" not in str(err.value)
    monkeypatch.undo()
    resumed = audit("zoo:base", task, protocol, out=out, exec_config=ex)
    reference = audit("zoo:base", task, protocol, out=tmp_path / "reference", exec_config=ex)
    assert resumed.record.status == "complete"
    assert_frame_equal(resumed.questions, reference.questions)
    assert_frame_equal(resumed.samples, reference.samples)


def test_allow_dtype_records_both_sides_and_the_refusal_names_the_flag(finished_audit, tmp_path, capsys) -> None:
    base = copy_of(finished_audit, tmp_path / "base")
    trained = copy_of(finished_audit, tmp_path / "trained")
    record = json.loads((trained / "run.json").read_text())
    edit_record(trained, exec={**record["exec"], "dtype": "bfloat16"})
    code, _, err = cli(capsys, "compare", base, trained, "--out", tmp_path / "cmp")
    line = error_line(err)
    assert code == 2 and "dtype" in line and "--allow dtype on the command line" in line
    code, _, err = cli(capsys, "compare", base, trained, "--allow", "dtype", "--out", tmp_path / "cmp")
    assert code == 0, err
    dtype = json.loads((tmp_path / "cmp" / "run.json").read_text())["exec"]["dtype"]
    assert dtype == f"{record['exec']['dtype']} (base), bfloat16 (trained)"
    code, out, _ = cli(capsys, "show", tmp_path / "cmp")
    assert code == 0 and "bfloat16 (trained)" in out


def test_a_protocol_refusal_names_the_flag_too(finished_audit, tmp_path, capsys) -> None:
    base = copy_of(finished_audit, tmp_path / "base")
    trained = copy_of(finished_audit, tmp_path / "trained")
    record = json.loads((trained / "run.json").read_text())
    record["protocol"]["top_p"] = 0.9
    record["protocol_hash"] = Protocol.from_dict(record["protocol"]).hash
    (trained / "run.json").write_text(json.dumps(record))
    code, _, err = cli(capsys, "compare", base, trained, "--out", tmp_path / "cmp")
    assert code == 2 and "--allow top_p on the command line" in error_line(err)
