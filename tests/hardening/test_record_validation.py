"""A run record is checked when it is read: wrong types, missing fields and names that lead out of the run are
one line naming the field and its value, for show, report, resume and read_run alike (issue 25, second pass).

Before issue 25: a hand-edited run.json with wrong types inside its fields (a time, the command's words, the model
identity, the execution settings), a training study whose plan is ``{}`` or a kind whose options lack what its
reader needs was a traceback (KeyError, TypeError, AttributeError); names in a study's record such as
``../../ref`` made ``report`` read audit folders outside the study.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hostile import cli, copy_of, edit_record, error_line

from reachlens.errors import ReachlensError
from reachlens.store import RunRecord, read_run, write_json

BAD_FIELDS = [
    ("started", "yesterday", "started is 'yesterday', not an ISO 8601 time"),
    ("finished", 12, "finished is 12, not str or null"),
    ("command", ["reachlens", 3], "command[1] is 3, not a string"),
    ("command", "reachlens audit", "command is 'reachlens audit', not list or null"),
    ("model", {"spec": ["zoo:base"], "fingerprint": "sha256:x"}, "model.spec is ['zoo:base'], not a string or null"),
    ("model", {"base": {"spec": 3}}, "model.base.spec is 3, not a string or null"),
    ("exec", {"dtype": {"bits": 32}}, "exec.dtype is {'bits': 32}, not a string or a number"),
    ("status", 7, "status is 7, not str"),
    ("kind", ["audit"], "kind is ['audit'], not str"),
    ("options", [], "options is [], not dict or null"),
    ("data", "arith", "data is 'arith', not dict or null"),
    ("protocol", None, "lacks 'protocol'"),
    ("protocol", ..., "lacks 'protocol'"),
    ("model", ..., "lacks 'model'"),
]


@pytest.mark.parametrize("field,value,message", BAD_FIELDS, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(BAD_FIELDS)])
def test_a_record_of_the_wrong_type_is_one_line_naming_it(
        finished_audit, tiny_model, audit_setup, tmp_path, capsys, field, value, message) -> None:
    from reachlens import audit

    run = copy_of(finished_audit, tmp_path / "a")
    edit_record(run, **{field: value})
    pattern = message.replace("[", r"\[").replace("(", r"\(")
    with pytest.raises(ReachlensError, match=pattern):
        read_run(run)
    task, protocol, ex = audit_setup
    with pytest.raises(ReachlensError, match=pattern if field != "protocol" else r"differ in protocol \(protocol: None"):
        audit(tiny_model, task, protocol, out=run, exec_config=ex)  # a resume: the record is refused, not mixed
    for argv in (["report", run], *([] if field == "protocol" else [["show", run]])):  # show prints a record
        code, _, err = cli(capsys, *argv)                                            # without a protocol
        assert code == 2 and message in error_line(err), (argv[0], err)


def test_a_summary_that_is_not_an_object_is_one_line(finished_audit, tmp_path, capsys) -> None:
    run = copy_of(finished_audit, tmp_path / "a")
    (run / "summary.json").write_text("[1, 2]")
    code, _, err = cli(capsys, "show", run)
    assert code == 2 and "summary.json' is list, not an object" in error_line(err)


@pytest.mark.parametrize("kind,message", [
    ("comparison", "lacks 'children.base'"),
    ("temperature_control", "lacks 'children.base'"),
    ("length_control", "lacks 'options.max_new_tokens'"),
    ("recognition", "lacks 'options.config'"),
    ("routing", "lacks 'options.config'"),
    ("training_audit", "the study plan lacks 'models'"),
])
def test_a_kind_whose_options_lack_what_it_reads_is_one_line(finished_audit, tmp_path, capsys, kind, message) -> None:
    """``study.json = {}``, and its like for every kind: the record names a kind whose reader needs options the
    record does not hold."""
    run = copy_of(finished_audit, tmp_path / "a")
    edit_record(run, kind=kind, options={})
    code, _, err = cli(capsys, "report", run)
    assert code == 2 and message in error_line(err)


def _study(path: Path, protocol, models: dict[str, str], children: dict[str, str] | None = None, **options) -> Path:
    """A training study's record (complete) by hand: its plan is its protocol and options, its audits ``children``."""
    from reachlens.studies import StudyPlan

    plan = StudyPlan(models, (), protocol)
    opts = {**{k: v for k, v in plan.to_dict().items() if k != "protocol"}, **options}
    record = dataclasses.replace(RunRecord.new("training_audit", plan.protocol, dict(plan.models), None, opts),
                                 status="complete", children=children or {})
    path.mkdir(parents=True)
    write_json(path / "run.json", record.to_dict())
    write_json(path / "summary.json", {})
    return path


