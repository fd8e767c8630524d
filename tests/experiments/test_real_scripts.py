"""Smoke tests of experiments/real's LoRA training scripts on a tiny GGUF base (issue 54, item 3): each trains a few
steps, resumes from its checkpoint when started again, and writes an adapter that ``load_model`` reads on its base
with an identity naming both."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("peft", reason="peft is not installed: pip install 'reachlens[real]'")
pytest.importorskip("gguf", reason="gguf is not installed: pip install 'reachlens[real]'")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments" / "real"))

import grpo_lora  # noqa: E402
import sft_lora  # noqa: E402


@pytest.fixture(autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def tiny_base(tmp_path, monkeypatch):
    from reachlens.models.testing import make_tiny_gguf

    monkeypatch.setenv("REACHLENS_MODEL_CACHE", str(tmp_path / "model-cache"))
    path = tmp_path / "tiny.gguf"
    make_tiny_gguf(path)
    return str(path)


def check_adapter(out: Path, base: str, steps: int) -> dict:
    from reachlens.models import load_model, model_identity

    card = json.loads((out / "training.json").read_text())
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == base
    ident = model_identity(str(out))
    assert ident.base.startswith(base + " sha256:") and ident.adapter and ident.quantization == "GGUF F32"
    assert load_model(str(out)).reachlens_identity == ident
    assert max(row["step"] for row in card["log"]) == steps
    return card


def test_grpo_lora_trains_resumes_and_writes_a_loadable_adapter(tiny_base, tmp_path, capsys) -> None:
    work, out = tmp_path / "grpo", tmp_path / "grpo" / "adapter"
    argv = ["--base", tiny_base, "--work", str(work), "--out", str(out), "--n-train", "20", "--prompts-per-step", "2",
            "--num-generations", "2", "--max-completion-length", "6", "--save-every", "2", "--threads", "1"]
    grpo_lora.main([*argv, "--steps", "2"])
    assert (work / "snapshots" / "s2" / "adapter_model.safetensors").is_file()
    grpo_lora.main([*argv, "--steps", "3"])
    assert "resuming from" in capsys.readouterr().out
    card = check_adapter(out, tiny_base, 3)
    assert [step for step, _ in card["reward_curve"]] == [1, 2, 3] and card["recipe"] == "grpo"


def test_sft_lora_trains_on_worked_solutions_and_writes_a_loadable_adapter(tiny_base, tmp_path) -> None:
    work, out = tmp_path / "sft", tmp_path / "sft" / "adapter"
    sft_lora.main(["--base", tiny_base, "--work", str(work), "--out", str(out), "--n-train", "20", "--batch", "4",
                   "--steps", "2", "--save-every", "2", "--threads", "1"])
    card = check_adapter(out, tiny_base, 2)
    assert card["recipe"] == "sft" and all("loss" in row for row in card["log"])
