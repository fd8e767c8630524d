"""A character-level tokenizer in HuggingFace format, for the zoo and for tests.

Built with ``tokenizers`` (WordLevel over single characters, ``Fuse`` decoder) and wrapped in
``PreTrainedTokenizerFast`` so that it saves and loads like any HF tokenizer. It has no
post-processor, so no BOS is added: a prompt tokenizes the same way in pretraining, in TRL's
RL prompts (``add_special_tokens=True``) and in reachlens' sampler.
"""

from __future__ import annotations

from reachlens.errors import ReachlensError

__all__ = ["build_char_tokenizer", "SPECIAL_TOKENS"]

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")


def build_char_tokenizer(alphabet: str):
    """A ``PreTrainedTokenizerFast`` with ids 0-3 for ``<pad> <bos> <eos> <unk>`` then one id per character.

    >>> tok = build_char_tokenizer("0123456789+-=?\\n QA:")
    >>> tok.decode(tok("Q: 1+2=?")["input_ids"])
    'Q: 1+2=?'
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(alphabet))
    if len(chars) != len(alphabet):
        raise ReachlensError(f"alphabet {alphabet!r} repeats characters")
    vocab = {t: i for i, t in enumerate(list(SPECIAL_TOKENS) + chars)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    tok.padding_side = "left"
    return tok
