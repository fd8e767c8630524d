"""GGUF files as a model source (issue 54, item 1): a tiny Llama written here with the ``gguf`` package's writer in
the hub's layout (llama.cpp's tensor names and Q/K order, a byte-level BPE vocabulary, ChatML), loaded by path.

References computed another way: the float32 HuggingFace model the file was written from (its logits and greedy
text), transformers' own GGUF loader (the tokenizer), hashlib (the file's SHA-256)."""

from __future__ import annotations

import hashlib
import sys

import pytest
import torch

pytest.importorskip("gguf", reason="the gguf package is not installed: pip install 'reachlens[real]'")

from reachlens.models import ModelLoadError, dequantized_folder, load_model, model_identity, same_model  # noqa: E402
from reachlens.models import gguf as gguf_module  # noqa: E402
from reachlens.models.testing import make_tiny_gguf  # noqa: E402


@pytest.fixture(autouse=True)
def _model_cache(tmp_path, monkeypatch):
    """Every test dequantizes into its own cache."""
    monkeypatch.setenv("REACHLENS_MODEL_CACHE", str(tmp_path / "model-cache"))


@pytest.fixture
def tiny_gguf(tmp_path):
    path = tmp_path / "files" / "tiny.gguf"
    path.parent.mkdir()
    return path, make_tiny_gguf(path)


def test_a_gguf_file_loads_with_the_weights_it_was_written_from(tiny_gguf) -> None:
    path, reference = tiny_gguf
    model = load_model(str(path))
    ids = model.to_tokens("Q: What is 17 + 25?")
    with torch.no_grad():
        ours, theirs = model(ids), reference(ids).logits
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)
    tok = model.tokenizer
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("<|im_start|>", "<|im_end|>", "<|im_end|>")
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_greedy_chat_text_equals_the_reference_model_s(tiny_gguf) -> None:
    from reachlens.tasks import load_task

    from chat_reference import engine_chat_greedy, hf_chat_greedy

    path, reference = tiny_gguf
    model = load_model(str(path))
    task = load_task("arith", n=3)
    expected = hf_chat_greedy(reference, model.tokenizer, task, 12)
    assert engine_chat_greedy(model, task, 12) == expected
    assert len(set(expected)) > 1 and all(expected)


def test_identity_records_the_file_s_sha256_and_quantization(tiny_gguf, tmp_path) -> None:
    path, _ = tiny_gguf
    ident = model_identity(str(path))
    assert ident.gguf_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert ident.quantization == "GGUF F32"
    assert ident.fingerprint.startswith("sha256:")
    quantized = tmp_path / "files" / "tiny.Q8_0.gguf"
    make_tiny_gguf(quantized, quantization="Q8_0")
    other = model_identity(str(quantized))
    assert other.quantization == "GGUF Q8_0"
    assert not same_model(vars(ident), vars(other))


def test_the_second_load_is_served_from_the_cache(tiny_gguf, monkeypatch) -> None:
    path, _ = tiny_gguf
    folder = dequantized_folder(path)
    assert folder.name == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (folder / "model.safetensors").is_file() and (folder / "gguf.json").is_file()

    def no_second_dequantization(*args, **kwargs):
        raise AssertionError("dequantized again")

    monkeypatch.setattr(gguf_module, "_dequantize", no_second_dequantization)
    assert dequantized_folder(path) == folder
    load_model(str(path))  # a plain safetensors load


def test_a_changed_file_is_not_served_from_the_cache(tiny_gguf) -> None:
    path, _ = tiny_gguf
    before = model_identity(str(path))
    folder = dequantized_folder(path)
    changed = make_tiny_gguf(path, seed=1)  # rewritten in place, same name and size
    after = model_identity(str(path))
    assert dequantized_folder(path) != folder
    assert after.gguf_sha256 != before.gguf_sha256 and not same_model(vars(before), vars(after))
    model = load_model(str(path))
    ids = model.to_tokens("Q: 1+2=?")
    with torch.no_grad():
        torch.testing.assert_close(model(ids), changed(ids).logits, rtol=1e-4, atol=1e-4)


def test_an_interrupted_build_leaves_nothing_that_is_read(tiny_gguf, monkeypatch) -> None:
    path, _ = tiny_gguf

    def killed(path, source, out):
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt

    real = gguf_module._dequantize
    monkeypatch.setattr(gguf_module, "_dequantize", killed)
    with pytest.raises(KeyboardInterrupt):
        dequantized_folder(path)
    monkeypatch.setattr(gguf_module, "_dequantize", real)
    folder = dequantized_folder(path)
    assert (folder / "model.safetensors").is_file()
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]


def test_without_the_gguf_package_one_line_names_the_install(tiny_gguf, monkeypatch) -> None:
    path, _ = tiny_gguf
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(ModelLoadError, match=r"needs the gguf package: pip install gguf"):
        load_model(str(path))


def test_a_missing_or_damaged_file_is_one_line(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(str(tmp_path / "nothing.gguf"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(ModelLoadError, match="not a readable GGUF file"):
        load_model(str(bad))


def test_the_command_line_takes_a_gguf_file(tiny_gguf, tmp_path, capsys) -> None:
    from reachlens.cli.main import main

    path, _ = tiny_gguf
    out = tmp_path / "run"
    code = main(["audit", str(path), "--task", "arith", "--n", "2", "--k", "2", "--max-new-tokens", "4",
                 "--prompt-format", "chat", "--out", str(out)])
    assert code == 0
    from reachlens import read_run

    run = read_run(out)
    assert run.record.model["quantization"] == "GGUF F32"
    assert run.record.model["gguf_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
