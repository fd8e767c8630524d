"""The training-audit runner: every audit of the plan, resumable, the same in one process or several."""

from __future__ import annotations

import dataclasses
import math
import shutil

import pandas as pd
import pytest

import reachlens
from reachlens import Protocol
from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig
from reachlens.store import FORMAT_VERSION, read_run
from reachlens.studies import rerun_child
from reachlens.studies.training_audit import FORMAT_K, StudyPlan, run_training_audit


def plan_for(tiny_dir) -> StudyPlan:
    return StudyPlan({"base": str(tiny_dir), "tuned": str(tiny_dir)}, (("base", "tuned"),),
                     Protocol("arith", k=3, temperature=1.0, max_new_tokens=12), n=4, extended_k=6,
                     native_formats={"tuned": "verbose"})


def frames(study):
    return {name: r.samples.sort_values(["question_id", "candidate_idx"]).reset_index(drop=True)
            for group in (study.audits, study.extended, study.formats) for name, r in group.items()}


def test_runner_writes_every_audit_and_two_workers_agree(tiny_dir, tmp_path):
    plan = plan_for(tiny_dir)
    one = run_training_audit(plan, tmp_path / "one", log=lambda s: None)
    assert set(one.audits) == {"base", "tuned"} and set(one.extended) == {"base", "tuned"}
    assert set(one.formats) == {"tuned"} and one.formats["tuned"].protocol.prompt_format == "verbose"
    assert one.extended["base"].k == 6 and len(one.extended["base"].samples) == 4 * 6
    row = one.format_control().iloc[0]
    assert (row["shared_format"], row["native_format"]) == ("qa", "verbose")
    assert math.isnan(row["D_base_in_native"])  # the parent has no audit in the native format
    two = run_training_audit(plan, tmp_path / "two", exec_config=ExecConfig(workers=2))
    assert set(two.wall_seconds) == {"base", "tuned"}
    a, b = frames(one), frames(two)
    assert a.keys() == b.keys()
    for name in a:
        pd.testing.assert_frame_equal(a[name][["question_id", "candidate_idx", "text"]],
                                      b[name][["question_id", "candidate_idx", "text"]])
    # a re-run resumes: nothing is redone, the study reads back the same
    again = run_training_audit(plan, tmp_path / "one", log=lambda s: None)
    assert frames(again).keys() == a.keys()
    assert read_run(tmp_path / "one").headline().equals(one.headline())
    # ... and keeps the time the first call's workers spent (it was lost: the re-run decoded nothing, reported {})
    assert again.wall_seconds == one.wall_seconds and min(one.wall_seconds.values()) > 0
    # a resume after one checkpoint's audits were lost: the other's time kept, the lost one's decoded again
    for lost in (tmp_path / "one" / "audits").glob("tuned*"):
        shutil.rmtree(lost)
    resumed = run_training_audit(plan, tmp_path / "one", log=lambda s: None)
    assert resumed.wall_seconds["base"] == one.wall_seconds["base"]
    assert resumed.wall_seconds["tuned"] > one.wall_seconds["tuned"]


def test_runner_refuses_bad_values(tiny_dir, tmp_path):
    plan = plan_for(tiny_dir)
    with pytest.raises(ReachlensError, match="workers=0 must be at least 1"):
        run_training_audit(plan, tmp_path / "x", exec_config=ExecConfig(workers=0))
    run_training_audit(plan, tmp_path / "y", log=lambda s: None)
    other = StudyPlan(plan.models, plan.pairs, plan.protocol.with_k(2), n=4)
    with pytest.raises(ReachlensError, match="holds another plan"):
        run_training_audit(other, tmp_path / "y")


def test_format_control_shows_the_parent_in_its_own_format_when_it_has_one(tiny_dir, tmp_path):
    plan = StudyPlan({"sft": str(tiny_dir), "rl": str(tiny_dir)}, (("sft", "rl"),),
                     Protocol("arith", k=1, temperature=1.0, max_new_tokens=8), n=2,
                     native_formats={"sft": "verbose", "rl": "verbose"})
    study = run_training_audit(plan, tmp_path / "s", log=lambda s: None)
    row = study.format_control().iloc[0]
    assert row["D_base_in_native"] == study.formats["sft"].D
    assert row["D_trained_native"] == study.formats["rl"].D and row["D_base"] == study.audits["sft"].D


