"""One Run: every kind is read back typed by `read_run`, listed by `list_runs`, and carries a format version and a
status; a run's execution settings are part of its identity (issue 23)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pandas as pd
import pytest

import reachlens
from conftest import fake_audit

from reachlens import ExecConfig, Protocol, ProtocolMismatch, audit, load_task
from reachlens.cli import main
from reachlens.errors import ReachlensError
from reachlens.studies import rerun
from reachlens.store import FORMAT_VERSION, RUN_KINDS, PartsDir, RunDir, RunRecord, list_runs, read_run
from reachlens.studies import (
    AuditResult,
    CausalResult,
    Comparison,
    Elicitation,
    FineTune,
    LengthControl,
    RecognitionResult,
    TemperatureControl,
    TrainingAudit,
    compare,
    elicit,
    length_control,
    temperature_control,
)
from reachlens.probes import ProbeRun
from reachlens.routing import RoutingResult
from reachlens.studies.causal import SteerSweep, UnitsSweep
from reachlens.studies.study_plan import StudyPlan
from reachlens.studies.training_audit import run_training_audit

P = Protocol("arith", k=2, temperature=1.0, max_new_tokens=6)
TINY = ExecConfig(max_batch_rows=9)


@pytest.fixture(scope="module")
def runs(tiny_dir, tmp_path_factory):
    """One run directory of every kind, on the tiny model at the smallest sizes."""
    root = tmp_path_factory.mktemp("kinds")
    model, task = str(tiny_dir), load_task("arith", n=3)
    a = audit(model, task, P, out=root / "audit", exec_config=TINY)
    compare(a, a).save(root / "comparison")
    temperature_control(model, task, a, a, (1.5,), out=root / "temperature_control", exec_config=TINY)
    length_control(a, a, 8, models=(model, model), task=task, out=root / "length_control", exec_config=TINY)
    plan = StudyPlan({"x": model, "y": model}, (("x", "y"),), P, n=2, extended_k=3)
    run_training_audit(plan, root / "training_audit", exec_config=TINY, log=lambda s: None)
    elicit(model, task, P, out=root / "elicitation", demos=(1,), control=model, finetune=FineTune(steps=1),
           exec_config=TINY)
    for argv in (["route", model, "--task", "arith", "--n", "2", "--space", "skip", "--search", "random", "--k", "2",
                  "--max-new-tokens", "6", "--out", root / "routing"],
                 ["recognize", model, "--task", "arith_mc", "--n", "6", "--max-new-tokens", "6", "--min-failures", "1",
                  "--out", root / "recognition"],
                 ["silence", model, "--sets", root / "recognition", "--layers", "0", "--components", "mlp",
                  "--out", root / "silence"],
                 ["probe", model, "--task", "arith", "--n", "2", "--probe", "sampling:k=2", "--probe",
                  "graft:kind=zero:layer=0", "--max-new-tokens", "6", "--out", root / "probe"]):
        assert main([str(x) for x in argv]) == 0
    # steering and unit sweeps need a healthy panel a random model does not have: their runs made by hand
    silence = read_run(root / "silence")
    for cls in (SteerSweep, UnitsSweep):
        record = RunRecord.new(cls.kind, silence.record.protocol, silence.record.model, silence.record.data,
                               {"sets": silence.meta["sets"]})
        extra = {"ranking": pd.DataFrame({"rank": [0, 1], "unit": [5, 2]})} if cls is UnitsSweep else {}
        cls(silence.table, silence.per_question, extra, record=record).save(root / cls.kind)
    return root


TYPES = {"audit": AuditResult, "comparison": Comparison, "temperature_control": TemperatureControl,
         "length_control": LengthControl, "training_audit": TrainingAudit, "recognition": RecognitionResult,
         "silence": CausalResult, "steer": CausalResult, "units": CausalResult, "routing": RoutingResult,
         "probe": ProbeRun, "elicitation": Elicitation}


@pytest.mark.parametrize("kind", sorted(RUN_KINDS.names()))
def test_read_run_returns_the_typed_run_of_every_kind(runs, kind):
    run = read_run(runs / kind)
    assert run.kind == kind and type(run) is RUN_KINDS[kind] and isinstance(run, TYPES[kind])


@pytest.mark.parametrize("kind", ["probe", "routing"])
def test_a_probe_or_routing_run_s_protocol_is_its_record_s(runs, kind):
    import dataclasses

    run = read_run(runs / kind)
    assert run.protocol == Protocol.from_dict(json.loads((runs / kind / "run.json").read_text())["protocol"])
    bare = dataclasses.replace(run, record=dataclasses.replace(run.record, protocol=None))
    with pytest.raises(ReachlensError, match=f"this {kind} run's record holds no protocol"):
        bare.protocol
    assert run.record.kind == kind and run.record.status == "complete" and run.location == runs / kind
    stored = json.loads((runs / kind / "summary.json").read_text())
    again = json.loads(json.dumps(run.summary(), default=str, allow_nan=True).replace("NaN", "null"))
    assert set(stored) == set(again)  # the typed run gives the summary its directory holds
    for name, df in run.tables().items():
        assert isinstance(df, pd.DataFrame), name
    header = json.loads((runs / kind / "run.json").read_text())
    assert header["format_version"] == FORMAT_VERSION and header["status"] == "complete" and header["finished"]


def test_list_runs_lists_every_run_under_a_folder(runs):
    found = {i.path.relative_to(runs).as_posix(): i.kind for i in list_runs(runs)}
    for kind in TYPES:
        assert found[kind] == kind
    assert set(TYPES) == set(RUN_KINDS.names())  # a new kind gets a run in the fixture above
    study = {p: k for p, k in found.items() if p.startswith("training_audit/")}
    assert study == {"training_audit/audits/x": "audit", "training_audit/audits/y": "audit",
                     "training_audit/audits/x--k=3": "audit", "training_audit/audits/y--k=3": "audit",
                     "training_audit/comparisons/x--y": "comparison"} | (
        {p: "temperature_control" for p in study if p.startswith("training_audit/controls/temperature")})


def test_a_saved_comparison_of_audits_in_memory_holds_them(tmp_path):
    c = compare(fake_audit([True, False, True], [2, 0, 1]), fake_audit([True, True, False], [3, 1, 0]))
    c.save(tmp_path / "c")
    again = read_run(tmp_path / "c")
    assert again.kind == "comparison" and again.summary()["gained"] == c.summary()["gained"] == 1
    assert {i.path.name: i.kind for i in list_runs(tmp_path / "c")} == {"c": "comparison", "base": "audit",
                                                                       "trained": "audit"}
    pd.testing.assert_frame_equal(again.questions.reset_index(drop=True), c.questions.reset_index(drop=True))


def test_status_running_complete_failed_interrupted(tmp_path):
    result = fake_audit([True], [1])
    run = PartsDir(tmp_path / "r")
    with run.writer():
        run.start(result.record)
        assert run.record().status == "running"  # its writer holds it
    assert run.record().status == "interrupted"  # as after kill -9: running on disk, nobody holds the lock
    assert json.loads((tmp_path / "r" / "run.json").read_text())["status"] == "running"
    with pytest.raises(RuntimeError, match="a bug"):
        with run.writer():
            run.start(result.record)
            raise RuntimeError("a bug")
    assert run.record().status == "failed"
    with pytest.raises(KeyboardInterrupt):
        with run.writer():
            run.start(result.record)
            raise KeyboardInterrupt
    assert run.record().status == "interrupted" and run.record().finished
    result.save(tmp_path / "r")
    assert run.record().status == "complete" and run.summary()["n"] == 1
    with pytest.raises(ProtocolMismatch):  # refused before it started: the complete run stays complete
        with run.writer():
            run.start(fake_audit([True], [1], k=2, protocol=P.with_k(2)).record)
    assert run.record().status == "complete"


def test_a_resume_with_other_execution_settings_is_refused(tiny_dir, tmp_path):
    task = load_task("arith", n=2)
    audit(str(tiny_dir), task, P, out=tmp_path / "a", exec_config=TINY)
    with pytest.raises(ProtocolMismatch, match=r"exec.max_batch_rows: 9 != 12"):
        audit(str(tiny_dir), task, P, out=tmp_path / "a", exec_config=ExecConfig(max_batch_rows=12))
    with pytest.raises(ProtocolMismatch, match=r"exec.dtype: 'float32' != 'bfloat16'"):
        audit(str(tiny_dir), task, P, out=tmp_path / "a", exec_config=ExecConfig(max_batch_rows=9, dtype="bfloat16"))
    header = json.loads((tmp_path / "a" / "run.json").read_text())
    assert header["exec"] == {"max_batch_rows": 9, "dtype": "float32", "device": "cpu"}


def test_compare_refuses_another_precision_or_device_unless_allowed():
    def ran(result, **settings):
        exec_ = {"max_batch_rows": 64, "dtype": "float32", "device": "cpu", **settings}
        return dataclasses.replace(result, record=dataclasses.replace(result.record, exec=exec_))

    base, trained = fake_audit([True, False], [2, 1]), fake_audit([True, True], [3, 1])
    with pytest.raises(ProtocolMismatch, match=r"dtype: 'float32' != 'bfloat16'.*allow=\('dtype',\)"):
        compare(ran(base), ran(trained, dtype="bfloat16"))
    with pytest.raises(ProtocolMismatch, match=r"device: 'cpu' != 'cuda'"):
        compare(ran(base), ran(trained, device="cuda"))
    assert compare(ran(base), ran(trained, dtype="bfloat16"), allow=("dtype",)).summary()["gained"] == 1
    assert compare(ran(base), ran(trained, max_batch_rows=8)).summary()["gained"] == 1  # the same distribution


def test_rerun_names_its_directory_by_one_rule_and_checks_its_change(runs, tmp_path):
    source = read_run(runs / "audit")
    cut = rerun(source, k=1, into=tmp_path)  # fewer samples: cut, nothing decoded
    assert cut.location == tmp_path / "audit--k=1" and cut.k == 1
    pd.testing.assert_frame_equal(cut.samples, source.restrict_k(1).samples)
    with pytest.raises(ReachlensError, match="a rerun changes one or more of k, temperature"):
        rerun(source, seed=3)
    with pytest.raises(ReachlensError, match="must be a non-empty subset of the audit's questions"):
        rerun(source, questions=["nope"])


def test_reading_a_run_in_an_older_format_names_convert(runs, tmp_path):
    import shutil

    shutil.copytree(runs / "audit", tmp_path / "old")
    header = json.loads((tmp_path / "old" / "run.json").read_text())
    for key in ("format_version", "status", "started", "finished", "exec"):
        header.pop(key)
    (tmp_path / "old" / "run.json").write_text(json.dumps(header))
    with pytest.raises(ReachlensError, match=rf"run format 0, this reachlens reads {FORMAT_VERSION}; rewrite it with `reachlens convert"):
        read_run(tmp_path / "old")
    assert main(["convert", str(tmp_path / "old")]) == 0
    again = read_run(tmp_path / "old")
    assert again.record.status == "complete" and again.record.extra["converted_from"] == "format 0"
    pd.testing.assert_frame_equal(again.samples, read_run(runs / "audit").samples)


def test_a_run_of_a_newer_format_is_refused_by_read_and_by_convert_untouched(runs, tmp_path):
    """A directory a newer reachlens wrote: reading it says to upgrade reachlens (not to convert), and convert
    refuses it without changing a byte (before, convert took any unknown version for format 0)."""
    import shutil

    shutil.copytree(runs / "audit", tmp_path / "new")
    path = tmp_path / "new" / "run.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "format_version": FORMAT_VERSION + 1}))
    before = path.read_bytes()
    with pytest.raises(ReachlensError, match=rf"run format {FORMAT_VERSION + 1}, written by a newer reachlens; "
                                             rf"this one reads {FORMAT_VERSION}: upgrade reachlens"):
        read_run(tmp_path / "new")
    assert main(["convert", str(tmp_path / "new")]) == 2
    assert path.read_bytes() == before


def test_convert_makes_an_older_summary_again_from_the_tables(runs, tmp_path):
    """An audit summary written before maj_K and the selection gap: convert derives it again, once."""
    import shutil

    from reachlens.store.convert import convert

    shutil.copytree(runs / "audit", tmp_path / "old")
    path = tmp_path / "old" / "summary.json"
    today = json.loads(path.read_text())
    new = ("maj_K", "maj_K_ci", "selection_gap", "selection_gap_ci")
    assert set(new) <= set(today)
    path.write_text(json.dumps({k: v for k, v in today.items() if k not in new}))
    assert [what for _, what in convert(tmp_path / "old")] == [
        "summary made again from its tables (new: maj_K, maj_K_ci, selection_gap, selection_gap_ci)"]
    assert json.loads(path.read_text()) == today
    assert convert(tmp_path / "old") == []


def test_summary_json_is_named_only_by_the_store():
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "reachlens"
    outside = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                     if "summary.json" in p.read_text() and p.relative_to(package).parts[0] != "store")
    assert not outside, f"summary.json named outside reachlens/store: {outside}"


def test_no_function_in_reachlens_is_longer_than_60_lines():
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "reachlens"
    long = [f"{p.relative_to(package)}:{n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for p in package.rglob("*.py") for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 60]
    assert not long, "functions over 60 lines: " + ", ".join(long)


def test_a_killed_writer_leaves_the_run_interrupted(tmp_path):
    """A writer that dies holding the lock (here: the lock file of a process that is gone) reads interrupted."""
    result = fake_audit([True], [1])
    run = RunDir(tmp_path / "r")
    with run.writer():
        run.start(result.record)
    (tmp_path / "r" / ".lock").write_text(json.dumps({"pid": 2**22 + 7, "host": os.uname().nodename, "started": "1"}))
    assert run.record().status == "interrupted"


def test_a_comparison_or_control_moved_elsewhere_reads_back_with_its_tables(runs, tmp_path):
    """A comparison holds its audits (children inside it, or relative paths inside its tree): moved to another
    folder it reads back with read_run, its join and its summary those it wrote; so do the controls."""
    import shutil

    for kind in ("comparison", "temperature_control", "length_control"):
        moved = tmp_path / "elsewhere" / kind
        shutil.copytree(runs / kind, moved)
        shutil.move(str(runs / kind), str(tmp_path / f"{kind}-original"))  # the original path is gone
        try:
            again, original = read_run(moved), read_run(tmp_path / f"{kind}-original")
            assert again.location == moved and again.record.children == original.record.children
            assert all(not Path(rel).is_absolute() for rel in again.record.children.values())
            for name, df in original.tables().items():
                pd.testing.assert_frame_equal(again.tables()[name], df)
            assert json.loads((moved / "summary.json").read_text()) == \
                json.loads(json.dumps(again.summary(), default=str).replace("NaN", "null"))
        finally:
            shutil.move(str(tmp_path / f"{kind}-original"), str(runs / kind))
    # a study's comparison names the study's audits relatively: the study moves as one
    study = tmp_path / "study"
    shutil.copytree(runs / "training_audit", study)
    cmp = read_run(study / "comparisons" / "x--y")
    assert cmp.record.children == {"base": "../../audits/x", "trained": "../../audits/y"}
    assert cmp.base.location.resolve() == (study / "audits" / "x").resolve()
    pd.testing.assert_frame_equal(cmp.questions, read_run(runs / "training_audit" / "comparisons" / "x--y").questions)


def test_every_study_s_candidate_table_carries_the_one_set_of_candidate_columns(runs):
    """One definition of a candidate (records.CANDIDATE_COLUMNS): an audit's samples, a routing run's route
    evaluations and a probe run's bank carry exactly those columns first, with one type each, then their own; the
    selectors read five of them."""
    from reachlens.records import (BANK_COLUMNS, CANDIDATE_COLUMNS, ROUTE_CANDIDATE_COLUMNS, SAMPLE_COLUMNS,
                                   SELECTOR_COLUMNS)

    tables = {"audit": (read_run(runs / "audit").samples, SAMPLE_COLUMNS),
              "routing": (read_run(runs / "routing").candidates, ROUTE_CANDIDATE_COLUMNS),
              "probe": (read_run(runs / "probe").candidates, BANK_COLUMNS)}
    types = None
    for kind, (df, columns) in tables.items():
        extra = ["verify_logprob"] if kind == "routing" else []  # the self_verify selector's score
        assert list(df.columns) == columns + extra, kind
        assert list(df.columns[:len(CANDIDATE_COLUMNS)]) == CANDIDATE_COLUMNS, kind
        mine = [str(t) for t in df[CANDIDATE_COLUMNS].dtypes]
        assert types is None or mine == types, (kind, mine, types)
        types = mine
        assert df["candidate_idx"].dtype == "int64" and df["correct"].dtype == bool and df["n_tokens"].dtype == "int64"
    assert set(SELECTOR_COLUMNS) <= set(CANDIDATE_COLUMNS) and len(SELECTOR_COLUMNS) == 5
    assert read_run(runs / "routing").questions["realized"].dtype == bool  # as in an audit: a boolean
    # one name each: the old ones are nowhere in reachlens/
    source = "\n".join(p.read_text() for p in Path(reachlens.__file__).parent.rglob("*.py")
                       if p.name != "convert.py")  # the one step that reads the old names
    for old in ("eval_idx", "decoded_tokens", "budget_k"):
        assert old not in source, old
