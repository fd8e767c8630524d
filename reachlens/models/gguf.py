"""GGUF files as a model source: ``load_model("path/model.gguf")`` (and ``real:NAME``, :mod:`reachlens.models.real`).

transformers' own GGUF loader (``from_pretrained(folder, gguf_file=NAME)``, which needs the ``gguf`` package)
reads the file and dequantizes every tensor to float32. reachlens does that once per file and saves the result
as an ordinary HuggingFace folder in the model cache, ``gguf/SHA256/`` under ``$REACHLENS_MODEL_CACHE`` (default
``~/.cache/reachlens``, :mod:`reachlens.models.cache`), keyed by the SHA-256 of the file's content: the second
load is a plain safetensors load, and a changed file makes a new folder. The folder holds

* ``config.json``, ``generation_config.json`` and ``model.safetensors``: a fresh ``from_config`` model with the
  dequantized state dict loaded strictly (the model transformers returns is marked quantized and refuses
  ``save_pretrained``), its ``quantization_config`` removed and its embeddings tied as the file says;
* the tokenizer transformers builds from the file (its vocabulary, merges, chat template, BOS/EOS/PAD and
  special tokens), saved with ``save_pretrained``;
* ``gguf.json``: the file's name, SHA-256 and quantization type (``general.file_type``: ``Q4_1``, ``Q4_K_M``).

Numerical caveat: the dequantized weights are the quantized file's, not the original bf16 release; a run's
model identity says so (``quantization``: ``GGUF Q4_1``, ``gguf_sha256``), and two files never share a fingerprint.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from reachlens.errors import ModelLoadError
from reachlens.models.cache import derived_folder, file_sha256

__all__ = ["GGUF_INFO", "GGUFSource", "dequantized_folder", "gguf_source", "is_gguf", "read_gguf_info"]

GGUF_INFO = "gguf.json"
"""The file of a dequantized folder that names the GGUF file it was made from."""
INSTALL_GGUF = "pip install gguf (or pip install 'reachlens[real]')"


@dataclass(frozen=True)
class GGUFSource:
    """What a dequantized folder was made from (its ``gguf.json``)."""

    file: str
    """The GGUF file's name."""
    sha256: str
    """The SHA-256 of the file's content (64 hex digits)."""
    quantization: str
    """The file's quantization type as llama.cpp names it (``Q4_1``, ``Q4_K_M``, ``F16``)."""

    @property
    def label(self) -> str:
        """``GGUF Q4_1``: what a model identity records as its ``quantization``."""
        return f"GGUF {self.quantization}"


def is_gguf(spec: str | os.PathLike) -> bool:
    """Whether ``spec`` names a GGUF file (by its suffix).

    >>> is_gguf("models/SmolLM2-135M-Instruct.Q4_1.gguf"), is_gguf("zoo:base")
    (True, False)
    """
    return str(spec).lower().endswith(".gguf")


def _require_gguf() -> None:
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise ModelLoadError(f"reading a GGUF file needs the gguf package: {INSTALL_GGUF}") from None


def _quantization(reader) -> str:
    """The file's type: ``general.file_type`` as llama.cpp names it, else the commonest type of its matrices."""
    from collections import Counter

    import gguf

    field = reader.fields.get("general.file_type")
    if field is not None:
        try:
            return gguf.LlamaFileType(int(field.contents())).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            pass
    counts = Counter(t.tensor_type.name for t in reader.tensors if len(t.shape) > 1)
    return counts.most_common(1)[0][0] if counts else "unknown"


def gguf_source(path: str | os.PathLike) -> GGUFSource:
    """The name, SHA-256 and quantization type of the GGUF file at ``path`` (its header only is parsed).

    >>> gguf_source("SmolLM2-135M-Instruct.Q4_1.gguf").label  # doctest: +SKIP
    'GGUF Q4_1'
    """
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"GGUF file {str(path)!r} does not exist")
    _require_gguf()
    import gguf

    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, OSError, KeyError, IndexError) as err:
        raise ModelLoadError(f"{str(path)!r} is not a readable GGUF file ({err}); copy or download it again") from None
    return GGUFSource(path.name, file_sha256(path), _quantization(reader))


def read_gguf_info(folder: str | os.PathLike) -> GGUFSource | None:
    """The :class:`GGUFSource` a dequantized folder records, or None for any other folder."""
    info = Path(folder) / GGUF_INFO
    if not info.is_file():
        return None
    d = json.loads(info.read_text())
    return GGUFSource(d["file"], d["sha256"], d["quantization"])


def dequantized_folder(path: str | os.PathLike) -> Path:
    """The HuggingFace folder of the GGUF file at ``path``, dequantized to float32 the first time (in the model
    cache, keyed by the file's SHA-256), read from there after.

    >>> dequantized_folder("SmolLM2-135M-Instruct.Q4_1.gguf")  # doctest: +SKIP
    PosixPath('/root/.cache/reachlens/gguf/6f5b.../')
    """
    path = Path(path).expanduser().resolve()
    source = gguf_source(path)
    return derived_folder("gguf", source.sha256, lambda tmp: _dequantize(path, source, tmp))


def _dequantize(path: Path, source: GGUFSource, out: Path) -> None:
    """Write the dequantized model, its tokenizer and ``gguf.json`` into ``out`` (the procedure of the module
    docstring)."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(path.parent), path.name
    try:
        config = AutoConfig.from_pretrained(folder, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    except ValueError as err:  # an architecture transformers' GGUF loader does not read
        raise ModelLoadError(f"transformers {transformers.__version__} cannot load the GGUF file {str(path)!r}: "
                             f"{err}") from None
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict(), strict=True)
    fresh.tie_weights()
    fresh.generation_config = loaded.generation_config
    del loaded
    fresh.eval()
    fresh.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / GGUF_INFO).write_text(json.dumps({
        "file": source.file, "sha256": source.sha256, "quantization": source.quantization,
        "dequantized_to": "float32", "transformers": transformers.__version__,
    }, indent=2) + "\n")
