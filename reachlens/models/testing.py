"""Tiny random HuggingFace models for tests and benchmarks (nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["TINY_FAMILIES", "make_tiny_from_folder", "make_tiny_gguf", "make_tiny_llama", "make_tiny_model"]

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


TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""A ChatML template, SmolLM2's shape without its default system turn."""
_TINY_CORPUS = ("Q: What is 17 + 25?\nA: 17 + 25 = 42. The answer is 42.\n" * 4
                + "the quick brown fox jumps over 0123456789")


def _tiny_byte_bpe(vocab_size: int):
    """A byte-level BPE tokenizer (GPT-2's scheme, as SmolLM2's) with ChatML's special tokens first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([_TINY_CORPUS], trainer)
    return tok


def _llama_cpp_permute(w, n_head: int):
    """The row order llama.cpp's converter gives Q and K (its rotary layout); transformers' GGUF loader undoes it."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def make_tiny_gguf(path: str | Path, *, n_layers: int = 2, d_model: int = 64, n_heads: int = 4, n_kv_heads: int = 2,
                   d_mlp: int = 128, seed: int = 0, init_std: float = 0.3, quantization: str = "F32"):
    """Write a random Llama as a GGUF file in the hub's layout (as llama.cpp's ``convert_hf_to_gguf.py`` writes
    SmolLM2: ``llama`` metadata, ``token_embd``/``blk.N.*`` tensors with Q and K permuted, a ``gpt2`` byte-level
    BPE vocabulary with merges, ChatML special tokens and chat template) with the ``gguf`` package's writer.

    ``quantization`` is ``F32`` (every tensor exact) or ``Q8_0`` (the matrices quantized, norms F32). Returns the
    HuggingFace model the file was written from (float32, before quantization).

    >>> reference = make_tiny_gguf(tmp_path / "tiny.gguf")  # doctest: +SKIP
    """
    import gguf
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = _tiny_byte_bpe(320)
    vocab = tok.get_vocab_size()
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=d_model, num_hidden_layers=n_layers, num_attention_heads=n_heads,
                      num_key_value_heads=n_kv_heads, intermediate_size=d_mlp, max_position_embeddings=512,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True, initializer_range=init_std,
                      bos_token_id=1, eos_token_id=2, pad_token_id=2)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    qtype = {"F32": gguf.GGMLQuantizationType.F32, "Q8_0": gguf.GGMLQuantizationType.Q8_0}[quantization]
    file_type = {"F32": gguf.LlamaFileType.ALL_F32, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[quantization]

    w = gguf.GGUFWriter(str(path), "llama")
    _gguf_metadata(w, tok, cfg, file_type)
    _gguf_tensors(w, model.state_dict(), cfg, qtype)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file()
    w.close()
    return model


def _gguf_metadata(w, tok, cfg, file_type) -> None:
    """The ``llama`` metadata and the byte-level BPE vocabulary of :func:`make_tiny_gguf`'s file."""
    import json

    import gguf

    vocab = tok.get_vocab_size()
    w.add_name("tiny-llama"), w.add_block_count(cfg.num_hidden_layers), w.add_context_length(512)
    w.add_embedding_length(cfg.hidden_size), w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads), w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(1e-5), w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads), w.add_vocab_size(vocab)
    w.add_file_type(file_type), w.add_tokenizer_model("gpt2"), w.add_tokenizer_pre("smollm")
    w.add_token_list([tok.id_to_token(i) for i in range(vocab)])
    w.add_token_types([gguf.TokenType.CONTROL if i < 3 else gguf.TokenType.NORMAL for i in range(vocab)])
    merges = json.loads(tok.to_str())["model"]["merges"]
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    w.add_bos_token_id(1), w.add_eos_token_id(2), w.add_unk_token_id(0), w.add_pad_token_id(2)
    w.add_add_bos_token(False), w.add_chat_template(TINY_CHAT_TEMPLATE)


def _gguf_tensors(w, sd, cfg, qtype) -> None:
    """A Llama state dict as GGUF tensors (Q and K permuted as llama.cpp does; norms never quantized)."""
    import gguf
    import numpy as np

    def tensor(name: str, value, quantize: bool = True) -> None:
        data = value.detach().float().numpy().astype(np.float32)
        if quantize and qtype != gguf.GGMLQuantizationType.F32 and data.ndim == 2:
            w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, data)

    tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    tensor("output_norm.weight", sd["model.norm.weight"], quantize=False)
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        tensor(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"], quantize=False)
        tensor(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"], quantize=False)
        tensor(f"blk.{i}.attn_q.weight", _llama_cpp_permute(sd[p + "self_attn.q_proj.weight"], cfg.num_attention_heads))
        tensor(f"blk.{i}.attn_k.weight", _llama_cpp_permute(sd[p + "self_attn.k_proj.weight"], cfg.num_key_value_heads))
        for gguf_name, hf_name in (("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj"),
                                   ("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"),
                                   ("ffn_down", "mlp.down_proj")):
            tensor(f"blk.{i}.{gguf_name}.weight", sd[p + hf_name + ".weight"])
