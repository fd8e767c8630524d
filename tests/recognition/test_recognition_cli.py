"""``reachlens recognize / silence / steer / units / prune`` end to end on the tiny model."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from reachlens.cli import main
from reachlens.store import read_run


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def recognized(tiny_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("rec")
    code = main(["recognize", str(tiny_dir), "--task", "arith_mc", "--n", "8", "--max-new-tokens", "8",
                 "--min-failures", "1", "--out", str(out)])
    assert code == 0
    return out


def test_recognize_writes_tables_and_sets(recognized):
    names = {p.name for p in recognized.iterdir()}
    assert names >= {"options.parquet", "questions.parquet", "records.parquet", "run.json", "summary.json", "sets.json"}
    sets = json.loads((recognized / "sets.json").read_text())
    assert sets["task"]["name"] == "arith_mc" and sets["task"]["n"] == 8
    assert sets["rule"]["min_failures"] == 1 and "recognition (acc) right" in sets["rule_text"]
    assert sets["protocol"]["prompt_format"] == "qa" and sets["failure"]


def test_recognize_refuses_a_small_failure_set(capsys, tiny_dir, tmp_path):
    code, _, err = run(capsys, "recognize", str(tiny_dir), "--task", "arith_mc", "--n", "4", "--max-new-tokens", "4",
                       "--min-failures", "50", "--out", str(tmp_path))
    assert code == 2 and "the rule needs at least 50" in err and (tmp_path / "questions.parquet").is_file()
    assert not (tmp_path / "sets.json").exists() and read_run(tmp_path).record.status == "complete"


def test_silence_steer_units_prune(capsys, tiny_dir, recognized, tmp_path):
    code, out, _ = run(capsys, "silence", str(tiny_dir), "--sets", str(recognized), "--layers", "0",
                       "--components", "mlp,attn", "--out", str(tmp_path / "s"))
    assert code == 0 and "best MLP layer" in out and (tmp_path / "s" / "silence.parquet").is_file()

    code, _, err = run(capsys, "steer", str(tiny_dir), "--sets", str(recognized), "--layer", "1", "--out", str(tmp_path / "st0"))
    if not json.loads((recognized / "sets.json").read_text())["healthy"]:  # a random model gets nothing right
        assert code == 2 and "healthy panel" in err
    sets = json.loads((recognized / "sets.json").read_text())
    others = [q for q in pd.read_parquet(recognized / "questions.parquet")["question_id"] if q not in sets["failure"]]
    sets["healthy"] = others[:2]  # a made-up panel, to run the commands through
    (tmp_path / "sets.json").write_text(json.dumps(sets))
    code, out, _ = run(capsys, "steer", str(tiny_dir), "--sets", str(tmp_path / "sets.json"), "--layer", "1",
                       "--alphas", "0,1", "--out", str(tmp_path / "st"))
    assert code == 0 and "mean_difference" in out and (tmp_path / "st" / "steer.parquet").is_file()
    (tmp_path / "v.json").write_text(json.dumps([1.0, 2.0]))
    code, _, err = run(capsys, "steer", str(tiny_dir), "--sets", str(tmp_path / "sets.json"), "--layer", "1",
                       "--direction", str(tmp_path / "v.json"), "--out", str(tmp_path / "st2"))
    assert code == 2 and "steering vector has shape (2,); the model needs (64,)" in err
    code, out, _ = run(capsys, "units", str(tiny_dir), "--sets", str(tmp_path / "sets.json"), "--layer", "1",
                       "--k", "4", "--out", str(tmp_path / "u"))
    assert code == 0 and (tmp_path / "u" / "units_ranking.parquet").is_file()
    code, _, err = run(capsys, "units", str(tiny_dir), "--sets", str(tmp_path / "sets.json"), "--layer", "7",
                       "--out", str(tmp_path / "u2"))
    assert code == 2 and "layer 7 is out of range for a 3-layer model" in err

    code, out, _ = run(capsys, "prune", str(tiny_dir), "--layers", "1", "--fraction", "0.3", "--out", str(tmp_path / "p"))
    assert code == 0 and (tmp_path / "p" / "pruning.json").is_file()
    code, _, err = run(capsys, "silence", str(tmp_path / "p"), "--sets", str(recognized), "--out", str(tmp_path / "x"))
    assert code == 2 and "these sets were chosen on" in err


def test_sites_are_transformerlens_names(capsys, tiny_dir, recognized, tmp_path):
    sets = json.loads((recognized / "sets.json").read_text())
    others = [q for q in pd.read_parquet(recognized / "questions.parquet")["question_id"] if q not in sets["failure"]]
    sets["healthy"] = others[:2]
    (tmp_path / "sets.json").write_text(json.dumps(sets))
    study = ["--sets", str(tmp_path / "sets.json"), "--layer", "1", "--alphas", "0"]
    # --site names a TransformerLens site
    for flags, hook in [(["--site", "resid_post"], "blocks.1.hook_resid_post"),
                        (["--site", "attn_out"], "blocks.1.hook_attn_out"), ([], "blocks.1.hook_mlp_out")]:
        out = tmp_path / f"st{len(flags)}{flags[-1] if flags else ''}"
        code, stdout, _ = run(capsys, "steer", str(tiny_dir), *study, *flags, "--out", str(out))
        assert code == 0 and read_run(out).meta["hook"] == hook and hook in stdout
    code, _, err = run(capsys, "steer", str(tiny_dir), *study, "--site", "mpl_out", "--out", str(tmp_path / "x"))
    assert code == 2 and "unknown site 'mpl_out'; did you mean 'mlp_out'" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "steer", str(tiny_dir), *study, "--site", "layer", "--out", str(tmp_path / "x"))
    assert code == 2 and "steer site='resid_post'" in err
    code, out, _ = run(capsys, "silence", str(tiny_dir), "--sets", str(tmp_path / "sets.json"), "--layers", "0",
                       "--sites", "mlp_out,attn_out+mlp_out,mlp_post", "--out", str(tmp_path / "s"))
    table = read_run(tmp_path / "s").table
    assert code == 0 and "best MLP layer" in out
    assert table["component"].tolist() == ["none", "mlp_out", "attn_out+mlp_out", "mlp_post"]
    assert table["sites"].fillna("").tolist() == ["", "mlp_out", "attn_out+mlp_out", "mlp_post"]
