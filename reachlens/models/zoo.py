"""The model zoo: tiny HuggingFace checkpoints the project trains and ships in ``reachlens/assets/zoo/NAME``.

Each entry is a real HF folder (``config.json``, ``model.safetensors``, tokenizer files) plus
``training.json`` (the recipe, command, seed, parent, wall time, parameter count) and
``MODEL_CARD.md``. ``card.json`` holds the measured audits (``audits[task]``: D and O_64 on the test
split of ``arith`` and of ``arith_hard``) and the exact command that reproduces each. ``load_model("zoo:NAME")`` loads an entry through the same
code path as any HuggingFace model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.models.loading import _zoo_root

__all__ = ["ZooEntry", "native_format", "zoo_entries", "zoo_table", "zoo_root"]


def zoo_root() -> Path:
    """The folder holding the zoo (``reachlens/assets/zoo``, or ``$REACHLENS_ZOO``)."""
    return _zoo_root()


@dataclass(frozen=True)
class ZooEntry:
    """One shipped checkpoint and what is known about it."""

    name: str
    path: Path
    training: dict[str, Any]
    card: dict[str, Any]

    @property
    def spec(self) -> str:
        return f"zoo:{self.name}"

    @property
    def size_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.path.iterdir() if f.is_file())


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def zoo_entries(root: Path | None = None) -> list[ZooEntry]:
    """Every checkpoint folder under the zoo root, by name."""
    root = zoo_root() if root is None else root
    if not root.is_dir():
        return []
    return [
        ZooEntry(p.name, p, _read(p / "training.json"), _read(p / "card.json"))
        for p in sorted(root.iterdir()) if (p / "config.json").is_file()
    ]


def native_format(spec: str, root: Path | None = None) -> str | None:
    """The prompt format a ``zoo:NAME`` checkpoint was trained in (its ``training.json``); None for any
    other spec, or a zoo entry that records none."""
    if not spec.startswith("zoo:"):
        return None
    root = zoo_root() if root is None else root
    return _read(root / spec.removeprefix("zoo:") / "training.json").get("prompt_format")


def zoo_table(root: Path | None = None) -> pd.DataFrame:
    """One row per entry: name, recipe, parent, native prompt format, parameters, wall time, the measured D
    and O_64 of each card protocol (``arith``: the three-tier mix; ``arith_hard``: 3-6 operations; "qa"
    prompts, K=64 at T=0.8), size."""
    rows = []
    for e in zoo_entries(root):
        audits = e.card.get("audits", {})
        parent = e.training.get("parent", "")
        rows.append({
            "name": e.name, "recipe": e.training.get("recipe", "?"), "parent": Path(parent).name if parent else "",
            "step": e.training.get("snapshot_step", e.training.get("steps")),
            "format": e.training.get("prompt_format", "qa"),
            "parameters": e.training.get("parameters"), "train_s": e.training.get("wall_seconds"),
            "D": audits.get("arith", {}).get("D"), "O_64": audits.get("arith", {}).get("O_K"),
            "D_hard": audits.get("arith_hard", {}).get("D"), "O_64_hard": audits.get("arith_hard", {}).get("O_K"),
            "MB": round(e.size_bytes / 2**20, 2),
        })
    return pd.DataFrame(rows, columns=["name", "recipe", "parent", "step", "format", "parameters", "train_s", "D", "O_64",
                                       "D_hard", "O_64_hard", "MB"])
