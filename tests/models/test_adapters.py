"""Base + adapter checkpoints (issue 54, item 3's loading side): a PEFT LoRA adapter folder as a model spec.

The reference is peft's own ``PeftModel.from_pretrained(base, adapter).merge_and_unload()`` decoded by plain
HuggingFace ``generate``; the two audits of two adapters must refuse to compare as one model."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("peft", reason="peft is not installed: pip install 'reachlens[real]'")

from reachlens.models import ModelLoadError, load_model, model_identity, same_model  # noqa: E402


@pytest.fixture(autouse=True)
def _model_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("REACHLENS_MODEL_CACHE", str(tmp_path / "model-cache"))


def make_adapter(base_dir, out, *, seed: int, base_spec: str | None = None):
    """A LoRA adapter on ``base_dir`` with random (non-zero) A and B, saved as safetensors by peft."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    peft_model = get_peft_model(base, config)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.mul_(4.0)  # large enough to change greedy tokens of the tiny model
    peft_model.save_pretrained(out, safe_serialization=True)
    if base_spec is not None:
        cfg = json.loads((out / "adapter_config.json").read_text())
        cfg["base_model_name_or_path"] = base_spec
        (out / "adapter_config.json").write_text(json.dumps(cfg))
    return out


@pytest.fixture
def adapter(tmp_path, tiny_dir):
    return make_adapter(tiny_dir, tmp_path / "lora", seed=1)


def hf_merged_greedy(base_dir, adapter_dir, ids: list[list[int]], n: int) -> list[list[int]]:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, adapter_dir).merge_and_unload().eval()
    out = []
    for row in ids:
        x = torch.tensor([row])
        with torch.no_grad():
            y = merged.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n,
                                eos_token_id=None, pad_token_id=0)
        out.append(y[0, len(row):].tolist())
    return out


def engine_greedy(model, prompts: list[str], n: int) -> list[list[int]]:
    from reachlens.engine import generate
    from reachlens.engine.generate import Row
    from reachlens.protocol import Protocol

    protocol = Protocol("arith", k=1, temperature=0.0, max_new_tokens=n, stop=())
    return [list(c.token_ids) for c in generate(model, prompts, [Row(i) for i in range(len(prompts))], protocol,
                                                stop_at_eos=False)]


def test_an_adapter_folder_loads_as_its_base_with_the_adapter_merged(tiny_dir, tiny_model, adapter) -> None:
    from reachlens.engine import encode

    prompts = ["Q: 12+7=?\nA:", "Q: 3*4-5=?\nA:", "Q: 90-9=?\nA:"]
    model = load_model(str(adapter))
    ids = encode(model, prompts)
    expected = hf_merged_greedy(tiny_dir, adapter, ids, 10)
    assert engine_greedy(model, prompts, 10) == expected
    assert engine_greedy(tiny_model, prompts, 10) != expected  # the adapter changes what the base says


def test_identity_names_base_and_adapter(tiny_dir, adapter, tmp_path) -> None:
    ident = model_identity(str(adapter))
    base = model_identity(str(tiny_dir))
    assert ident.base == f"{tiny_dir} {base.fingerprint}"
    assert ident.adapter.startswith("sha256:") and ident.fingerprint not in (base.fingerprint, ident.adapter)
    other = make_adapter(tiny_dir, tmp_path / "lora2", seed=2)
    assert not same_model(vars(ident), vars(model_identity(str(other))))
    assert model_identity(str(adapter)) == ident  # stable


def test_a_run_of_one_adapter_refuses_another_as_the_same_model(tiny_dir, adapter, tmp_path) -> None:
    """Resuming (or extending) an audit of one adapter with another is refused, naming the model."""
    from reachlens import Protocol, audit, load_task
    from reachlens.errors import ReachlensError

    other = make_adapter(tiny_dir, tmp_path / "lora2", seed=2)
    task, protocol = load_task("arith", n=2), Protocol("arith", k=2, max_new_tokens=4)
    a = audit(str(adapter), task, protocol, out=tmp_path / "a")
    assert a.model["adapter"] == model_identity(str(adapter)).adapter
    with pytest.raises(ReachlensError, match="model.fingerprint"):
        audit(str(other), task, protocol, out=tmp_path / "a")


def test_a_base_named_by_spec_and_a_merged_folder_made_once(tiny_dir, adapter, monkeypatch) -> None:
    from reachlens.models import adapters, resolve_spec

    first, _ = resolve_spec(str(adapter))
    monkeypatch.setattr(adapters, "_merge", lambda *a: (_ for _ in ()).throw(AssertionError("merged again")))
    assert resolve_spec(str(adapter))[0] == first


def test_pickle_adapters_and_missing_bases_are_one_line(tiny_dir, adapter, tmp_path) -> None:
    (adapter / "adapter_model.safetensors").rename(adapter / "adapter_model.bin")
    with pytest.raises(ModelLoadError, match=r"only pickle weights \(adapter_model.bin\)"):
        load_model(str(adapter))
    orphan = make_adapter(tiny_dir, tmp_path / "orphan", seed=3, base_spec=str(tmp_path / "no-such-base"))
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(str(orphan))
    cfg = json.loads((orphan / "adapter_config.json").read_text())
    del cfg["base_model_name_or_path"]
    (orphan / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="names no base_model_name_or_path"):
        load_model(str(orphan))
