"""Magnitude pruning: deterministic masks, only the chosen matrices, a folder reachlens can load."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from reachlens.errors import ReachlensError
from reachlens.models.pruning import PruneConfig, magnitude_mask, prune_checkpoint


def test_mask_prunes_the_smallest_magnitudes_ties_by_index():
    w = torch.tensor([[0.5, -0.1, 0.1], [2.0, -3.0, 0.1]])
    keep = magnitude_mask(w, 0.5)
    assert keep.tolist() == [[True, False, False], [True, True, False]]
    assert magnitude_mask(w, 0.0).all()


def test_prune_checkpoint_touches_only_the_chosen_layer(tiny_dir, tmp_path):
    from reachlens.models import load_model

    out = prune_checkpoint(str(tiny_dir), tmp_path / "pruned", PruneConfig(layers=(1,), fraction=0.5))
    before = load_file(str(tiny_dir / "model.safetensors"))
    after = load_file(str(out / "model.safetensors"))
    for name, w in before.items():
        if name.startswith("model.layers.1.mlp."):
            zeros = float((after[name] == 0).float().mean())
            assert zeros == pytest.approx(0.5, abs=1e-3), name
            kept = after[name] != 0
            assert torch.equal(after[name][kept], w[kept])
            assert after[name][~kept].numel() and w[~kept].abs().max() <= w[kept].abs().min()
        elif name in after:
            assert torch.equal(after[name], w), name
    record = json.loads((out / "pruning.json").read_text())
    assert record["config"] == {"layers": [1], "fraction": 0.5, "components": ["mlp"]}
    assert set(record["matrices"]) == {f"model.layers.1.mlp.{p}_proj.weight" for p in ("gate", "up", "down")}
    model = load_model(str(out))  # loadable, with its tokenizer
    assert model.tokenizer("Q: 1")["input_ids"] and model.cfg.n_layers == 3


def test_prune_refuses_bad_arguments(tiny_dir, tmp_path):
    with pytest.raises(ReachlensError, match="fraction=1.5 must lie in \\[0, 1\\)"):
        PruneConfig(layers=(0,), fraction=1.5)
    with pytest.raises(ReachlensError, match="each must be one of"):
        PruneConfig(layers=(0,), fraction=0.1, components=("ffn",))
    with pytest.raises(ReachlensError, match="layer 7 is out of range for a 3-layer model"):
        prune_checkpoint(str(tiny_dir), tmp_path / "p", PruneConfig(layers=(7,), fraction=0.1))
