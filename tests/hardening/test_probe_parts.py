"""A probe run's parts (issue 36, finding 9 and the part names; issue 37): read through the store, checked whole.

* a truncated part is one line naming it and the fix, not an ``ArrowInvalid`` traceback;
* a part that lacks one question's rows is decoded again on resume, and the run then equals an uninterrupted one;
  a complete bank that lacks a candidate is refused when read: a run is ``complete`` only with every question's
  greedy row and each probe's full budget;
* parts are named by numbers of any width (``100.0.candidates.parquet``, ``0.100000.samples.parquet``): the 100th
  unit's part is read back on resume, not decoded again;
* ``kill -9`` mid-run and a resume give the bank of an uninterrupted run; ``--device``/``--dtype`` are recorded in
  ``run.json`` and checked on resume.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from reachlens import ExecConfig, Protocol, ReachlensError, load_task, read_run
from reachlens.cli import main
from reachlens.probes import probe
from reachlens.probes.job import ProbeShard
from reachlens.store import PartsDir, part_name

N, TOKENS = 4, 8
GREEDY = Protocol.greedy("arith", max_new_tokens=TOKENS)
EXEC = ExecConfig(max_batch_rows=8)  # four slices of the arms unit, two of the sampling unit
SPECS = ["sampling:k=3:temperature=1", "graft:kind=zero:layer=1"]


@pytest.fixture(scope="module")
def task():
    return load_task("arith", n=N)


@pytest.fixture(scope="module")
def whole(tiny_model, task):
    """The reference: the run uninterrupted, in memory."""
    return probe(tiny_model, task, SPECS, protocol=GREEDY, exec_config=EXEC)


class Stop(Exception):
    pass


def stopped_after(tiny_model, task, out: Path, parts: int) -> None:
    """The run into ``out``, stopped once ``parts`` of its slices are written (as a crash would leave it)."""
    def progress(done: int, total: int) -> None:
        if len(PartsDir(out).part_files()) >= parts:
            raise Stop

    with pytest.raises(Stop):
        probe(tiny_model, task, SPECS, protocol=GREEDY, exec_config=EXEC, out=out, progress=progress)


def cli(capsys, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def test_a_truncated_part_is_one_line_naming_it(tiny_model, tiny_dir, task, tmp_path, capsys):
    out = tmp_path / "run"
    stopped_after(tiny_model, task, out, 2)
    part = sorted((out / "parts").glob("*.parquet"))[0]
    part.write_bytes(part.read_bytes()[:40])
    code, err = cli(capsys, "probe", tiny_dir, "--task", "arith", "--n", N, "--max-new-tokens", TOKENS,
                    "--max-batch-rows", 8, *[x for s in SPECS for x in ("--probe", s)], "--out", out)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err and len(lines) == 1  # one line, not an ArrowInvalid traceback
    assert str(part) in lines[0] and "delete it and re-run the same probe command" in lines[0]


def test_a_part_lacking_a_question_is_decoded_again_and_the_run_equals_an_uninterrupted_one(
        tiny_model, task, whole, tmp_path, monkeypatch):
    out = tmp_path / "run"
    stopped_after(tiny_model, task, out, 3)
    files = PartsDir(out).part_files()
    key = next(k for k, f in files.items() if k[0] == 0)
    cut = pd.read_parquet(files[key]["candidates"])
    first = cut["question_id"].iloc[0]
    cut[cut["question_id"] != first].to_parquet(files[key]["candidates"], index=False)  # a valid part, one question short
    decoded = []
    real = ProbeShard.decode
    monkeypatch.setattr(ProbeShard, "decode", lambda self, model, part: decoded.append(part) or real(self, model, part))
    again = probe(tiny_model, task, SPECS, protocol=GREEDY, exec_config=EXEC, out=out)
    assert (key[0], key[1]) in [p[:2] for p in decoded]  # the short part was decoded again
    assert again.record.status == "complete"
    pd.testing.assert_frame_equal(again.candidates, whole.candidates)


def test_a_complete_bank_lacking_a_candidate_is_refused_when_read(tiny_model, task, tmp_path):
    out = tmp_path / "run"
    probe(tiny_model, task, SPECS, protocol=GREEDY, exec_config=EXEC, out=out)
    bank = pd.read_parquet(out / "candidates.parquet")
    drop = bank.index[(bank["probe"] == SPECS[0]) & (bank["candidate_idx"] == 2)][0]
    bank.drop(index=drop).to_parquet(out / "candidates.parquet", index=False)
    with pytest.raises(ReachlensError, match=r"is not whole: question '.+' has 2 distinct candidate\(s\) of "
                                             r"'sampling:k=3:temperature=1'"):
        read_run(out)


def test_part_names_of_any_width_sort_and_read_back(tmp_path):
    store = PartsDir(tmp_path / "d")
    store.path.mkdir()
    (store.path / "parts").mkdir()
    one = pd.DataFrame({"x": [1]})
    for key in ((100, 0), (2, 100000), (2, 99999), (10, 5)):
        one.to_parquet(store.path / "parts" / part_name(key, "candidates"), index=False)
    assert part_name((100, 0), "candidates") == "100.0.candidates.parquet"
    assert list(store.part_files()) == [(2, 99999), (2, 100000), (10, 5), (100, 0)]  # numeric order


def test_the_hundredth_unit_s_part_is_read_back_on_resume(tiny_model, tmp_path, monkeypatch):
    """A run of 99 graft probes (unit 0) and a sampling probe at position 99 (unit 100): killed once every part is
    written, it resumes decoding nothing (before, ``100.00000.parquet`` was never read back)."""
    task = load_task("arith", n=2)
    specs = [f"graft:kind=noise:layer=0:seed={i}" for i in range(99)] + ["sampling:k=1:temperature=1"]
    out = tmp_path / "run"

    def progress(done: int, total: int) -> None:
        if done == total:
            raise Stop

    with pytest.raises(Stop):
        probe(tiny_model, task, specs, protocol=GREEDY, exec_config=ExecConfig(max_batch_rows=4096), out=out,
              progress=progress)
    assert (out / "parts" / "100.0.candidates.parquet").is_file()
    monkeypatch.setattr(ProbeShard, "decode", lambda *a: pytest.fail(f"decoded {a[-1]} again"))
    again = probe(tiny_model, task, specs, protocol=GREEDY, exec_config=ExecConfig(max_batch_rows=4096), out=out)
    assert again.record.status == "complete" and len(again.candidates) == 2 * (1 + 99 + 1)


WRITER = """
import sys, time
from pathlib import Path
import reachlens.models, reachlens.probes, reachlens.tasks  # the slow imports, first
from reachlens.cli.main import main
start = Path(sys.argv[1])
print("ready", flush=True)
while not start.exists():
    time.sleep(0.005)
