"""experiments/probes.py runs end to end on the shipped zoo at a miniature size, so the command notes/probes.md
quotes cannot rot: it writes one probe run per model and task, its report, and every table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


@pytest.fixture
def experiment(monkeypatch):
    threads = torch.get_num_threads()  # the script sets its own thread count; leave the session as it was
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    import probes

    yield probes
    torch.set_num_threads(threads)
    sys.modules.pop("probes", None)


def test_the_probe_experiment_writes_its_runs_and_tables(tmp_path, experiment):
    out = tmp_path / "probes"
    experiment.main(["--models", "zoo:base", "--n", "2", "--k", "2", "--steer=-2,2", "--max-new-tokens", "12",
                     "--out", str(out)])
    text = (out / "table.md").read_text()
    for title in experiment.SECTIONS.values():
        assert f"## {title}" in text
    assert "| greedy + 1 grafts [int] | intervention |" in text and "| 2 samples | decoding |" in text
    assert "| 1 samples + 1 steer [int] | intervention |" in text
    from reachlens import read_run

    run = read_run(out / "zoo_base-arith")
    assert run.kind == "probe" and (out / "zoo_base-arith" / "report.html").is_file()
    assert run.probes == ["sampling:k=2", "graft:kind=zero,noise,direction,permute,bos,mean,prev_layer:layer=3",
                          "graft:kind=zero,noise,direction,permute,bos,mean,prev_layer:layer=3:placebo=true",
                          "embedding_noise:ratio=0.3:k=2", "steer:layer=3:alphas=-2,2"]
    assert len(run.candidates) == 2 * (1 + 2 + 7 + 7 + 2 + 2)
    assert run.protocol.max_new_tokens == 12 and run.protocol.prompt_format == "qa"


def test_a_locked_model_adds_its_lock_task_and_the_password_cells(experiment):
    """zoo:locked's card names its lock (arith_hard, unlocked by the 'password' format): the study runs it too,
    each task with and without the password; an unlocked model gets its tasks in its native format only."""
    cells = experiment.plan_cells(["zoo:base", "zoo:locked"], ["arith_null"])
    assert [(c.model, c.task, c.prompt_format) for c in cells] == [
        ("zoo:base", "arith_null", None), ("zoo:locked", "arith_null", None), ("zoo:locked", "arith_hard", None),
        ("zoo:locked", "arith_null", "password"), ("zoo:locked", "arith_hard", "password")]
    assert cells[-1].slug == "zoo_locked-arith_hard-password"
    assert [c.slug for c in experiment.plan_cells(["zoo:locked"], ["arith"], lock_cells=False)] == ["zoo_locked-arith"]
