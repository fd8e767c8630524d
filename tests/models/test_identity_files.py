"""A model's identity covers exactly the files its loader reads (issue 25, identity).

Before issue 25 the fingerprint covered the ``*.safetensors`` at the top of the folder: shards that
``model.safetensors.index.json`` names in a sub-folder were loaded but not fingerprinted (change one and
an old audit resumed, two models under one fingerprint), a ``.bin`` shard it names was unpickled, the
remote code run under ``trust_remote_code`` was in no fingerprint, a folder that needs remote code was a
traceback without the flag, ``device='meta'`` was a traceback, and the same folder spelled ``./m`` and
``m`` was refused on resume although the fingerprints agreed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from test_fingerprint import flip_middle

from reachlens.execution import ExecConfig
from reachlens import Protocol, ProtocolMismatch, audit, load_task
from reachlens.models import ModelLoadError, load_model, model_identity

INDEX = "model.safetensors.index.json"


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    """The tiny Llama saved in three safetensors shards with an index (the hub's layout for large models)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reachlens.models.testing import make_tiny_llama

    src = make_tiny_llama(tmp_path_factory.mktemp("src") / "tiny", init_std=0.3)
    folder = tmp_path_factory.mktemp("sharded") / "m"
    AutoModelForCausalLM.from_pretrained(src).save_pretrained(folder, max_shard_size="60KB")
    AutoTokenizer.from_pretrained(src).save_pretrained(folder)
    assert len(json_index(folder)["weight_map"]) and not (folder / "model.safetensors").exists()
    assert len(set(json_index(folder)["weight_map"].values())) >= 3
    return folder


def json_index(folder: Path) -> dict:
    return json.loads((folder / INDEX).read_text())


def move_shard(folder: Path, sub: str = "weights") -> Path:
    """Move the last shard into ``folder/sub`` and point the index at it there; returns its new path."""
    index = json_index(folder)
    name = sorted(set(index["weight_map"].values()))[-1]
    (folder / sub).mkdir()
    (folder / name).rename(folder / sub / name)
    index["weight_map"] = {k: f"{sub}/{v}" if v == name else v for k, v in index["weight_map"].items()}
    (folder / INDEX).write_text(json.dumps(index))
    return folder / sub / name


def test_a_shard_in_a_sub_folder_is_loaded_and_fingerprinted(sharded, tmp_path) -> None:
    folder = shutil.copytree(sharded, tmp_path / "m")
    moved = move_shard(folder)
    task, proto = load_task("arith", n=2), Protocol("arith", k=2, temperature=1.0, max_new_tokens=4)
    audit(load_model(str(folder)), task, proto, out=tmp_path / "run", exec_config=ExecConfig(max_batch_rows=6))
    before = model_identity(str(folder)).fingerprint
    flip_middle(moved)
    assert model_identity(str(folder)).fingerprint != before
    with pytest.raises(ProtocolMismatch, match="model.fingerprint"):
        audit(load_model(str(folder)), task, proto, out=tmp_path / "run", exec_config=ExecConfig(max_batch_rows=6))


def test_a_bin_shard_named_by_the_index_is_refused_before_anything_is_unpickled(sharded, tmp_path, monkeypatch) -> None:
    from safetensors.torch import load_file

    folder = shutil.copytree(sharded, tmp_path / "m")
    index = json_index(folder)
    name = sorted(set(index["weight_map"].values()))[-1]
    pickled = name.replace(".safetensors", ".bin")
    torch.save(load_file(folder / name), folder / pickled)
    (folder / name).unlink()
    index["weight_map"] = {k: pickled if v == name else v for k, v in index["weight_map"].items()}
    (folder / INDEX).write_text(json.dumps(index))

    def no_unpickling(*args, **kwargs):
        raise AssertionError("a pickle was loaded")

    monkeypatch.setattr(torch, "load", no_unpickling)
    with pytest.raises(ModelLoadError, match=rf"{pickled}.*not safetensors.*unpickling"):
        load_model(str(folder))
    with pytest.raises(ModelLoadError, match="not safetensors"):
        model_identity(str(folder))


def test_an_index_naming_a_shard_outside_the_folder_is_refused(sharded, tmp_path) -> None:
    folder = shutil.copytree(sharded, tmp_path / "m")
    index = json_index(folder)
    name = sorted(set(index["weight_map"].values()))[-1]
    (folder / name).rename(tmp_path / name)
    index["weight_map"] = {k: f"../{name}" if v == name else v for k, v in index["weight_map"].items()}
    (folder / INDEX).write_text(json.dumps(index))
    with pytest.raises(ModelLoadError, match="outside the model folder"):
        load_model(str(folder))


def test_an_index_naming_a_missing_shard_is_one_line(sharded, tmp_path) -> None:
    folder = shutil.copytree(sharded, tmp_path / "m")
    name = sorted(set(json_index(folder)["weight_map"].values()))[0]
    (folder / name).unlink()
    with pytest.raises(ModelLoadError, match=f"{name}.*does not exist"):
        load_model(str(folder))


def test_the_fingerprint_covers_only_the_files_the_loader_reads(tiny_dir, tmp_path) -> None:
    folder = shutil.copytree(tiny_dir, tmp_path / "m")
    before = model_identity(str(folder)).fingerprint
    shutil.copy(folder / "model.safetensors", folder / "old-model.safetensors")  # beside, never loaded
    (folder / "notes.py").write_text("print('not run without trust_remote_code')\n")
    assert model_identity(str(folder)).fingerprint == before
    flip_middle(folder / "model.safetensors")
    assert model_identity(str(folder)).fingerprint != before


# --- remote code -------------------------------------------------------------------------------

REMOTE_CONFIG = '''
from transformers import LlamaConfig


class TinyRemoteConfig(LlamaConfig):
    model_type = "tiny-remote"
'''
REMOTE_MODEL = '''
from transformers import LlamaForCausalLM

from .configuration_tiny_remote import TinyRemoteConfig


class TinyRemoteForCausalLM(LlamaForCausalLM):
    config_class = TinyRemoteConfig
'''


@pytest.fixture
def remote(tiny_dir, tmp_path) -> Path:
    """The tiny Llama as a model that needs its own code (``auto_map`` and a model type transformers
    does not know), as a hub repository with custom code is laid out."""
    folder = shutil.copytree(tiny_dir, tmp_path / "remote")
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="tiny-remote", architectures=["TinyRemoteForCausalLM"], auto_map={
        "AutoConfig": "configuration_tiny_remote.TinyRemoteConfig",
        "AutoModelForCausalLM": "modeling_tiny_remote.TinyRemoteForCausalLM",
    })
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "configuration_tiny_remote.py").write_text(REMOTE_CONFIG)
    (folder / "modeling_tiny_remote.py").write_text(REMOTE_MODEL)
    return folder


