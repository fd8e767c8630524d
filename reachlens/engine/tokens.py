"""Which tokenizer encodes prompts: the model's own HuggingFace tokenizer, as it ships.

TransformerLens' bridge replaces the tokenizer it is given with one rebuilt with
``add_bos_token=True`` (TransformerLens' convention of always prepending BOS). A deployed model is
prompted with its own tokenizer's defaults, and lm-evaluation-harness scores with them too, so
reachlens encodes with the tokenizer exactly as ``AutoTokenizer.from_pretrained`` returned it.
:func:`reachlens.load_model` keeps that one as ``model.reachlens_tokenizer``; for a bridge built
some other way, reachlens falls back to ``model.tokenizer`` (BOS prepended).
"""

from __future__ import annotations

from collections.abc import Sequence

from reachlens.errors import ReachlensError

__all__ = ["tokenizer_of", "encode"]


def tokenizer_of(model):
    """The tokenizer reachlens encodes and decodes with for ``model``."""
    tok = model.__dict__.get("reachlens_tokenizer") or getattr(model, "tokenizer", None)
    if tok is None:
        raise ReachlensError("the model has no tokenizer; load it with reachlens.load_model")
    return tok


def encode(model, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text with the tokenizer's default special tokens."""
    tok = tokenizer_of(model)
    return [list(tok(t, add_special_tokens=True)["input_ids"]) for t in texts]
