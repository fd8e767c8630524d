"""One line and exit status 2 instead of a traceback, nothing already written lost (issue 25).

Before issue 25 each of these was a traceback or a silent acceptance: ``compare --allow nope``
was accepted; ``convert no/such/dir`` created the folders before failing; a ``--task jsonl`` line
nested thousands deep or holding an integer of more than 4,300 digits; ``--device meta``; a model
folder that needs its own code without ``--trust-remote-code``; ``reachlens show DIR | head``
(broken pipe); a full disk in the middle of an audit.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli_errors import error_line, run

from reachlens.execution import ExecConfig
from reachlens import Protocol, audit, load_task

@pytest.fixture
def no_model_load(monkeypatch):
    import reachlens.models

    monkeypatch.setattr(reachlens.models, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))


def test_compare_refuses_an_unknown_allowed_field_naming_the_known(capsys, tiny_model, tmp_path) -> None:
    from reachlens.errors import ReachlensError
    from reachlens.studies import compare

    task, proto = load_task("arith", n=2), Protocol("arith", k=2, temperature=1.0, max_new_tokens=4)
    for name in ("a", "b"):
        audit(tiny_model, task, proto, out=tmp_path / name, exec_config=ExecConfig(max_batch_rows=6))
    code, out, err = run(capsys, "compare", tmp_path / "a", tmp_path / "b", "--allow", "nope")
    line = error_line(err)
    assert code == 2 and "allow=('nope',)" in line and "prompt_format" in line and "temperature" in line and not out
    with pytest.raises(ReachlensError, match="'nope' is not a protocol field"):
        compare(tmp_path / "a", tmp_path / "b", allow=("prompt_format", "nope"))
    assert compare(tmp_path / "a", tmp_path / "b", allow=("prompt_format",)).summary()["n"] == 2


def test_convert_of_a_missing_directory_creates_nothing(capsys, tmp_path) -> None:
    code, _, err = run(capsys, "convert", tmp_path / "no" / "such" / "dir")
    assert code == 2 and "does not exist" in error_line(err)
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("line,reason", [
    ('{"question": "1+1=?", "answer": "2", "meta": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested"),
    ('{"question": "1+1=?", "answer": "2", "meta": ' + "[" * 500 + "]" * 500 + "}", "nested"),
    ('{"question": "1+1=?", "answer": "2", "n": ' + "7" * 5000 + "}", "4300 digits"),
])
def test_a_hostile_jsonl_line_is_one_line(capsys, tmp_path, no_model_load, line, reason) -> None:
    data = tmp_path / "q.jsonl"
    data.write_text('{"question": "2+2=?", "answer": "4"}\n' + line + "\n")
    code, _, err = run(capsys, "audit", "zoo:base", "--task", "jsonl", "--data", data, "--out", tmp_path / "r")
    line = error_line(err)
    assert code == 2 and f"{data}:2" in line and reason in line


def test_a_device_that_holds_no_values_is_one_line(capsys, tiny_dir, tmp_path) -> None:
    code, _, err = run(capsys, "audit", tiny_dir, "--task", "arith", "--n", "2", "--k", "2", "--device", "meta",
                       "--out", tmp_path / "r")
    assert code == 2 and "device 'meta'" in error_line(err)


def test_a_model_that_needs_its_own_code_names_the_flag(capsys, tiny_dir, tmp_path) -> None:
    import shutil

    folder = shutil.copytree(tiny_dir, tmp_path / "remote")
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="tiny-remote", auto_map={"AutoConfig": "configuration_x.XConfig",
                                                      "AutoModelForCausalLM": "modeling_x.XForCausalLM"})
    (folder / "config.json").write_text(json.dumps(config))
    code, _, err = run(capsys, "audit", folder, "--task", "arith", "--n", "2", "--k", "2", "--out", tmp_path / "r")
    assert code == 2 and "--trust-remote-code" in error_line(err)


def test_a_closed_pipe_ends_quietly(tmp_path) -> None:
    import reachlens
    from reachlens.store import RunDir, RunRecord

    code = Path(reachlens.__file__).resolve().parents[1]  # the reachlens this test imported

    run_dir = RunDir(tmp_path / "run")
    with run_dir.writer():
        run_dir.start(RunRecord.new("audit", Protocol("arith", k=2), {"spec": "zoo:base", "fingerprint": "unknown"}))
    read, write = os.pipe()
    os.close(read)  # `reachlens show DIR | head` after head has exited
    try:
        proc = subprocess.run([sys.executable, "-m", "reachlens", "show", str(tmp_path / "run")], stdout=write,
                              stderr=subprocess.PIPE, text=True, cwd=code, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(code)})
    finally:
        os.close(write)
    assert proc.stderr == "" and proc.returncode == 141  # as a Unix tool killed by SIGPIPE


def test_a_full_disk_is_one_line_and_keeps_the_finished_batches(capsys, tiny_dir, tmp_path, monkeypatch) -> None:
    import pandas as pd

    real = pd.DataFrame.to_parquet
    writes: list[str] = []

    def fills_up(self, path, *args, **kwargs):
        writes.append(str(path))
        if len(writes) > 2:  # the first batch's two parts fit, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_parquet", fills_up)
    argv = ["audit", tiny_dir, "--task", "arith", "--n", "4", "--k", "2", "--max-new-tokens", "4",
            "--max-batch-rows", "3", "--out", tmp_path / "r"]
    code, _, err = run(capsys, *argv)
    line = error_line(err)
    assert code == 2 and "no space left" in line and str(tmp_path / "r") in line and "free" in line
    parts = sorted(p.name for p in (tmp_path / "r" / "parts").iterdir())
    assert len(parts) == 2 and not any(p.endswith(".tmp") for p in parts), parts
    monkeypatch.setattr(pd.DataFrame, "to_parquet", real)
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "n=4" in out