def test_the_budget_control_is_decoded_once_and_the_audit_at_k_is_its_cut(tiny_dir, tmp_path):
    plan = plan_for(tiny_dir)
    study = run_training_audit(plan, tmp_path / "s", log=lambda s: None)
    task = reachlens.load_task("arith", n=4)
    q_cols, s_cols = ["question_id", "deployed_text", "realized", "reachable", "n_correct"], ["question_id", "candidate_idx", "text"]
    direct = reachlens.audit(str(tiny_dir), task, plan.protocol)  # both checkpoints are this one model
    for name in ("base", "tuned"):
        # the audit at K equals one made directly at K (another way: reachlens.audit), the control holds it
        audit, wide = study.audits[name], study.extended[name]
        assert (audit.k, wide.k) == (3, 6) and wide.location.name == f"{name}--k=6"
        pd.testing.assert_frame_equal(audit.questions[q_cols], direct.questions[q_cols])
        pd.testing.assert_frame_equal(audit.samples[s_cols], direct.samples[s_cols])
        first = wide.samples[wide.samples["candidate_idx"] < 3].reset_index(drop=True)
        pd.testing.assert_frame_equal(first[s_cols], audit.samples[s_cols])
    # a study begun before, whose audits at K are written but not the control's: they are kept, the control
    # extends them (drawing samples K..K2-1 only)
    (tmp_path / "older").mkdir()
    shutil.copy(tmp_path / "s" / "run.json", tmp_path / "older")
    for name in ("base", "tuned"):
        shutil.copytree(tmp_path / "s" / "audits" / name, tmp_path / "older" / "audits" / name)
    older = run_training_audit(plan, tmp_path / "older", log=lambda s: None)
    for name in ("base", "tuned"):
        assert older.extended[name].record.extra["rerun_of"].endswith(f"audits/{name}")
        pd.testing.assert_frame_equal(older.extended[name].samples[s_cols], study.extended[name].samples[s_cols])
    assert older.budget_control().equals(study.budget_control())


def test_format_control_decodes_the_deployment_alone(tiny_dir, tmp_path):
    plan = plan_for(tiny_dir)
    study = run_training_audit(plan, tmp_path / "s", log=lambda s: None)
    native = study.formats["tuned"]
    assert native.k == FORMAT_K == 1 and native.location.name == "tuned--k=1--prompt_format=verbose"
    assert len(native.samples) == 4 * FORMAT_K
    # the deployment is the one a full K-sample audit in the native format makes (same D), computed another way
    full = reachlens.audit(str(tiny_dir), reachlens.load_task("arith", n=4),
                           dataclasses.replace(plan.protocol, prompt_format="verbose"))
    assert full.k == 3
    pd.testing.assert_frame_equal(native.questions[["question_id", "deployed_text", "realized"]],
                                  full.questions[["question_id", "deployed_text", "realized"]])


def test_convert_cuts_a_format_1_study_s_k_sample_format_control_and_the_study_resumes_without_decoding(
        tiny_dir, tmp_path, monkeypatch):
    """Run format 1: the prompt-format control was a K-sample rerun ``NAME--prompt_format=FMT`` (as
    ``rerun(audit, prompt_format=FMT)`` writes it); `reachlens convert` makes it today's k=1 rerun."""
    import json

    import reachlens.studies.audit_job as audit_job
    from reachlens.studies import rerun
    from reachlens.store.convert import convert

    plan = plan_for(tiny_dir)
    study = run_training_audit(plan, tmp_path / "s", log=lambda s: None)
    audits = tmp_path / "s" / "audits"
    decoded = study.formats["tuned"]  # today's rerun, decoded at k=1: the reference the cut must equal
    shutil.move(decoded.location, tmp_path / "decoded")
    wide = rerun(study.audits["tuned"], task=reachlens.load_task("arith", n=4), prompt_format="verbose", into=audits)
    assert wide.location == audits / "tuned--prompt_format=verbose" and wide.k == 3
    for header in (tmp_path / "s").rglob("run.json"):
        header.write_text(json.dumps({**json.loads(header.read_text()), "format_version": 1}))
    with pytest.raises(ReachlensError, match=rf"run format 1, this reachlens reads {FORMAT_VERSION}; rewrite it with `reachlens convert"):
        read_run(tmp_path / "s")
    old_samples = pd.read_parquet(wide.location / "samples.parquet")
    old_questions = pd.read_parquet(wide.location / "questions.parquet")

    assert f"format 1 -> format {FORMAT_VERSION}" in {what for _, what in convert(tmp_path / "s")}
    assert not wide.location.exists() and convert(tmp_path / "s") == []
    converted = read_run(tmp_path / "s").formats["tuned"]
    assert converted.location == decoded.location and converted.k == 1
    assert converted.record.extra["change"] == {"prompt_format": "verbose", "k": 1}
    assert converted.record.extra["converted_from"] == "tuned--prompt_format=verbose (k=3): its first 1 sample(s) of each question"
    # by hand: sample 0 of each question, and D, reachability and counts from it
    first = old_samples[old_samples["candidate_idx"] == 0].reset_index(drop=True)
    pd.testing.assert_frame_equal(converted.samples, first)
    want = old_questions.assign(n_correct=first["correct"].astype(int).to_numpy(), k=1)
    assert converted.questions["realized"].tolist() == want["realized"].tolist()
    assert converted.questions["n_correct"].tolist() == want["n_correct"].tolist()
    assert converted.questions["reachable"].tolist() == (want["n_correct"] > 0).tolist()
    assert converted.D == pytest.approx(old_questions["realized"].astype(float).mean())
    # and equal to the k=1 rerun the study decodes today
    reference = reachlens.AuditResult.load(tmp_path / "decoded")
    pd.testing.assert_frame_equal(converted.questions, reference.questions)
    pd.testing.assert_frame_equal(converted.samples, reference.samples)
    # the converted study resumes without decoding anything, and reads as the study did
    calls = []
    real = audit_job.audit_slice
    monkeypatch.setattr(audit_job, "audit_slice", lambda *a, **k: calls.append(a) or real(*a, **k))
    again = run_training_audit(plan, tmp_path / "s", log=lambda s: None)
    assert calls == [] and again.format_control().equals(study.format_control())
    assert again.headline().equals(study.headline())
    rerun(again.audits["base"], task=reachlens.load_task("arith", n=4), prompt_format="verbose", k=1,
          questions=["arith-test-00000"])
    assert calls  # the count sees a decode


