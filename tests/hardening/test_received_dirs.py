"""A run directory someone sent you never writes outside itself (issue 36, third pass, findings 1 and 2).

Before: ``RunDir._recover`` replayed every ``(staged, target)`` pair of a ``.rewrite.json`` journal with
``os.replace``, unchecked, and every reader recovered, so ``reachlens show`` of a received directory moved a file
it carried onto any path (``~/.bashrc``); ``reachlens convert`` of a format-0 length control renamed its ``base/``
folder to a path its record named (``max_new_tokens: "x/../../../planted"``). Now a reader never commits a
journal, a writer commits only moves of the run's own files, and a name a record holds is a single folder name.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hostile import cli, copy_of, error_line, snapshot

from reachlens.store import read_record, read_run


def _poisoned(finished_audit: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of a finished audit carrying a payload and a journal that moves it onto ``tmp_path/victim.txt``."""
    shared = copy_of(finished_audit, tmp_path / "received" / "shared")
    (shared / "payload").write_text("echo PWNED\n")
    victim = tmp_path / "victim.txt"
    (shared / ".rewrite.json").write_text(json.dumps({"moves": [["payload", str(victim.resolve())]]}))
    return shared, victim


@pytest.mark.parametrize("command", ["show", "report", "rescore", "convert"])
def test_a_journal_in_a_received_directory_moves_nothing(finished_audit, tmp_path, capsys, command) -> None:
    shared, victim = _poisoned(finished_audit, tmp_path)
    before = snapshot(tmp_path)
    code, _, err = cli(capsys, command, shared)
    assert code == 2, err
    assert ".rewrite.json" in error_line(err)
    assert not victim.exists()
    after = snapshot(tmp_path)
    assert {k: v for k, v in after.items() if not k.endswith(("report.html", "report.md"))} == before


def test_readers_in_python_refuse_the_journal_and_move_nothing(finished_audit, tmp_path) -> None:
    from reachlens.errors import ReachlensError

    shared, victim = _poisoned(finished_audit, tmp_path)
    before = snapshot(tmp_path)
    for read in (read_run, read_record):
        with pytest.raises(ReachlensError, match=r"interrupted \(\.rewrite\.json\); finish it with `reachlens convert"):
            read(shared)
    assert snapshot(tmp_path) == before and not victim.exists()


@pytest.mark.parametrize("moves", [
    [["payload", "../victim.txt"]],                       # a target outside the directory
    [[".run.json.1.0123abcd.tmp", "../run.json"]],        # a staged name of the right shape, a target outside
    [["../outside/.run.json.1.0123abcd.tmp", "run.json"]],  # a staged file outside
    [[".x.parquet.1.0123abcd.tmp", "run.json"]],          # a temporary of another file
    [["payload", "questions.parquet"]],                   # a file of the run replaced by one it carried
    "not a list",
])
def test_a_writer_commits_only_moves_of_the_runs_own_files(finished_audit, tmp_path, moves) -> None:
    from reachlens.errors import ReachlensError
    from reachlens.store import PartsDir

    shared = copy_of(finished_audit, tmp_path / "shared")
    (shared / "payload").write_text("echo PWNED\n")
    (shared / ".run.json.1.0123abcd.tmp").write_text("{}")
    (shared / ".x.parquet.1.0123abcd.tmp").write_text("{}")
    (shared / ".rewrite.json").write_text(json.dumps({"moves": moves}))
    before = snapshot(tmp_path)
    if moves == "not a list":  # a journal torn while written: the rewrite never began, it is dropped
        PartsDir(shared).recover()
        assert not (shared / ".rewrite.json").exists()
        assert (shared / "run.json").read_bytes() == before["shared/run.json"][2]
        return
    with pytest.raises(ReachlensError, match="not a rewrite of this run's own files"):
        PartsDir(shared).recover()  # what every resume, rescore and convert does first
    assert snapshot(tmp_path) == before


def test_a_symlinked_staged_file_is_never_moved(finished_audit, tmp_path) -> None:
    from reachlens.errors import ReachlensError
    from reachlens.store import PartsDir

    shared = copy_of(finished_audit, tmp_path / "shared")
    secret = tmp_path / "secret"
    secret.write_text("private")
    (shared / ".summary.json.1.0123abcd.tmp").symlink_to(secret)
    (shared / ".rewrite.json").write_text(json.dumps({"moves": [[".summary.json.1.0123abcd.tmp", "summary.json"]]}))
    with pytest.raises(ReachlensError, match="not a rewrite"):
        PartsDir(shared).recover()
    assert secret.read_text() == "private" and (shared / "summary.json").is_file()
    assert not (shared / "summary.json").is_symlink()


def test_an_interrupted_rewrite_of_ones_own_is_finished_by_convert_not_by_a_reader(
        finished_audit, tmp_path, capsys, monkeypatch) -> None:
    """rescore crashes after its commit point (tables moved, the header not): a reader refuses, naming the fix;
    `reachlens convert` finishes the rewrite; the reader then reads the rescored run."""
    import reachlens.store.run_dir as run_dir

    out = copy_of(finished_audit, tmp_path / "a")
    real = os.replace

    def crash(src, dst):
        if Path(dst).name == "run.json":
            raise OSError("simulated crash while moving the header")
        return real(src, dst)

    monkeypatch.setattr(run_dir.os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):  # a crash is a traceback, not a user error
        cli(capsys, "rescore", out, "--grader", "math")
    monkeypatch.undo()
    assert (out / ".rewrite.json").is_file()
    code, _, err = cli(capsys, "show", out)
    assert code == 2 and f"finish it with `reachlens convert {out}`" in error_line(err)
    code, _, err = cli(capsys, "convert", out)
    assert code == 0, err
    assert not (out / ".rewrite.json").exists()
    assert read_run(out).protocol.grader == "math"


def test_convert_never_renames_a_folder_to_a_path_its_record_names(finished_audit, tmp_path, capsys) -> None:
    """A format-0 length control whose max_new_tokens is a path: its base/ folder stays where it is."""
    root = tmp_path / "received"
    control = root / "len"
    for side in ("base", "trained"):
        copy_of(finished_audit, control / side)
    header = json.loads((finished_audit / "run.json").read_text())
    v0 = {k: header[k] for k in ("protocol", "model", "data")}
    v0.update(kind="length_control", options={"base_dir": "base", "trained_dir": "trained",
                                               "max_new_tokens": "x/../../../planted"})
    (control / "run.json").write_text(json.dumps(v0))
    before = snapshot(tmp_path)
    code, _, err = cli(capsys, "convert", control)
    assert code == 2 and "max_new_tokens=x/../../../planted" in error_line(err)
    assert (control / "base" / "run.json").is_file()
    assert not any(p.name.startswith("base--") for p in tmp_path.rglob("*"))
    assert not (tmp_path / "planted").exists() and not (root.parent / "planted").exists()
    assert set(snapshot(tmp_path)) == set(before)