sys.exit(main(sys.argv[2:]))
"""


def probe_argv(model: Path, out: Path, *extra: str) -> list[str]:
    return ["probe", str(model), "--task", "arith", "--n", "6", "--max-new-tokens", "12", "--max-batch-rows", "8",
            "--probe", "sampling:k=3:temperature=1", "--probe", "graft:kind=zero,noise:layer=1", "--out", str(out),
            *extra]


def test_kill_9_mid_probe_then_resume_equals_an_uninterrupted_run(tiny_dir, tmp_path, capsys):
    writer = tmp_path / "writer.py"
    writer.write_text(WRITER)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    proc = subprocess.Popen([sys.executable, str(writer), str(tmp_path / "go"), *probe_argv(tiny_dir, tmp_path / "cut")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "ready"
    (tmp_path / "go").touch()
    deadline = time.monotonic() + 300
    while len(PartsDir(tmp_path / "cut").part_files()) < 2:
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.monotonic() < deadline, "no part written in 300 s"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert PartsDir(tmp_path / "cut").record().status == "interrupted"  # running on disk, nobody holds its lock
    assert main(probe_argv(tiny_dir, tmp_path / "cut")) == 0
    assert main(probe_argv(tiny_dir, tmp_path / "whole")) == 0
    capsys.readouterr()
    cut, whole = read_run(tmp_path / "cut"), read_run(tmp_path / "whole")
    assert set(cut.tables()) == set(whole.tables()) and "candidates" in whole.tables()
    for name, df in whole.tables().items():  # the bank and every table made from it
        pd.testing.assert_frame_equal(cut.tables()[name], df, obj=name)
    assert not (tmp_path / "cut" / "parts").exists() and not (tmp_path / "cut" / ".lock").exists()
    # the execution settings are part of the run: recorded, and another dtype is refused on resume
    exec_ = read_run(tmp_path / "whole").record.exec
    assert exec_ == {"max_batch_rows": 8, "dtype": "float32", "device": "cpu"}
    code = main(probe_argv(tiny_dir, tmp_path / "whole", "--dtype", "bfloat16"))
    err = capsys.readouterr().err
    assert code == 2 and "exec.dtype: 'float32' != 'bfloat16'" in err