def test_convert_cuts_an_interrupted_k_sample_format_control_as_far_as_it_got(tiny_dir, tmp_path, monkeypatch):
    import json

    import reachlens.studies.audit_job as audit_job
    from reachlens.studies import rerun
    from reachlens.store.convert import convert

    plan, ex = plan_for(tiny_dir), ExecConfig(max_batch_rows=8)  # K=3: two questions a slice
    study = run_training_audit(plan, tmp_path / "s", exec_config=ex, log=lambda s: None)
    reference = study.formats["tuned"]
    shutil.move(reference.location, tmp_path / "decoded")

    def stop(label, done, total):
        if done >= 2:
            raise RuntimeError("stopped")

    with pytest.raises(RuntimeError, match="stopped"):  # the older study stopped after two of four questions
        rerun(study.audits["tuned"], task=reachlens.load_task("arith", n=4), prompt_format="verbose",
              into=tmp_path / "s" / "audits", exec_config=ex, progress=stop)
    for header in (tmp_path / "s").rglob("run.json"):
        header.write_text(json.dumps({**json.loads(header.read_text()), "format_version": 1}))
    convert(tmp_path / "s")
    assert not (tmp_path / "s" / "audits" / "tuned--prompt_format=verbose").exists()
    cut = read_run(reference.location)
    assert cut.record.status != "complete" and cut.k == 1 and cut.n == 2
    pd.testing.assert_frame_equal(cut.samples, reference.samples[reference.samples["question_id"].isin(
        cut.questions["question_id"])].reset_index(drop=True))
    # the study resumes it: the two questions it lacks are decoded, and it ends as the study decoded it
    calls = []
    real = audit_job.audit_slice
    monkeypatch.setattr(audit_job, "audit_slice", lambda *a, **k: calls.append(a[3:5]) or real(*a, **k))
    again = run_training_audit(plan, tmp_path / "s", exec_config=ex, log=lambda s: None)
    assert len(calls) == 1
    pd.testing.assert_frame_equal(again.formats["tuned"].questions, reference.questions)
    pd.testing.assert_frame_equal(again.formats["tuned"].samples, reference.samples)


def test_a_rerun_that_changes_k_with_another_field_decodes_every_sample_again(tiny_dir, tmp_path):
    task = reachlens.load_task("arith", n=3)
    src = reachlens.audit(str(tiny_dir), task, Protocol("arith", k=4, temperature=1.0, max_new_tokens=10))
    for k in (2, 6):  # below K (never a cut of the source's samples) and above (never an extension of them)
        planned = rerun_child(src, task=task, k=k, prompt_format="verbose")
        assert planned.job is not None and planned.job.sample_offset == 0
        assert (planned.job.protocol.k, planned.job.protocol.prompt_format) == (k, "verbose")
