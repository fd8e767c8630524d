"""``run_study``: a study killed with ``kill -9`` mid-way resumes to the tables of an uninterrupted run, and a re-run
decodes only the children that are not finished (reachlens.runner.study)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest

import reachlens.runner.study as study_module
from reachlens.store import read_record, read_run
from reachlens.studies.training_audit import run_training_audit

from test_training_audit import plan_for

QUIET = {"log": lambda line: None}


def _tables_equal(a, b) -> None:
    ta, tb = a.tables(), b.tables()
    assert ta.keys() == tb.keys()
    for name in ta:
        pd.testing.assert_frame_equal(ta[name], tb[name], obj=name)


def _jobs_run(monkeypatch) -> list:
    """The output directories of every job :func:`run_study` hands to ``run_jobs`` from now on."""
    seen: list = []
    real = study_module.run_jobs

    def spy(jobs, *args, **kwargs):
        seen.extend(job.out for job in jobs)
        return real(jobs, *args, **kwargs)

    monkeypatch.setattr(study_module, "run_jobs", spy)
    return seen


def test_a_study_killed_mid_way_resumes_to_the_tables_of_an_uninterrupted_run(tiny_dir, tmp_path):
    plan = plan_for(tiny_dir)
    reference = run_training_audit(plan, tmp_path / "whole", **QUIET)
    out = tmp_path / "killed"
    script = textwrap.dedent(f"""
        from reachlens import Protocol
        from reachlens.execution import ExecConfig
        from reachlens.studies.training_audit import StudyPlan, run_training_audit
        plan = StudyPlan.from_dict({plan.to_dict()!r})
        run_training_audit(plan, {str(out)!r}, exec_config=ExecConfig(max_batch_rows=4), log=lambda s: None)
    """)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    # killed once a control's rerun has begun: the first round done, the second under way
    while not list(out.glob("audits/*prompt_format*/parts/*.parquet")) and proc.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert read_record(out).status == "interrupted", "killed after the study completed"
    assert read_record(out / "audits" / "base").status == "complete"
    resumed = run_training_audit(plan, out, exec_config=plan_exec(), **QUIET)
    _tables_equal(resumed, reference)
    assert resumed.record.children == reference.record.children


def plan_exec():
    from reachlens.execution import ExecConfig

    return ExecConfig(max_batch_rows=4)


def test_a_rerun_decodes_only_the_children_not_finished(tiny_dir, tmp_path, monkeypatch):
    import shutil

    plan = plan_for(tiny_dir)
    first = run_training_audit(plan, tmp_path / "s", **QUIET)
    seen = _jobs_run(monkeypatch)
    again = run_training_audit(plan, tmp_path / "s", **QUIET)
    assert seen == []  # every child is complete: nothing loads, nothing decodes
    _tables_equal(again, first)
    native = first.formats["tuned"].location
    shutil.rmtree(native)
    third = run_training_audit(plan, tmp_path / "s", **QUIET)
    assert [p.name for p in seen] == [native.name]  # the one child that went missing, alone
    _tables_equal(third, first)


def test_the_study_records_its_children_by_role_with_paths_inside_it(tiny_dir, tmp_path):
    study = run_training_audit(plan_for(tiny_dir), tmp_path / "s", **QUIET)
    children = study.record.children
    assert {"audit:base", "audit:tuned", "extended:base", "extended:tuned", "format:tuned"} <= set(children)
    for role, rel in children.items():
        assert not os.path.isabs(rel) and ".." not in rel.split("/"), (role, rel)
        assert read_run(tmp_path / "s" / rel).location.resolve().is_relative_to((tmp_path / "s").resolve())
    moved = tmp_path / "moved"
    (tmp_path / "s").rename(moved)  # relative paths: the study reads back wherever it is
    _tables_equal(read_run(moved), study)


def test_a_bad_value_is_refused_before_the_study_directory_is_made(tiny_dir, tmp_path):
    from reachlens.errors import ReachlensError
    from reachlens.studies.study_plan import StudyPlan

    plan = plan_for(tiny_dir)
    bad = StudyPlan({"../up": plan.models["base"]}, (), plan.protocol, n=4)
    with pytest.raises(ReachlensError, match="folder name"):
        run_training_audit(bad, tmp_path / "s", **QUIET)
    assert not (tmp_path / "s").exists()


def test_convert_records_a_format_4_study_s_audits_as_its_children_by_role(tiny_dir, tmp_path):
    import json

    from reachlens.store.convert import convert

    study = run_training_audit(plan_for(tiny_dir), tmp_path / "s", **QUIET)
    for header in (tmp_path / "s").rglob("run.json"):  # format 4: a study found its audits by folder name
        old = {**json.loads(header.read_text()), "format_version": 4}
        if old["kind"] == "training_audit":
            old["children"] = {}
        header.write_text(json.dumps(old))
    steps = [what for where, what in convert(tmp_path / "s") if where == tmp_path / "s"]
    assert steps[0] == "format 4 -> format 5", steps
    again = read_run(tmp_path / "s")
    assert again.record.children == study.record.children
    _tables_equal(again, study)
