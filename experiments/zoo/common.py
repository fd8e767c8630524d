"""Shared pieces of the zoo's training scripts: the model config, text batching, saving with a card."""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from reachlens.models.char_tokenizer import build_char_tokenizer
from reachlens.tasks.arith import ARITH_ALPHABET

__all__ = ["ZooModelConfig", "arith_tokenizer", "encode_batch", "save_checkpoint", "set_seed"]


@dataclass(frozen=True)
class ZooModelConfig:
    """The zoo's Llama shape (about 1.2M parameters at the defaults)."""

    n_layers: int = 6
    d_model: int = 128
    n_heads: int = 4
    d_mlp: int = 512
    max_positions: int = 256


def set_seed(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def arith_tokenizer():
    return build_char_tokenizer(ARITH_ALPHABET)


def encode_batch(tok, texts: list[str], prompt_lens: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``BOS + text + EOS`` ids and labels (-100 on padding and, if given, on the prompt)."""
    seqs = [tok(t, add_special_tokens=True)["input_ids"] + [tok.eos_token_id] for t in texts]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), tok.pad_token_id, dtype=torch.long)
    labels = torch.full((len(seqs), width), -100, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        labels[i, : len(s)] = torch.tensor(s)
        if prompt_lens is not None:
            labels[i, : prompt_lens[i] + 1] = -100  # BOS + prompt
    return ids, labels


def save_checkpoint(model, tok, folder: Path, card: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    (folder / "training.json").write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")


def now() -> float:
    return time.perf_counter()


def config_dict(cfg) -> dict:
    return asdict(cfg)
