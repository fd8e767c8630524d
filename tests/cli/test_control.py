"""`reachlens control temperature|length`: the controls from the command line, on zoo audits."""

from __future__ import annotations

import pandas as pd
import pytest

from reachlens.cli import main
from reachlens.studies import rerun_name
from reachlens.store import read_run
from reachlens.studies.controls import left_reachable


def test_temperature_control_prints_and_writes_its_table(zoo_audit_dirs, tmp_path, capsys):
    capsys.readouterr()
    out = tmp_path / "temp"
    assert main(["control", "temperature", str(zoo_audit_dirs / "base"), str(zoo_audit_dirs / "sft"),
                 "--temperatures", "0.6,1.2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    table = pd.read_parquet(out / "temperature_control.parquet")
    assert table["temperature"].tolist() == [0.8, 0.6, 1.2]
    n_left = int(table["n_reprobed"].iloc[0])
    assert n_left > 0 and f"{n_left} questions left the reachable set (K=4, T=0.8)" in printed
    control = read_run(out)  # the control run, its re-probes named by the rerun rule
    left = left_reachable(control.comparison)
    assert sorted(control.reprobes) == [0.6, 1.2] and control.record.status == "complete"
    for t in (0.6, 1.2):
        rerun_dir = out / rerun_name("sft", {"questions": left, "temperature": t})
        assert read_run(rerun_dir).record.status == "complete" and control.reprobes[t].location == rerun_dir
    assert "share_lo" in printed
    _two_workers_equal(["temperature", "--temperatures", "0.6,1.2"], zoo_audit_dirs, control, tmp_path)
    # a run directory: `reachlens show` and `reachlens report` read it
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "temperature_control" in shown
    assert main(["report", str(out)]) == 0
    assert (out / "report.html").is_file()


def test_length_control_prints_both_lengths(zoo_audit_dirs, tmp_path, capsys):
    capsys.readouterr()
    out = tmp_path / "len"
    assert main(["control", "length", str(zoo_audit_dirs / "base"), str(zoo_audit_dirs / "sft"), "--max-new-tokens", "64",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "cut at max_new_tokens=40" in printed
    assert pd.read_parquet(out / "length_control.parquet")["max_new_tokens"].tolist() == [40, 64]
    control = read_run(out)
    for side, r in (("base", control.after.base), ("trained", control.after.trained)):
        assert r.location == out / f"{side}--max_new_tokens=64" and r.protocol.max_new_tokens == 64
    _two_workers_equal(["length", "--max-new-tokens", "64"], zoo_audit_dirs, control, tmp_path)


def _two_workers_equal(argv, zoo_audit_dirs, one, tmp_path) -> None:
    """The same control with ``--workers 2`` (its reruns decoded by two processes): its table and every rerun's
    questions and samples equal those of the one-process run ``one``."""
    kind, *rest = argv
    out = tmp_path / "two"
    assert main(["control", kind, str(zoo_audit_dirs / "base"), str(zoo_audit_dirs / "sft"), *rest, "--workers", "2",
                 "--out", str(out)]) == 0
    two = read_run(out)
    pd.testing.assert_frame_equal(two.table(), one.table())
    reruns = (lambda c: c.reprobes) if kind == "temperature" else (lambda c: {"base": c.after.base,
                                                                                 "trained": c.after.trained})
    assert reruns(two).keys() == reruns(one).keys()
    for key, run in reruns(one).items():
        pd.testing.assert_frame_equal(reruns(two)[key].questions, run.questions, obj=f"{key} questions")
        pd.testing.assert_frame_equal(reruns(two)[key].samples, run.samples, obj=f"{key} samples")


@pytest.mark.parametrize("argv,message", [
    (["temperature", "--temperatures", "0,1"], "give temperatures > 0"),
    (["length", "--max-new-tokens", "40"], "--max-new-tokens 40 must exceed the audits' 40"),
    (["length"], "control length needs --max-new-tokens N"),
])
def test_bad_values_are_one_line(zoo_audit_dirs, tmp_path, capsys, argv, message):
    kind, *rest = argv
    code = main(["control", kind, str(zoo_audit_dirs / "base"), str(zoo_audit_dirs / "sft"), *rest, "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and message in err
    assert not (tmp_path / "x").exists()  # refused before anything ran
