import pytest
import torch

from reachlens.engine import tokenizer_of
from reachlens.models import ModelLoadError, load_model, model_identity


def test_loads_a_safetensors_folder_as_a_bridge(tiny_model, tiny_dir):
    from transformer_lens.model_bridge import TransformerBridge

    assert isinstance(tiny_model, TransformerBridge)
    assert tokenizer_of(tiny_model) is not None and tokenizer_of(tiny_model).padding_side == "left"
    assert tiny_model.reachlens_identity.spec == str(tiny_dir)
    assert tiny_model.reachlens_identity == model_identity(str(tiny_dir))


def test_missing_folder(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(str(tmp_path / "nope"))


def test_unknown_zoo_name_lists_known():
    with pytest.raises(ModelLoadError, match="unknown zoo model 'no-such-model'; known:"):
        load_model("zoo:no-such-model")


def test_pickle_only_folder_is_refused(tmp_path, tiny_dir):
    import shutil

    folder = tmp_path / "pickled"
    shutil.copytree(tiny_dir, folder)
    for f in folder.glob("*.safetensors"):
        f.unlink()
    torch.save({"w": torch.zeros(1)}, folder / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match="only pickle weights \\(pytorch_model.bin\\)"):
        load_model(str(folder))


def test_folder_without_config(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(str(tmp_path / "x"))


def test_fingerprint_changes_with_the_weights(tmp_path, tiny_dir):
    from reachlens.models.testing import make_tiny_llama

    other = make_tiny_llama(tmp_path / "other", seed=1)
    assert model_identity(str(other)).fingerprint != model_identity(str(tiny_dir)).fingerprint


def test_prompts_are_encoded_with_the_model_s_own_tokenizer(tiny_model, tiny_dir):
    """The bridge swaps in a BOS-prepending tokenizer; load_model gives the model its own back, so
    the engine, ``model.tokenizer`` and ``model.to_tokens`` agree with AutoTokenizer."""
    from transformers import AutoTokenizer

    from reachlens.engine import encode

    own = AutoTokenizer.from_pretrained(str(tiny_dir))
    assert encode(tiny_model, ["Q: 1+2=?"]) == [own("Q: 1+2=?")["input_ids"]]
    assert tiny_model.tokenizer("Q: 1+2=?")["input_ids"] == own("Q: 1+2=?")["input_ids"]
    assert tiny_model.to_tokens("Q: 1+2=?")[0].tolist() == own("Q: 1+2=?")["input_ids"]
    assert tiny_model.cfg.default_prepend_bos is False  # the character tokenizer adds no BOS


def test_device_map_passes_through_to_the_bridge(tiny_model, tiny_dir):
    """A model split over two devices by a HuggingFace device map decodes exactly as on one device.

    A CPU machine has one torch device; TransformerLens counts CPU and disk offload as two, which is
    the split that can run here (a map over GPUs goes through the same ``device_map`` argument)."""
    from reachlens import Protocol
    from reachlens.engine import Row, generate
    from reachlens.models import load_model

    n = tiny_model.cfg.n_layers
    device_map = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.norm": "cpu", "lm_head": "cpu",
                  **{f"model.layers.{i}": "cpu" if i < n // 2 else "disk" for i in range(n)}}
    split = load_model(str(tiny_dir), device_map=device_map)
    assert split.cfg.n_devices == 2 and set(split.original_model.hf_device_map.values()) == {"cpu", "disk"}
    prompts = ["12+7=", "3*4="]
    rows = [Row(0), Row(1), Row(0, seed=11), Row(1, seed=12)]
    params = Protocol("arith", k=1, temperature=1.0, max_new_tokens=10, stop=())
    want = generate(tiny_model, prompts, rows, params)
    got = generate(split, prompts, rows, params)
    assert [c.token_ids for c in got] == [c.token_ids for c in want]
    auto = load_model(str(tiny_dir), device_map="auto")  # one CPU: everything stays on it
    assert auto.cfg.device == "cpu" and [c.token_ids for c in generate(auto, prompts, rows, params)] == \
        [c.token_ids for c in want]
