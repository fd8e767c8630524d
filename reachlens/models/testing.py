"""Tiny random HuggingFace models for tests and benchmarks (nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["TINY_FAMILIES", "make_tiny_from_folder", "make_tiny_llama", "make_tiny_model"]

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


TINY_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "olmo2", "phi3", "gpt_neox", "gpt2")
"""The families :func:`make_tiny_model` builds (the ones the test suite runs every study on)."""


def _tiny_config(family: str, vocab: int, special: dict, *, n_layers: int, d_model: int, init_std: float,
                 max_positions: int, sliding_window: int):
    import transformers as T

    rotary = dict(
        vocab_size=vocab, hidden_size=d_model, num_hidden_layers=n_layers, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=2 * d_model, max_position_embeddings=max_positions,
        initializer_range=init_std, **special,
    )
    head_dim = d_model // 4
    if family == "llama":
        return T.LlamaConfig(**rotary, tie_word_embeddings=True)
    if family == "mistral":  # a sliding window, as Mistral 7B v0.1 has (4096 there)
        return T.MistralConfig(**rotary, sliding_window=sliding_window)
    if family == "qwen2":
        return T.Qwen2Config(**rotary)
    if family == "qwen3":
        return T.Qwen3Config(**rotary, head_dim=head_dim)
    # Gemma: untied head (a tied one, with the sqrt(d) embedding scale, makes a random model repeat its input)
    if family == "gemma2":  # softcapped attention and logits, alternating sliding/full layers
        return T.Gemma2Config(**rotary, head_dim=head_dim, tie_word_embeddings=False, sliding_window=sliding_window,
                              query_pre_attn_scalar=head_dim, attn_logit_softcapping=50.0, final_logit_softcapping=30.0)
    if family == "gemma3":  # text only: sliding and full layers, local and global rotary bases, QK-norm
        types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layers)]
        return T.Gemma3TextConfig(**rotary, head_dim=head_dim, tie_word_embeddings=False, sliding_window=sliding_window,
                                  layer_types=types, query_pre_attn_scalar=head_dim)
    if family == "olmo2":  # QK-norm and post-norms
        return T.Olmo2Config(**rotary)
    if family == "phi3":  # fused qkv and gate/up projections
        return T.Phi3Config(**rotary)
    if family == "gpt_neox":  # Pythia: partial rotary, parallel attention and MLP
        return T.GPTNeoXConfig(
            vocab_size=vocab, hidden_size=d_model, num_hidden_layers=n_layers, num_attention_heads=4,
            intermediate_size=4 * d_model, max_position_embeddings=max_positions, rotary_pct=0.25,
            use_parallel_residual=True, initializer_range=init_std, **special,
        )
    if family == "gpt2":  # learned absolute positions
        return T.GPT2Config(vocab_size=vocab, n_embd=d_model, n_layer=n_layers, n_head=4, n_positions=max_positions,
                            initializer_range=init_std, **special)
    raise ValueError(f"unknown family {family!r}; known: {', '.join(TINY_FAMILIES)}")


def make_tiny_model(
    family: str,
    folder: str | Path,
    *,
    n_layers: int = 2,
    d_model: int = 64,
    seed: int = 0,
    alphabet: str = TEST_ALPHABET,
    max_positions: int = 256,
    sliding_window: int = 8,
    init_std: float = 0.3,
) -> Path:
    """Write a randomly initialised checkpoint of ``family`` (one of :data:`TINY_FAMILIES`) with a
    character tokenizer to ``folder`` (safetensors), built from the family's ``transformers`` config.

    Each family keeps what sets it apart: Gemma 2 softcaps attention and logits and alternates
    sliding-window (``sliding_window`` tokens, shorter than a test prompt) and full layers; Gemma 3
    mixes sliding and full layers with two rotary bases; GPT-NeoX rotates a quarter of each head and
    runs attention and MLP in parallel; GPT-2 learns its positions; Mistral has a sliding window.
    A large ``init_std`` makes greedy outputs vary from token to token.

    >>> path = make_tiny_model("gemma2", tmp_path / "gemma2")  # doctest: +SKIP
    """
    import torch
    from transformers import AutoModelForCausalLM

    from reachlens.models.char_tokenizer import build_char_tokenizer

    tok = build_char_tokenizer(alphabet)
    special = dict(pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    cfg = _tiny_config(family, len(tok), special, n_layers=n_layers, d_model=d_model, init_std=init_std,
                       max_positions=max_positions, sliding_window=sliding_window)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    folder = Path(folder)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


def make_tiny_from_folder(
    source: str | Path, folder: str | Path, *, seed: int = 0, init_std: float = 0.02, **overrides
) -> Path:
    """Random weights for the ``config.json`` of ``source`` (a folder of a real tokenizer, its config and
    generation config, e.g. ``../shared/tokenizers/qwen2.5-instruct``), written to ``folder`` beside a copy
    of those files (safetensors). ``init_std`` sets the config's ``initializer_range``: a larger one
    (0.3) makes greedy text varied, multi-byte text included, where the default repeats one token.
    ``overrides`` set other config fields (``tie_word_embeddings=False`` for Gemma: a tied head with its
    sqrt(d) embedding scale makes a random model repeat its input).

    >>> path = make_tiny_from_folder("../shared/tokenizers/gpt2", tmp_path / "gpt2", init_std=0.3)  # doctest: +SKIP
    """
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    source, folder = Path(source), Path(folder)
    cfg = AutoConfig.from_pretrained(source)
    cfg.initializer_range = init_std
    for key, value in overrides.items():
        setattr(cfg, key, value)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(folder, safe_serialization=True)
    for f in source.iterdir():
        if f.is_file() and f.name != "config.json":
            shutil.copyfile(f, folder / f.name)  # tokenizer files, generation config, chat template
    return folder


if __name__ == "__main__":  # python -m reachlens.models.testing FAMILY FOLDER
    import sys

    if len(sys.argv) != 3:
        raise SystemExit(
            f"usage: python -m reachlens.models.testing FAMILY FOLDER  (FAMILY: {', '.join(TINY_FAMILIES)})"
        )
    print(make_tiny_model(sys.argv[1], sys.argv[2]))
