"""The CLI: bad arguments give one line and exit 2; an audit prints D, O_K and the gap."""

import json

import pytest

from reachlens.cli import main


def run(capsys, *argv):
    with pytest.raises(SystemExit) as exc:
        code = main(list(argv))
        raise SystemExit(code)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.mark.parametrize(
    "argv,msg",
    [
        (["--k", "0"], "--k must be >= 1, got 0"),
        (["--temperature", "-1"], "--temperature must be >= 0"),
        (["--task", "nope"], "unknown task 'nope'; known:"),
        (["--task", "gsm8k", "--data", "/no/such.jsonl"], "data file '/no/such.jsonl' for task 'gsm8k' does not exist"),
        (["--prompt-format", "nope"], "no prompt format 'nope'"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(capsys, tmp_path, tiny_dir, argv, msg):
    base = ["audit", str(tiny_dir), "--task", "arith", "--out", str(tmp_path / "o")]
    # later flags override earlier ones in argparse
    code, _, err = run(capsys, *base, *argv)
    assert code == 2
    lines = [ln for ln in err.strip().splitlines() if "error" in ln]
    assert len(lines) == 1 and msg in lines[0], err


def test_missing_model_folder(capsys, tmp_path):
    code, _, err = run(capsys, "audit", str(tmp_path / "none"), "--task", "arith", "--out", str(tmp_path / "o"))
    assert code == 2 and "does not exist" in err


def test_audit_then_mismatch_then_rescore(capsys, tmp_path, tiny_dir):
    out = tmp_path / "run"
    common = ["audit", str(tiny_dir), "--task", "arith", "--n", "3", "--max-new-tokens", "8", "--out", str(out)]
    code, stdout, _ = run(capsys, *common, "--k", "2")
    assert code == 0
    assert "D=" in stdout and "O_2=" in stdout and "gap=" in stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n"] == 3 and summary["k"] == 2
    assert set(summary) >= {"D", "O_K", "gap", "n", "k", "protocol_hash", "model"}
    code, _, err = run(capsys, *common, "--k", "3")
    assert code == 2 and "differ in k" in err
    code, stdout, _ = run(capsys, "rescore", str(out))
    assert code == 0 and "rescored" in stdout
