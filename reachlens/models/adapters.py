"""Base + adapter checkpoints: a PEFT adapter folder (LoRA) as a model spec.

A folder holding ``adapter_config.json`` and ``adapter_model.safetensors`` (what ``peft``'s ``save_pretrained``
writes) is a model: its base is the spec its ``adapter_config.json`` names as ``base_model_name_or_path``
(``real:smollm2-135m-instruct``, ``zoo:base``, a folder, a GGUF file, another adapter). reachlens merges the
adapter into the base once (``PeftModel.from_pretrained(base, folder).merge_and_unload()``, float32) and keeps
the merged model as an ordinary HuggingFace folder in the model cache, ``merged/KEY/`` (KEY from the base's
fingerprint and the adapter's files, :mod:`reachlens.models.cache`), with the base's tokenizer files copied as
they are: every study, the engine's fused paths and vLLM then read a plain checkpoint. Adapter weights are read
from safetensors only (an ``adapter_model.bin`` is refused: unpickling runs code).

The run's model identity names both (:func:`reachlens.models.model_identity`): ``base`` (the base's spec and
fingerprint) and ``adapter`` (the adapter files' fingerprint), and its fingerprint covers both, so two runs with
different adapters on one base, or one adapter on two bases, never compare as the same model.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from reachlens.errors import ModelLoadError
from reachlens.models.cache import derived_folder, file_sha256

__all__ = ["ADAPTER_CONFIG", "ADAPTER_WEIGHTS", "adapter_base", "adapter_fingerprint", "is_adapter", "merged_folder"]

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
INSTALL_PEFT = "pip install peft (or pip install 'reachlens[real]')"
_NOT_COPIED = {"config.json", "generation_config.json", "model.safetensors.index.json", "gguf.json",
               ".reachlens-complete", "training.json", "card.json", "MODEL_CARD.md"}


def is_adapter(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an adapter folder (an ``adapter_config.json`` and no ``config.json`` of its own)."""
    path = Path(path)
    return (path / ADAPTER_CONFIG).is_file() and not (path / "config.json").is_file()


def _config(folder: Path, spec: str) -> dict:
    try:
        value = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ModelLoadError(f"adapter {spec!r}: {ADAPTER_CONFIG} cannot be read ({err}); copy it again") from None
    if not isinstance(value, dict):
        raise ModelLoadError(f"adapter {spec!r}: {ADAPTER_CONFIG} is not a JSON object; copy it again")
    return value


def adapter_base(folder: str | os.PathLike, spec: str | None = None) -> str:
    """The base model spec an adapter folder names (``base_model_name_or_path``); a relative path is taken
    from the adapter's folder.

    >>> adapter_base("reachlens/assets/real/smollm2-135m-instruct-grpo")  # doctest: +SKIP
    'real:smollm2-135m-instruct'
    """
    folder = Path(folder)
    spec = str(folder) if spec is None else spec
    base = _config(folder, spec).get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        raise ModelLoadError(f"adapter {spec!r}: {ADAPTER_CONFIG} names no base_model_name_or_path; set it to the "
                             "base's spec (real:NAME, zoo:NAME or its folder)")
    if base.startswith(("./", "../")):
        return str((folder / base).resolve())
    return base


def adapter_files(folder: Path, spec: str) -> list[Path]:
    """The adapter's config and weights, checked: safetensors only, present, inside the folder."""
    weights = folder / ADAPTER_WEIGHTS
    if not weights.is_file():
        pickled = [p.name for p in folder.glob("adapter_model.*") if p.suffix != ".safetensors"]
        if pickled:
            raise ModelLoadError(f"adapter {spec!r} has only pickle weights ({', '.join(pickled)}); reachlens loads "
                                 "safetensors only, because unpickling can run arbitrary code. Save it again with "
                                 "peft's save_pretrained(folder, safe_serialization=True) in a trusted session.")
        raise ModelLoadError(f"adapter {spec!r} has no {ADAPTER_WEIGHTS}")
    if weights.resolve().parent != folder.resolve():
        raise ModelLoadError(f"adapter {spec!r}: {ADAPTER_WEIGHTS} lies outside the adapter folder (a link)")
    return [folder / ADAPTER_CONFIG, weights]


def adapter_fingerprint(folder: str | os.PathLike, spec: str | None = None) -> str:
    """``sha256:`` and 16 hex digits over the adapter's config and weights (their names and full contents)."""
    folder = Path(folder)
    h = hashlib.sha256()
    for path in adapter_files(folder, str(folder) if spec is None else spec):
        h.update(f"{path.name}:{file_sha256(path)}\n".encode())
    return "sha256:" + h.hexdigest()[:16]


def merged_folder(base_folder: str | os.PathLike, base_fingerprint: str, adapter: str | os.PathLike,
                  spec: str | None = None) -> Path:
    """The folder of the base at ``base_folder`` with the adapter at ``adapter`` merged in, made once in the
    model cache (keyed by the base's fingerprint and the adapter's files).

    >>> base = "zoo:base"
    >>> merged_folder(resolve_spec(base)[0], model_identity(base).fingerprint, "runs/lora")  # doctest: +SKIP
    """
    adapter, base_folder = Path(adapter), Path(base_folder)
    spec = str(adapter) if spec is None else spec
    key = hashlib.sha256(f"{base_fingerprint}\n{adapter_fingerprint(adapter, spec)}".encode()).hexdigest()[:32]
    return derived_folder("merged", key, lambda tmp: _merge(base_folder, adapter, spec, tmp))


def _merge(base_folder: Path, adapter: Path, spec: str, out: Path) -> None:
    try:
        from peft import PeftModel
    except ImportError:
        raise ModelLoadError(f"adapter {spec!r}: loading an adapter needs the peft package: {INSTALL_PEFT}") from None
    import torch
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_folder, use_safetensors=True, dtype=torch.float32)
    try:
        model = PeftModel.from_pretrained(base, adapter, use_safetensors=True)
    except (ValueError, KeyError, RuntimeError) as err:
        raise ModelLoadError(f"adapter {spec!r} does not fit its base {str(base_folder)!r}: {err}") from None
    merged = model.merge_and_unload()
    merged.eval()
    merged.save_pretrained(out, safe_serialization=True)
    for path in base_folder.iterdir():  # the tokenizer as the base ships it
        if path.is_file() and path.name not in _NOT_COPIED and not path.name.endswith(".safetensors"):
            shutil.copy2(path, out / path.name)
