"""Tiny random HuggingFace models for tests and benchmarks (nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["make_tiny_llama"]

TEST_ALPHABET = "0123456789+-*=?;#:. \nQAabcdefghijklmnopqrstuvwxyz"


def make_tiny_llama(
    folder: str | Path,
    *,
    n_layers: int = 3,
    d_model: int = 64,
    n_heads: int = 4,
    n_kv_heads: int = 2,
    d_mlp: int = 128,
    seed: int = 0,
    alphabet: str = TEST_ALPHABET,
    max_positions: int = 512,
    init_std: float = 0.02,
) -> Path:
    """Write a randomly initialised Llama with a character tokenizer to ``folder`` (safetensors).

    >>> path = make_tiny_llama(tmp_path / "tiny")  # doctest: +SKIP
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from reachlens.models.char_tokenizer import build_char_tokenizer

    tok = build_char_tokenizer(alphabet)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=d_model, num_hidden_layers=n_layers, num_attention_heads=n_heads,
        num_key_value_heads=n_kv_heads, intermediate_size=d_mlp, max_position_embeddings=max_positions,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        tie_word_embeddings=True, initializer_range=init_std,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    folder = Path(folder)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder
