"""Every study end to end from the CLI on every family (audit, route, recognize, silence, steer, units,
prune); encoder models refused at load."""

from __future__ import annotations

import json

import pytest

from reachlens.cli import main
from reachlens.models.testing import TINY_FAMILIES, make_tiny_model


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_every_study_runs_from_the_cli(family, tmp_path, capsys):
    model = make_tiny_model(family, tmp_path / "model")
    code, out, err = run(capsys, "audit", model, "--task", "arith", "--n", 2, "--k", 3, "--max-new-tokens", 6,
                         "--out", tmp_path / "audit")
    assert code == 0, err
    assert "D=" in out and "O_3=" in out
    summary = json.loads((tmp_path / "audit" / "summary.json").read_text())
    assert summary["n"] == 2

    code, out, err = run(capsys, "route", model, "--task", "arith", "--n", 2, "--space", "native", "--search",
                         "random", "--k", 3, "--max-new-tokens", 6, "--out", tmp_path / "route")
    assert code == 0, err
    assert "O_3=" in out and (tmp_path / "route" / "candidates.parquet").is_file()

    code, out, err = run(capsys, "recognize", model, "--task", "arith_mc", "--n", 12, "--max-new-tokens", 6,
                         "--min-failures", 1, "--out", tmp_path / "rec")
    assert code == 0, err
    sets = json.loads((tmp_path / "rec" / "sets.json").read_text())
    assert sets["failure"]

    code, out, err = run(capsys, "silence", model, "--sets", tmp_path / "rec", "--layers", "0,1", "--components",
                         "mlp,attn", "--out", tmp_path / "silence")
    assert code == 0, err
    assert "best MLP layer" in out and (tmp_path / "silence" / "silence.parquet").is_file()

    # steer and units need a healthy panel; a random model answers nothing right, so make one up
    import pandas as pd

    others = [q for q in pd.read_parquet(tmp_path / "rec" / "questions.parquet")["question_id"] if q not in sets["failure"]]
    (tmp_path / "sets.json").write_text(json.dumps({**sets, "healthy": others[:2]}))
    code, out, err = run(capsys, "steer", model, "--sets", tmp_path / "sets.json", "--layer", 1, "--alphas", "0,1",
                         "--out", tmp_path / "steer")
    assert code == 0, err
    assert (tmp_path / "steer" / "steer.parquet").is_file()
    code, out, err = run(capsys, "units", model, "--sets", tmp_path / "sets.json", "--layer", 1, "--units", 4,
                         "--out", tmp_path / "units")
    assert code == 0, err
    assert (tmp_path / "units" / "units_ranking.parquet").is_file()
    code, out, err = run(capsys, "prune", model, "--layers", 1, "--fraction", 0.3, "--out", tmp_path / "pruned")
    assert code == 0, err
    code, out, err = run(capsys, "audit", tmp_path / "pruned", "--task", "arith", "--n", 1, "--k", 1,
                         "--max-new-tokens", 4, "--out", tmp_path / "audit-pruned")
    assert code == 0, err


def test_an_encoder_only_model_is_refused_at_load(tmp_path, capsys):
    """A tiny BERT: exit 2, one line naming the family and what runs, no traceback, no output directory."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    from reachlens.models.char_tokenizer import build_char_tokenizer
    from reachlens.models.testing import TEST_ALPHABET

    tok = build_char_tokenizer(TEST_ALPHABET)
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=64)).save_pretrained(tmp_path / "bert", safe_serialization=True)
    tok.save_pretrained(tmp_path / "bert")
    capsys.readouterr()  # save_pretrained's progress bar
    for argv in (["audit", tmp_path / "bert", "--task", "arith", "--n", 1, "--k", 1, "--out", tmp_path / "out"],
                 ["route", tmp_path / "bert", "--task", "arith", "--n", 1, "--space", "skip", "--search", "random",
                  "--k", 2, "--out", tmp_path / "out"],
                 ["recognize", tmp_path / "bert", "--task", "arith_mc", "--n", 2, "--out", tmp_path / "out"]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert "'bert' is an encoder-only model; reachlens runs decoder-only causal LMs" in err
        assert not (tmp_path / "out").exists()


def test_dtype_and_device_flags(tmp_path, capsys):
    """``--dtype bfloat16`` runs end to end; a device this machine lacks is one line, exit 2, nothing written."""
    import torch

    model = make_tiny_model("gpt2", tmp_path / "model")
    code, out, err = run(capsys, "audit", model, "--task", "arith", "--n", 2, "--k", 2, "--max-new-tokens", 4,
                         "--dtype", "bfloat16", "--out", tmp_path / "bf16")
    assert code == 0, err
    if not torch.cuda.is_available():
        code, out, err = run(capsys, "audit", model, "--task", "arith", "--n", 2, "--device", "cuda",
                             "--out", tmp_path / "cuda")
        assert code == 2 and err.count("\n") == 1 and "sees no CUDA GPU; use --device cpu" in err
        assert not (tmp_path / "cuda").exists()
    code, out, err = run(capsys, "route", model, "--task", "arith", "--n", 1, "--space", "skip", "--search", "random",
                         "--k", 2, "--device", "gpu", "--out", tmp_path / "gpu")
    assert code == 2 and "device 'gpu' is not a torch device" in err
