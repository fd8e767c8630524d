"""The temperature and length controls, on the shipped zoo (base -> sft loses questions under the base's
prompt, and at 40 new tokens the two are cut at the length limit at different rates)."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from reachlens import Protocol, ProtocolMismatch, audit, load_model, load_task
from reachlens.errors import ReachlensError
from reachlens.studies import compare
from reachlens.execution import ExecConfig
from reachlens.studies import rerun
from reachlens.store import read_run
from reachlens.studies.controls import (
    length_control,
    left_reachable,
    length_table,
    reprobe_left,
    temperature_control,
    temperature_table,
)
from reachlens.studies.training_audit import StudyPlan, run_training_audit

P = Protocol("arith", k=6, temperature=0.8, max_new_tokens=40)


@pytest.fixture(scope="module")
def zoo():
    task = load_task("arith", n=12)
    models = {name: load_model(f"zoo:{name}") for name in ("base", "sft")}
    audits = {name: audit(m, task, P) for name, m in models.items()}
    return task, models, audits


def test_reprobe_at_the_audit_temperature_redraws_the_audit_samples(zoo):
    task, models, audits = zoo
    c = compare(audits["base"], audits["sft"])
    left = left_reachable(c)
    assert left and set(left) == set(c.questions.loc[c.questions["reach_fate"] == "left", "question_id"])
    runs = reprobe_left(models["sft"], task, audits["base"], audits["sft"], [0.8, 1.3])
    # same K, same seed stream: at the audit's own temperature the re-probe draws the audit's samples
    again = runs[0.8].samples.set_index(["question_id", "candidate_idx"])["text"]
    stored = audits["sft"].samples.set_index(["question_id", "candidate_idx"])["text"]
    pd.testing.assert_series_equal(again.sort_index(), stored.loc[again.index].sort_index())
    assert set(runs[1.3].questions["question_id"]) == set(left) and runs[1.3].k == P.k
    table = temperature_table(c, runs)
    assert table["temperature"].tolist() == [0.8, 0.8, 1.3]
    assert table["source"].tolist() == ["audit", "re-probe", "re-probe"]
    assert table["n_reprobed"].tolist() == [len(left)] * 3
    assert table["n_reachable"].tolist()[:2] == [0, 0]
    hot = runs[1.3].questions
    assert table["n_reachable"].iloc[2] == int(hot["reachable"].sum())


def test_temperature_table_shares_carry_wilson_intervals(zoo):
    from statsmodels.stats.proportion import proportion_confint

    task, models, audits = zoo
    table = temperature_control(models["sft"], task, audits["base"], audits["sft"], (1.3,)).table()
    row = table.iloc[-1]
    assert row["share"] == pytest.approx(row["n_reachable"] / row["n_reprobed"])
    assert (row["share_lo"], row["share_hi"]) == pytest.approx(
        proportion_confint(row["n_reachable"], row["n_reprobed"], method="wilson"))


def test_controls_refuse_another_model_and_bad_values(zoo):
    task, models, audits = zoo
    with pytest.raises(ProtocolMismatch, match="the audit to re-probe was made with another model"):
        reprobe_left(models["base"], task, audits["base"], audits["sft"], [1.0])
    with pytest.raises(ReachlensError, match="must be > 0"):
        reprobe_left(models["sft"], task, audits["base"], audits["sft"], [0.0])
    with pytest.raises(ReachlensError, match="must exceed the audit's 40"):
        length_control(audits["base"], audits["sft"], 40, models=(models["base"], models["sft"]), task=task)
    assert reprobe_left(models["base"], task, audits["base"], audits["base"], [1.0]) == {}  # nothing left


def test_length_control_reruns_both_sides_at_the_longer_decode(zoo):
    task, models, audits = zoo
    before = compare(audits["base"], audits["sft"])
    assert before.summary()["truncation"]["flagged"]  # cut at different rates at 40 new tokens
    longer = {n: rerun(audits[n], model=models[n], task=task, max_new_tokens=64) for n in ("base", "sft")}
    assert longer["base"].protocol.max_new_tokens == 64 and longer["base"].k == P.k
    # a rerun at a longer decode is a fresh audit under that protocol
    fresh = audit(models["base"], task, dataclasses.replace(P, max_new_tokens=64))
    assert longer["base"].questions["n_correct"].tolist() == fresh.questions["n_correct"].tolist()
    table = length_table(before, compare(longer["base"], longer["sft"]))
    assert table["max_new_tokens"].tolist() == [40, 64]
    assert table["truncated_samples_base"].iloc[1] <= table["truncated_samples_base"].iloc[0]
    assert table.loc[0, "delta_D"] == pytest.approx(before.summary()["delta_D"])


def test_study_runs_the_controls_and_reads_them_back(tmp_path):
    plan = StudyPlan({"base": "zoo:base", "sft": "zoo:sft"}, (("base", "sft"),), P, n=12,
                     control_temperatures=(1.3,), length_max_new_tokens=64)
    one = run_training_audit(plan, tmp_path / "one", log=lambda s: None)
    assert set(one.reprobes) == {("base", "sft")} and set(one.reprobes[("base", "sft")]) == {1.3}
    assert set(one.longer) == {"base", "sft"}  # the pair is flagged, so both checkpoints were rerun
    assert one.longer["sft"].protocol.max_new_tokens == 64
    temp = one.temperature_control()
    assert temp["pair"].unique().tolist() == ["base -> sft"] and len(temp) == 2
    assert one.truncation_control()["flagged"].tolist() == [True]
    assert one.length_control()["max_new_tokens"].tolist() == [40, 64]
    head = one.headline()
    assert {"delta_D_lo", "p_realized", "p_realized_holm", "p_reachable_holm"} <= set(head.columns)
    # the same study in two worker processes draws the same re-probes
    two = run_training_audit(plan, tmp_path / "two", exec_config=ExecConfig(workers=2), log=lambda s: None)
    pd.testing.assert_frame_equal(two.reprobes[("base", "sft")][1.3].samples, one.reprobes[("base", "sft")][1.3].samples)
    pd.testing.assert_frame_equal(two.longer["sft"].questions, one.longer["sft"].questions)
    # resumed: nothing to do, the same tables
    again = run_training_audit(plan, tmp_path / "one", log=lambda s: None)
    assert again.temperature_control().equals(temp)
    assert read_run(tmp_path / "one").length_control().equals(one.length_control())
    # every part of the study is a run: its audits, its pairs' comparisons, its controls
    from reachlens.store import list_runs

    kinds = {i.path.relative_to(tmp_path / "one").as_posix(): i.kind for i in list_runs(tmp_path / "one")}
    assert kinds[""] if "" in kinds else kinds["."] == "training_audit"
    assert {kinds["audits/base"], kinds["comparisons/base--sft"]} == {"audit", "comparison"}
    assert kinds["controls/temperature/base--sft"] == "temperature_control"
    assert kinds["controls/length/base--sft"] == "length_control" and kinds["audits/sft--max_new_tokens=64"] == "audit"
    assert all(i.record.status == "complete" for i in list_runs(tmp_path / "one"))


def test_each_control_run_as_a_study_equals_its_reruns_composed_by_hand_and_a_rerun_decodes_nothing(
        zoo, tmp_path, monkeypatch):
    import reachlens.runner.study as study_module
    from reachlens.studies.controls import LengthControl, TemperatureControl

    task, models, audits = zoo
    b, t = (audits[n] for n in ("base", "sft"))
    left = left_reachable(compare(b, t))
    by_hand = {1.3: rerun(t, model=models["sft"], task=task, questions=left, temperature=1.3)}
    temp = temperature_control(models["sft"], task, b, t, (1.3,), out=tmp_path / "temp")
    pd.testing.assert_frame_equal(temp.table(), temperature_table(compare(b, t), by_hand))
    assert isinstance(read_run(tmp_path / "temp"), TemperatureControl) and temp.record.status == "complete"
    longer = [rerun(r, model=models[n], task=task, max_new_tokens=64) for n, r in (("base", b), ("sft", t))]
    length = length_control(b, t, 64, models=(models["base"], models["sft"]), task=task, out=tmp_path / "length")
    pd.testing.assert_frame_equal(length.table(), length_table(compare(b, t), compare(*longer)))
    assert isinstance(read_run(tmp_path / "length"), LengthControl)
    seen = []
    real = study_module.run_jobs
    monkeypatch.setattr(study_module, "run_jobs", lambda jobs, *a, **k: seen.extend(jobs) or real(jobs, *a, **k))
    again = temperature_control(models["sft"], task, b, t, (1.3,), out=tmp_path / "temp")
    assert length_control(b, t, 64, models=(models["base"], models["sft"]), task=task,
                          out=tmp_path / "length").table().equals(length.table())
    assert seen == [] and again.table().equals(temp.table())  # every rerun was complete: none decoded again