def test_remote_code_is_in_the_fingerprint_when_it_runs(remote) -> None:
    trusted = model_identity(str(remote), trust_remote_code=True).fingerprint
    untrusted = model_identity(str(remote)).fingerprint
    assert trusted != untrusted  # the code is read only when it may run
    with (remote / "modeling_tiny_remote.py").open("a") as fh:
        fh.write("# edited\n")
    assert model_identity(str(remote), trust_remote_code=True).fingerprint != trusted
    assert model_identity(str(remote)).fingerprint == untrusted


def test_a_model_that_needs_remote_code_names_the_flag(remote) -> None:
    with pytest.raises(ModelLoadError, match=r"needs its own code.*trust_remote_code=True"):
        load_model(str(remote))


def test_remote_code_from_another_repository_is_refused(remote) -> None:
    config = json.loads((remote / "config.json").read_text())
    config["auto_map"]["AutoModelForCausalLM"] = "someone/else--modeling_x.X"
    (remote / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="someone/else--modeling_x.X.*another repository"):
        load_model(str(remote), trust_remote_code=True)


# --- devices and spellings ---------------------------------------------------------------------

@pytest.mark.parametrize("device", ["meta", "cuda:99" if torch.cuda.is_available() else "cuda", "lazy"])
def test_a_device_that_cannot_hold_the_model_is_one_line(tiny_dir, device) -> None:
    with pytest.raises(ModelLoadError, match=rf"device '{device}'"):
        load_model(str(tiny_dir), device=device)


def test_the_same_folder_spelled_another_way_resumes(tiny_dir, tmp_path, monkeypatch) -> None:
    shutil.copytree(tiny_dir, tmp_path / "models" / "llama")
    monkeypatch.chdir(tmp_path)
    task, proto = load_task("arith", n=4), Protocol("arith", k=2, temperature=1.0, max_new_tokens=4)
    cut = audit(load_model("./models/llama"), task.head(2), proto, out="run", exec_config=ExecConfig(max_batch_rows=3))
    assert cut.n == 2
    for spelling in ("models/llama", str(tmp_path / "models" / "llama"), "models/../models/llama"):
        assert audit(load_model(spelling), task, proto, out="run", exec_config=ExecConfig(max_batch_rows=3)).n == 4
    # a different model under the same spelling is still refused
    flip_middle(tmp_path / "models" / "llama" / "model.safetensors")
    with pytest.raises(ProtocolMismatch, match="model.fingerprint"):
        audit(load_model("./models/llama"), task, proto, out="run", exec_config=ExecConfig(max_batch_rows=3))


def test_a_cached_hub_model_whose_index_names_a_pickle_is_refused_before_loading(sharded, tmp_path,
                                                                                 monkeypatch) -> None:
    import huggingface_hub.constants
    import transformers

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--tiny-org--sharded"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = shutil.copytree(sharded, repo / "snapshots" / commit)
    index = json_index(snapshot)
    index["weight_map"] = {k: v.replace(".safetensors", ".bin") for k, v in index["weight_map"].items()}
    (snapshot / INDEX).write_text(json.dumps(index))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: pytest.fail("the weights were loaded"))
    with pytest.raises(ModelLoadError, match=r"\.bin'.*not safetensors"):
        load_model("tiny-org/sharded")
