"""experiments/probes.py runs end to end on the shipped zoo at a miniature size, so the command notes/probes.md
quotes cannot rot: it writes one probe run per model and task, its report, and every table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


@pytest.fixture(autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()  # the script sets its own thread count; leave the session as it was
    yield
    torch.set_num_threads(threads)


def test_the_probe_experiment_writes_its_runs_and_tables(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    import probes as experiment

    out = tmp_path / "probes"
    experiment.main(["--models", "zoo:base", "--n", "2", "--k", "2", "--max-new-tokens", "12", "--out", str(out)])
    text = (out / "table.md").read_text()
    for section in ("## Reach and recovery", "## Budget-matched", "## Jaccard of graft-kind fix-sets"):
        assert section in text
    assert "greedy + 1 grafts | intervention" in text and "| 2 samples | decoding |" in text
    from reachlens import read_run

    run = read_run(out / "zoo_base-arith")
    assert run.kind == "probe" and len(run.probes) == 3 and (out / "zoo_base-arith" / "report.html").is_file()
    assert len(run.candidates) == 2 * (1 + 2 + 7 + 7)
    sys.modules.pop("probes", None)
