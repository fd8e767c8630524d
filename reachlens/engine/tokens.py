"""One tokenizer: the model's own HuggingFace tokenizer, as it ships, for reachlens and for the user.

TransformerLens' bridge replaces the tokenizer it is given with a copy rebuilt with
``add_bos_token=True`` (its convention of always prepending BOS), so ``model.to_tokens(prompt)``
would differ from what a deployed model is prompted with (and from what lm-evaluation-harness
scores with). :func:`reachlens.load_model` puts the tokenizer back as it shipped
(``model.tokenizer``) and sets ``model.cfg.default_prepend_bos`` to what that tokenizer does by
itself, so ``model.to_tokens(prompt)`` gives the ids the engine decodes and
``model.run_with_cache(model.to_tokens(prompt))`` caches the prompt an audit saw.

Prompts keep the tokenizer's default special tokens (a BOS where it adds one); an EOS that a
tokenizer appends to every text (some OLMo tokenizers do) is dropped from a *prompt*, as
TransformerLens' ``to_tokens`` drops it: a prompt that ends the document asks for nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from reachlens.errors import ReachlensError

__all__ = ["encode", "encode_prompts", "special_tokens_added", "tokenizer_of"]


def tokenizer_of(model):
    """The tokenizer reachlens encodes and decodes with for ``model`` (``model.tokenizer``)."""
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        raise ReachlensError("the model has no tokenizer; load it with reachlens.load_model")
    return tok


def special_tokens_added(tokenizer) -> tuple[bool, bool]:
    """(prepends BOS, appends EOS): what ``tokenizer(text)`` adds around a text by default.

    >>> special_tokens_added(char_tokenizer)  # doctest: +SKIP
    (False, False)
    """
    plain = list(tokenizer("a b", add_special_tokens=False)["input_ids"])
    full = list(tokenizer("a b", add_special_tokens=True)["input_ids"])
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    prepends = len(full) > len(plain) and bos is not None and full[0] == bos
    appends = len(full) > len(plain) and eos is not None and full[-1] == eos and (not plain or plain[-1] != eos)
    return prepends, appends


def encode_prompts(tokenizer, prompts: Sequence[str]) -> list[list[int]]:
    """Token ids of each prompt with the tokenizer's default special tokens, less an appended EOS."""
    _, appends_eos = special_tokens_added(tokenizer)
    out = []
    for p in prompts:
        ids = list(tokenizer(p, add_special_tokens=True)["input_ids"])
        if appends_eos and len(ids) > 1 and ids[-1] == tokenizer.eos_token_id:
            ids = ids[:-1]
        out.append(ids)
    return out


def encode(model, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text as the engine encodes a prompt (equal to ``model.to_tokens(text)``)."""
    return encode_prompts(tokenizer_of(model), texts)