@pytest.mark.parametrize("child", ["../ref", "/abs/ref", ".."])
def test_a_study_never_reads_a_child_outside_itself(finished_audit, tmp_path, capsys, child) -> None:
    protocol = read_run(finished_audit).protocol
    copy_of(finished_audit, tmp_path / "ref")  # where ../ref leads from the study: a real audit to read
    study = _study(tmp_path / "study", protocol, {"base": "zoo:base"}, children={"audit:base": child})
    code, _, err = cli(capsys, "report", study)
    assert code == 2 and f"child 'audit:base' {child!r} in" in error_line(err)
    assert not (study / "report.html").exists()


def test_a_study_plan_of_the_wrong_type_is_one_line(finished_audit, tmp_path, capsys) -> None:
    protocol = read_run(finished_audit).protocol
    study = _study(tmp_path / "study", protocol, {"base": "zoo:base"})
    record = json.loads((study / "run.json").read_text())
    for options, message in [({**record["options"], "pairs": [["base"]]}, "pair is ['base'], not two checkpoint names"),
                             ({**record["options"], "trajectory": {"base": "one"}}, "trajectory item is 'one'"),
                             ({**record["options"], "surprise": 1}, "unknown fields ['surprise']")]:
        edit_record(study, options=options)
        code, _, err = cli(capsys, "report", study)
        assert code == 2 and message in error_line(err)


def test_a_control_never_reads_a_rerun_outside_itself(finished_audit, tmp_path, capsys) -> None:
    copy_of(finished_audit, tmp_path / "victim")
    temperature = copy_of(finished_audit, tmp_path / "t")
    copy_of(finished_audit, temperature / "base")
    edit_record(temperature, kind="temperature_control", options={"temperatures": [1.0]},
                children={"base": "base", "trained": "base"}, reruns={"1": "../victim"})
    code, _, err = cli(capsys, "report", temperature)
    assert code == 2 and "re-probe folder name '../victim' is not a plain folder name" in error_line(err)
    for kind, options in (("comparison", {"k_cut": None, "allow": []}), ("length_control", {"max_new_tokens": 8})):
        run = copy_of(finished_audit, tmp_path / kind)
        for child, message in [("../victim", "leads outside the run's directory"),
                               (str(tmp_path / "victim"), "is not a relative path inside the run")]:
            names = ("base", "trained") + (("longer_base", "longer_trained") if kind == "length_control" else ())
            edit_record(run, kind=kind, options=options, children={name: child for name in names})
            code, _, err = cli(capsys, "report", run)
            assert code == 2 and f"child 'base' {child!r}" in error_line(err) and message in error_line(err)


def test_a_script_as_the_seed_is_refused_not_rendered(finished_audit, tmp_path, capsys) -> None:
    """The issue's first reproduction: run.json's protocol.seed set to a script, then ``reachlens report``."""
    run = copy_of(finished_audit, tmp_path / "a")
    protocol = json.loads((run / "run.json").read_text())["protocol"]
    edit_record(run, protocol={**protocol, "seed": "<script>alert(document.domain)</script>"})
    code, _, err = cli(capsys, "report", run)
    assert code == 2 and "seed" in error_line(err) and not (run / "report.html").exists()
