"""The Ray executor: a sharded audit equals the single-process audit, through a dead worker and a dead driver.

Every Ray run here is a subprocess in a loopback-only network namespace and a pid namespace of its own
(``isolated``): Ray cannot reach outside, and the cluster ends with the process that started it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

import reachlens
from reachlens.execution import ExecConfig
from reachlens import AuditResult, Protocol
from conftest import isolated_command, isolated_env
from ray_driver import K, MAX_BATCH_ROWS, MAX_NEW_TOKENS, N

pytest.importorskip("ray", reason="needs Ray (pip install 'reachlens[ray]')")

DRIVER = str(Path(__file__).with_name("ray_driver.py"))


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> AuditResult:
    """The reference: the same audit in this process, no executor."""
    out = tmp_path_factory.mktemp("single") / "a"
    model = reachlens.load_model("zoo:base")
    return reachlens.audit(model, reachlens.load_task("arith", n=N), Protocol("arith", k=K, max_new_tokens=MAX_NEW_TOKENS),
                           out=out, exec_config=ExecConfig(max_batch_rows=MAX_BATCH_ROWS))


def _scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="rl-ray-"))  # short: Ray's socket paths live under it


def test_two_ray_workers_equal_one_process_also_after_a_worker_is_killed(isolated, single, tmp_path):
    log = tmp_path / "events.jsonl"
    run = isolated([sys.executable, DRIVER, "--out", str(tmp_path / "ray"), "--out-killed", str(tmp_path / "killed"),
                    "--events", str(log)], _scratch(), timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert events[-1]["finished"] and events[-1]["killed_worker"] is not None
    workers = {e["worker"] for e in events if e.get("event") == "done"}
    assert len(workers) >= 2, events  # both workers decoded slices
    died = [e for e in events if e.get("event") == "died"]
    assert len(died) == 1 and died[0]["worker"] == events[-1]["killed_worker"] and died[0]["attempt"] == 1
    # the dead worker's slice was decoded again by another worker
    lost = died[0]["slice"]
    redone = [e for e in events[events.index(died[0]):] if e.get("event") == "done" and e["slice"] == lost]
    assert redone and redone[0]["worker"] != died[0]["worker"]
    for out in ("ray", "killed"):
        for name in ("questions", "samples"):
            got = pd.read_parquet(tmp_path / out / f"{name}.parquet")
            pd.testing.assert_frame_equal(got, getattr(single, name).reset_index(drop=True), check_dtype=False)
        assert not (tmp_path / out / "parts").exists()
    assert len(single.samples) == N * K


def test_a_killed_ray_driver_resumes_in_one_process(isolated, single, tmp_path):
    out = tmp_path / "cut"
    proc = subprocess.Popen(isolated_command([sys.executable, DRIVER, "--out", str(out)]), env=isolated_env(_scratch()),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
    try:
        deadline = time.monotonic() + 300
        while len(list((out / "parts").glob("*.questions.parquet")) if (out / "parts").is_dir() else []) < 2:
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no slice finished in 300 s"
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)  # unshare --kill-child: its namespace, Ray's daemons with it, ends too
        proc.wait()
    partial = AuditResult.load(out)
    assert 0 < len(partial.questions) < N
    resumed = reachlens.audit(reachlens.load_model("zoo:base"), reachlens.load_task("arith", n=N),
                              Protocol("arith", k=K, max_new_tokens=MAX_NEW_TOKENS), out=out, exec_config=ExecConfig(max_batch_rows=MAX_BATCH_ROWS))
    pd.testing.assert_frame_equal(resumed.questions, single.questions)
    pd.testing.assert_frame_equal(resumed.samples, single.samples)


def test_demo_ray_schedules_the_lineage_on_the_cluster_with_the_same_tables(isolated, tmp_path):
    from reachlens.cli import main

    size = ["--n", "3", "--k", "2", "--extended-k", "4", "--max-new-tokens", "32", "--max-batch-rows", "6"]
    run = isolated([sys.executable, "-m", "reachlens", "demo", "--ray", "--workers", "2", "--out", str(tmp_path / "ray"),
                    *size], _scratch(), timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "base -> grpo" in run.stdout and "budget control:" in run.stdout
    assert main(["demo", "--workers", "1", "--out", str(tmp_path / "local"), *size]) == 0
    names = sorted(p.name for p in (tmp_path / "local" / "audits").iterdir())
    lineage = {f"{m}{suffix}" for m in ("base", "grpo", "dapo", "sft", "sft-grpo") for suffix in ("", "--k=4")}
    assert lineage | {"sft--k=1--prompt_format=verbose", "sft-grpo--k=1--prompt_format=verbose"} <= set(names)  # on the pool
    assert sorted(p.name for p in (tmp_path / "ray" / "audits").iterdir()) == names  # + the length controls
    for name in names:
        for table in ("questions", "samples"):
            pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "ray" / "audits" / name / f"{table}.parquet"),
                                          pd.read_parquet(tmp_path / "local" / "audits" / name / f"{table}.parquet"))


def test_a_probe_run_on_two_ray_workers_gives_the_single_process_bank(isolated, tmp_path):
    """``reachlens probe --ray --workers 2``: the probe run's slices on Ray actors (a local cluster in a
    loopback-only namespace) give the bank this process decodes."""
    from reachlens.probes import probe

    specs = ["sampling:k=4:temperature=1", "graft:kind=zero,noise:layer=3", "routes:budget=3"]
    argv = ["--task", "arith", "--n", "8", "--max-new-tokens", "24", "--max-batch-rows", "16"]
    run = isolated([sys.executable, "-m", "reachlens", "probe", "zoo:base", *argv,
                    *[x for s in specs for x in ("--probe", s)], "--ray", "--workers", "2", "--out", str(tmp_path / "ray")],
                   _scratch(), timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    single = probe(reachlens.load_model("zoo:base"), reachlens.load_task("arith", n=8), specs,
                   protocol=Protocol.greedy("arith", max_new_tokens=24), exec_config=ExecConfig(max_batch_rows=16))
    ray_run = reachlens.read_run(tmp_path / "ray")
    pd.testing.assert_frame_equal(ray_run.candidates, single.candidates)
    assert ray_run.record.status == "complete" and not (tmp_path / "ray" / "parts").exists()
