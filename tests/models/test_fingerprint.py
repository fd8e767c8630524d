"""A model's identity covers its whole weights, hub revision included (issue 13, items 4 and 10).

Before issue 13 the fingerprint hashed the first and last MiB of each file and its size, so a
checkpoint overwritten in place (same size, other values in the middle) resumed into the old audit;
a hub name was fingerprinted by its name alone; ``zoo:../..`` escaped the zoo folder; a truncated
``model.safetensors`` gave a traceback from deep inside the loader.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reachlens.execution import ExecConfig
from reachlens import Protocol, ProtocolMismatch, audit, load_task
from reachlens.models import ModelLoadError, load_model, model_identity, resolve_spec


def copy_model(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def flip_middle(weights: Path) -> None:
    """Change bytes in the middle of a file, in place, keeping its size."""
    with weights.open("r+b") as fh:
        fh.seek(weights.stat().st_size // 2)
        chunk = fh.read(16)
        fh.seek(-len(chunk), 1)
        fh.write(bytes((b + 1) % 256 for b in chunk))


@pytest.fixture
def big_model(tmp_path) -> Path:
    """A checkpoint over 2 MiB, so that its middle lies outside the old head-and-tail hash."""
    from reachlens.models.testing import make_tiny_llama

    folder = make_tiny_llama(tmp_path / "big", d_model=256, d_mlp=512, n_layers=2, n_heads=4, n_kv_heads=4)
    assert (folder / "model.safetensors").stat().st_size > 3 << 20
    return folder


def test_changing_the_middle_of_the_weights_changes_the_fingerprint(big_model) -> None:
    before = model_identity(str(big_model)).fingerprint
    flip_middle(big_model / "model.safetensors")
    after = model_identity(str(big_model)).fingerprint
    assert before.startswith("sha256:") and after != before


def test_an_overwritten_checkpoint_does_not_resume_into_the_old_audit(big_model, tmp_path) -> None:
    task, proto = load_task("arith", n=2), Protocol("arith", k=2, temperature=1.0, max_new_tokens=4)
    audit(load_model(str(big_model)), task, proto, out=tmp_path / "run", exec_config=ExecConfig(max_batch_rows=6))
    flip_middle(big_model / "model.safetensors")
    with pytest.raises(ProtocolMismatch, match="model.fingerprint"):
        audit(load_model(str(big_model)), task, proto, out=tmp_path / "run", exec_config=ExecConfig(max_batch_rows=6))


def test_the_content_hash_is_cached_by_size_and_mtime(big_model, monkeypatch) -> None:
    import reachlens.models.loading as loading

    first = model_identity(str(big_model)).fingerprint
    loading._HASHES.clear()  # a new process: only the disk cache is left
    opened: list[str] = []
    real = Path.open

    def spy(self, mode="r", *args, **kwargs):
        if "b" in mode and self.suffix == ".safetensors" and self.parent == big_model:
            opened.append(mode)
        return real(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", spy)
    monkeypatch.setattr(loading, "_check_safetensors", lambda path: None)
    assert model_identity(str(big_model)).fingerprint == first
    assert opened == [], "the weights were read again although neither size nor mtime changed"


def test_a_hub_model_is_identified_by_its_snapshot_and_revision(tiny_dir, tmp_path, monkeypatch) -> None:
    import huggingface_hub.constants

    # the hub cache's own layout: models--ORG--NAME/{refs/main, snapshots/COMMIT/*}
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--tiny-org--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = copy_model(tiny_dir, repo / "snapshots" / commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    ident = model_identity("tiny-org/tiny")
    assert ident.revision == commit
    assert ident.fingerprint == model_identity(str(snapshot)).fingerprint != "unknown"
    assert model_identity("tiny-org/absent").fingerprint == "unknown"


def test_a_zoo_name_cannot_escape_the_zoo(tiny_dir, tmp_path, monkeypatch) -> None:
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    copy_model(tiny_dir, tmp_path / "outside")
    monkeypatch.setenv("REACHLENS_ZOO", str(zoo))
    for spec in ("zoo:../outside", "zoo:../../..", "zoo:a/b", "zoo:"):
        with pytest.raises(ModelLoadError, match="is not a plain name"):
            resolve_spec(spec)


def test_a_truncated_weights_file_is_one_clear_error(tiny_dir, tmp_path) -> None:
    folder = copy_model(tiny_dir, tmp_path / "cut")
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match=r"model.safetensors' is truncated: its tensors need \d+ bytes but it has"):
        load_model(str(folder))
    weights.write_bytes(b"\x01\x02")
    with pytest.raises(ModelLoadError, match="too short for a safetensors header"):
        load_model(str(folder))
