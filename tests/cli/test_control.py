"""`reachlens control temperature|length`: the controls from the command line, on zoo audits."""

from __future__ import annotations

import pandas as pd
import pytest

from reachlens.cli import main


@pytest.fixture(scope="module")
def audit_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("control")
    for name in ("base", "sft"):
        assert main(["audit", f"zoo:{name}", "--task", "arith", "--n", "10", "--k", "4", "--max-new-tokens", "40",
                     "--out", str(root / name)]) == 0
    return root


def test_temperature_control_prints_and_writes_its_table(audit_dirs, tmp_path, capsys):
    capsys.readouterr()
    out = tmp_path / "temp"
    assert main(["control", "temperature", str(audit_dirs / "base"), str(audit_dirs / "sft"),
                 "--temperatures", "0.6,1.2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    table = pd.read_csv(out / "temperature_control.csv")
    assert table["temperature"].tolist() == [0.8, 0.6, 1.2]
    n_left = int(table["n_reprobed"].iloc[0])
    assert n_left > 0 and f"{n_left} questions left the reachable set (K=4, T=0.8)" in printed
    assert (out / "T0.6" / "summary.json").is_file() and (out / "T1.2" / "summary.json").is_file()
    assert "share_lo" in printed
    # a run directory: `reachlens show` and `reachlens report` read it
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "temperature_control" in shown
    assert main(["report", str(out)]) == 0
    assert (out / "report.html").is_file()


def test_length_control_prints_both_lengths(audit_dirs, tmp_path, capsys):
    capsys.readouterr()
    out = tmp_path / "len"
    assert main(["control", "length", str(audit_dirs / "base"), str(audit_dirs / "sft"), "--max-new-tokens", "64",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "cut at max_new_tokens=40" in printed
    assert pd.read_csv(out / "length_control.csv")["max_new_tokens"].tolist() == [40, 64]
    assert (out / "base" / "summary.json").is_file() and (out / "trained" / "summary.json").is_file()


@pytest.mark.parametrize("argv,message", [
    (["temperature", "--temperatures", "0,1"], "give temperatures > 0"),
    (["length", "--max-new-tokens", "40"], "--max-new-tokens 40 must exceed the audits' 40"),
])
def test_bad_values_are_one_line(audit_dirs, tmp_path, capsys, argv, message):
    kind, *rest = argv
    code = main(["control", kind, str(audit_dirs / "base"), str(audit_dirs / "sft"), *rest, "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and message in err
    assert not (tmp_path / "x").exists()  # refused before anything ran
