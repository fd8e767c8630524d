"""``kill -9`` at random moments of an audit, then resume: equal to an uninterrupted run; two writers
racing for one directory: one writes, the other is refused with one line naming the owner's pid
(issue 13, item 6 and "what it must show").

Each writer is a real ``reachlens audit`` process. It imports everything first and then waits for a
start file, so the random kill moments fall inside the audit itself (not in Python's start-up), and
two writers given the same start file reach the directory's lock at the same instant.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from reachlens.store import read_record

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import reachlens.models, reachlens.studies, reachlens.tasks  # the slow imports, first
    import transformer_lens.model_bridge
    from reachlens.cli.main import main
    start = Path(sys.argv[1])
    print("ready", flush=True)
    while not start.exists():
        time.sleep(0.005)
    sys.exit(main(sys.argv[2:]))
    """
)


@pytest.fixture(scope="module")
def writer(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("writer") / "writer.py"
    path.write_text(WRITER)
    return path


def start_writer(writer: Path, start: Path, model: Path, out: Path) -> subprocess.Popen:
    argv = ["audit", str(model), "--task", "arith", "--n", "8", "--k", "6", "--temperature", "1.0",
            "--max-new-tokens", "16", "--max-batch-rows", "7", "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    proc = subprocess.Popen([sys.executable, str(writer), str(start), *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    return proc


def tables(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    return pd.read_parquet(out / "questions.parquet"), pd.read_parquet(out / "samples.parquet")


def assert_same_run(out: Path, reference: Path) -> None:
    for mine, want in zip(tables(out), tables(reference)):
        pd.testing.assert_frame_equal(mine, want)
    assert not (out / ".lock").exists() and not (out / "parts").exists()
    assert not [p.name for p in out.rglob("*") if p.name.endswith(".tmp")]


@pytest.fixture(scope="module")
def uninterrupted(writer, tiny_dir, tmp_path_factory) -> tuple[Path, float]:
    """The reference: the same audit, never interrupted, and how long its audit took."""
    root = tmp_path_factory.mktemp("whole")
    proc = start_writer(writer, root / "go", tiny_dir, root / "run")
    t0 = time.monotonic()
    (root / "go").touch()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return root / "run", time.monotonic() - t0


def test_kill_9_at_random_moments_then_resume_equals_an_uninterrupted_run(writer, tiny_dir, tmp_path, uninterrupted) -> None:
    reference, duration = uninterrupted
    out = tmp_path / "run"
    rng = random.Random(13)
    cut_short = 0
    for round_ in range(3):
        go = tmp_path / f"go{round_}"
        proc = start_writer(writer, go, tiny_dir, out)
        go.touch()
        time.sleep(rng.uniform(0.0, duration))
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        if (out / "run.json").exists():  # a killed run reads interrupted: running on disk, nobody holds its lock
            status = read_record(out).status
            assert status in ("interrupted", "complete"), status
            cut_short += status == "interrupted"
    assert cut_short, "no kill landed while the audit was running"
    finished = start_writer(writer, tmp_path / "go-final", tiny_dir, out)
    (tmp_path / "go-final").touch()
    _, err = finished.communicate(timeout=300)
    assert finished.returncode == 0, err
    assert_same_run(out, reference)


def test_two_writers_racing_one_writes_the_other_is_refused_naming_its_pid(writer, tiny_dir, tmp_path, uninterrupted) -> None:
    reference, _ = uninterrupted
    out, go = tmp_path / "run", tmp_path / "go"
    a, b = (start_writer(writer, go, tiny_dir, out) for _ in range(2))
    go.touch()  # both reach for the lock now
    results = {p.pid: (p.communicate(timeout=300)[1], p.returncode) for p in (a, b)}
    codes = sorted(code for _, code in results.values())
    assert codes == [0, 2], results
    loser_err = next(err for err, code in results.values() if code == 2)
    winner = next(pid for pid, (_, code) in results.items() if code == 0)
    lines = [ln for ln in loser_err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and re.search(rf"is being written by process {winner}\b", lines[0]), loser_err
    assert_same_run(out, reference)


def _text(path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def test_a_writer_killed_holding_the_lock_leaves_it_to_the_next(writer, tiny_dir, tmp_path, uninterrupted) -> None:
    reference, duration = uninterrupted
    out = tmp_path / "run"
    proc = start_writer(writer, tmp_path / "go", tiny_dir, out)
    (tmp_path / "go").touch()
    deadline = time.monotonic() + 120
    while str(proc.pid) not in _text(out / ".lock") and time.monotonic() < deadline:
        time.sleep(0.01)  # the lock is created (O_EXCL), then its pid written: an instant when it is empty
    assert str(proc.pid) in _text(out / ".lock")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert (out / ".lock").exists()  # what kill -9 leaves behind
    nxt = start_writer(writer, tmp_path / "go2", tiny_dir, out)
    (tmp_path / "go2").touch()
    _, err = nxt.communicate(timeout=300)
    assert nxt.returncode == 0, err
    assert_same_run(out, reference)
