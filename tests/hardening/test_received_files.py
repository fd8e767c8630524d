"""Odd files in a received run directory are one line each, never a hang, a traceback or a walk out of the tree
(issue 36, third pass, the store's "Low" findings).

Before: ``ln -s /dev/zero DIR/summary.json`` made ``show`` read until a MemoryError; a symlink loop made
``convert`` and ``list_runs`` walk exponentially; a 100,000-deep ``run.json`` was a RecursionError traceback;
``convert`` took a ``format_version`` of ``"2"`` or ``true`` as format 0 (or 1) and rewrote the run. Now a run's
files are read only as regular files of bounded size (``store.files.regular_file``), walks follow no link, a
record nested too deeply is one line, and a ``format_version`` that no reachlens wrote is refused.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from hostile import cli, copy_of, edit_record, error_line, snapshot

from reachlens.store import list_runs


@pytest.mark.parametrize("name", ["summary.json", "run.json", "questions.parquet"])
def test_a_run_file_linked_to_dev_zero_is_one_line(finished_audit, tmp_path, capsys, name) -> None:
    run = copy_of(finished_audit, tmp_path / "a")
    (run / name).unlink()
    (run / name).symlink_to("/dev/zero")
    for command in {"summary.json": ("show",), "run.json": ("show", "report")}.get(name, ("report",)):
        code, _, err = cli(capsys, command, run)
        assert code == 2 and "is not a regular file" in error_line(err) and name in error_line(err)


def _with_deadline(fn, seconds: float, release) -> None:
    """Run ``fn`` in a thread; if it is still running after ``seconds``, ``release`` it and fail."""
    box: dict = {}
    thread = threading.Thread(target=lambda: box.setdefault("out", fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        release()
        thread.join(30)
        pytest.fail(f"blocked for {seconds} s")
    return box.get("out")


@pytest.mark.parametrize("name", ["summary.json", "questions.parquet", "report.html", "report.md"])
def test_a_fifo_in_a_run_is_refused_never_waited_on(finished_audit, tmp_path, capsys, name) -> None:
    run = copy_of(finished_audit, tmp_path / "a")
    (run / name).unlink(missing_ok=True)
    os.mkfifo(run / name)

    def release() -> None:  # a writer at the FIFO's other end lets a blocked open return
        fd = os.open(run / name, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)

    command = "show" if name == "summary.json" else "report"  # a report reads no summary.json
    code, _, err = _with_deadline(lambda: cli(capsys, command, run), 120, release)
    assert code == 2 and "is not a regular file" in error_line(err)
    assert not (run / "report.html").is_file()  # refused before either page is written


def test_a_record_nested_100000_deep_is_one_line(finished_audit, tmp_path, capsys) -> None:
    run = copy_of(finished_audit, tmp_path / "a")
    (run / "run.json").write_text('{"options": ' + "[" * 100_000 + "]" * 100_000 + "}")
    for command in ("show", "report", "convert"):
        code, _, err = cli(capsys, command, run)
        assert code == 2 and "nests too deeply" in error_line(err)


def test_symlink_loops_are_not_followed_by_convert_or_list_runs(finished_audit, tmp_path, capsys) -> None:
    root = tmp_path / "runs"
    run = copy_of(finished_audit, root / "a")
    for i in range(12):  # followed, these would make 2**12 paths (and more, each level)
        (run / f"loop{i}").symlink_to(root, target_is_directory=True)
    (root / "out").symlink_to(tmp_path, target_is_directory=True)  # a link out of the tree
    outside = copy_of(finished_audit, tmp_path / "elsewhere")
    edit_record(outside, format_version=...)  # format 0: convert would rewrite it, were the link followed
    before = snapshot(tmp_path)
    assert [info.path for info in list_runs(root)] == [run]
    code, _, err = cli(capsys, "convert", root)
    assert code == 0, err
    assert snapshot(tmp_path) == before and (outside / "run.json").is_file()


@pytest.mark.parametrize("version", ["2", True, 1.5, -1, [2], {"v": 2}])
def test_convert_refuses_a_format_version_no_reachlens_wrote(finished_audit, tmp_path, capsys, version) -> None:
    run = copy_of(finished_audit, tmp_path / "a")
    edit_record(run, format_version=version)
    before = snapshot(tmp_path)
    code, _, err = cli(capsys, "convert", run)
    assert code == 2 and f"format_version {version!r}, which no reachlens wrote" in error_line(err)
    assert snapshot(tmp_path) == before  # nothing rewritten as format 0


def test_a_summary_larger_than_any_run_writes_is_one_line(finished_audit, tmp_path, capsys, monkeypatch) -> None:
    import reachlens.store.files as files

    run = copy_of(finished_audit, tmp_path / "a")
    monkeypatch.setattr(files, "JSON_BYTES", 64)  # the bound, small for the test
    (run / "summary.json").write_text(json.dumps({"pad": "x" * 100}))
    code, _, err = cli(capsys, "show", run)
    assert code == 2 and "is larger than" in error_line(err)
