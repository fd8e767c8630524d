"""One tokenizer: the model's own HuggingFace tokenizer, as it ships, for reachlens and for the user.

TransformerLens' bridge replaces the tokenizer it is given with a copy rebuilt with
``add_bos_token=True`` (its convention of always prepending BOS), so ``model.to_tokens(prompt)``
would differ from what a deployed model is prompted with (and from what lm-evaluation-harness
scores with). :func:`reachlens.load_model` puts the tokenizer back as it shipped
(``model.tokenizer``) and sets ``model.cfg.default_prepend_bos`` to what that tokenizer does by
itself, so ``model.to_tokens(prompt)`` gives the ids the engine decodes and
``model.run_with_cache(model.to_tokens(prompt))`` caches the prompt an audit saw.

A prompt's text is data: the text of a special token in it (``<|im_end|>``, ``<|endoftext|>``) is
encoded as text, never as that control token (``split_special_tokens``), so a question or a system turn
cannot forge a chat turn or end the document. The one exception is a :class:`ChatPrompt`, the text a chat
template rendered (:mod:`reachlens.tasks.chat`): there the special tokens the template wrote are those
tokens, and the turns' contents it carries are still text. Prompts keep the tokenizer's default special
tokens (a BOS where it adds one), with one BOS: a chat prompt whose template starts with the BOS token
(Llama 3's ``<|begin_of_text|>``, Gemma's ``<bos>``) gets no second one, as
``apply_chat_template(tokenize=True)`` and lm-evaluation-harness encode it. An EOS that a tokenizer
appends to every text (some OLMo tokenizers do) is dropped from a *prompt*, as TransformerLens'
``to_tokens`` drops it: a prompt that ends the document asks for nothing.

The data-is-text rule is reachlens' own, for the prompts it renders (a :class:`Prompt`, or a :class:`ChatPrompt`)
and every text its engine encodes. A TransformerLens-named method keeps TransformerLens' meaning: ``load_model``
makes the bridge's ``to_tokens`` (and so ``model(text)``, ``run_with_cache(text)``, ``generate(text)``,
``to_str_tokens``, ``to_single_token``) :func:`bridge_to_tokens`, which reads a plain ``str``'s special-token text
as those tokens, as ``tokenizer(text)`` and TransformerLens do (a chat transcript rendered by
``apply_chat_template(tokenize=False)`` gives ``apply_chat_template(tokenize=True)``'s ids, one BOS), and a
:class:`Prompt` as the engine encodes it, so ``model.to_tokens(render_prompts(...)[i])`` is what the audit decoded.
TransformerLens' own would add a second BOS to a chat prompt and needs a PAD token the shipped tokenizer may lack.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
from jaxtyping import Int
from torch import Tensor

from reachlens.errors import ReachlensError

__all__ = [
    "ChatPrompt", "Prompt", "bridge_to_tokens", "chat_ids", "encode", "encode_prompts", "special_ids",
    "special_tokens_added", "text_ids", "tokenizer_of", "transformer_lens_ids",
]


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


class Prompt(str):
    """A prompt reachlens rendered from a task's text: its text is data (a special token's text in it is encoded
    as text, by the engine and by ``model.to_tokens`` alike). Equal to its text as a ``str``; a plain ``str``
    given to ``model.to_tokens`` keeps TransformerLens' meaning (see the module's docstring).

    >>> Prompt("Q: 1+2=?\\nA:") == "Q: 1+2=?\\nA:"
    True
    """

    __slots__ = ()

    def __reduce__(self):
        return Prompt, (str(self),)


class ChatPrompt(Prompt):
    """The text a chat template rendered, with the spans ``template`` (``(start, stop)`` pairs) that are the
    template's own: a special token's text there is that token; every other character (a turn's content) is
    data, encoded as text. Built by :func:`reachlens.tasks.render_prompts`; equal to its text as a ``str``.

    >>> p = ChatPrompt("<|im_start|>user\\nhi<|im_end|>", ((0, 17), (19, 29)))  # doctest: +SKIP
    """

    __slots__ = ("template",)

    def __new__(cls, text: str, template: Sequence[tuple[int, int]]) -> "ChatPrompt":
        self = super().__new__(cls, text)
        self.template = tuple((int(a), int(b)) for a, b in template)
        return self

    def __reduce__(self):
        return ChatPrompt, (str(self), self.template)


def special_ids(tokenizer) -> dict[str, int]:
    """The text of each of the tokenizer's special tokens (its added tokens marked special) and its id."""
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return {t.content: int(i) for i, t in added.items() if getattr(t, "special", False) and t.content}


def _chat_pieces(prompt: ChatPrompt, specials: dict[str, int]) -> list[str | int]:
    """``prompt`` as its text pieces and, between them, the ids of the special tokens its template wrote."""
    pattern = re.compile("|".join(map(re.escape, sorted(specials, key=len, reverse=True))) or "(?!)")
    pieces: list[str | int] = []
    at = 0
    for start, stop in prompt.template:
        for m in pattern.finditer(prompt, start, stop):
            pieces += [prompt[at:m.start()]] if m.start() > at else []
            pieces.append(specials[m.group()])
            at = m.end()
    return pieces + ([prompt[at:]] if at < len(prompt) else [])


def encode_prompts(tokenizer, prompts: Sequence[str]) -> list[list[int]]:
    """Token ids of each prompt, its text encoded as text (a special token's text stays text), with the
    tokenizer's default special tokens, one BOS, less an appended EOS; a :class:`ChatPrompt`'s template
    writes its own special tokens (and its BOS, when it starts with it).

    >>> encode_prompts(qwen_tokenizer, ["a<|endoftext|>"])  # doctest: +SKIP
    [[64, 27, 91, 8691, 723, 91, 29]]
    """
    prepends_bos, appends_eos = special_tokens_added(tokenizer)
    out = []
    for p in prompts:
        if isinstance(p, ChatPrompt):
            ids = chat_ids(tokenizer, p)
            ids = [tokenizer.bos_token_id, *ids] if prepends_bos and ids[:1] != [tokenizer.bos_token_id] else ids
        else:
            ids = list(tokenizer(p, split_special_tokens=True)["input_ids"])
            if appends_eos and len(ids) > 1 and ids[-1] == tokenizer.eos_token_id:
                ids = ids[:-1]
        out.append(ids)
    return out


def chat_ids(tokenizer, prompt: ChatPrompt) -> list[int]:
    """The ids of ``prompt`` with no special token added: the template's special tokens, its contents as text."""
    ids: list[int] = []
    for piece in _chat_pieces(prompt, special_ids(tokenizer)):
        ids += [piece] if isinstance(piece, int) else text_ids(tokenizer, piece)
    return ids


def text_ids(tokenizer, text: str) -> list[int]:
    """The ids of ``text`` as text: no special token added, none read from it (a :class:`ChatPrompt`: its
    template's own, :func:`chat_ids`)."""
    if isinstance(text, ChatPrompt):
        return chat_ids(tokenizer, text)
    return list(tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])


def transformer_lens_ids(tokenizer, text: str, *, special: bool = True) -> list[int]:
    """The ids TransformerLens' ``to_tokens`` means for a plain ``str``: its special-token text read as those
    tokens; with ``special``, the tokenizer's default special tokens, one BOS (a text that starts with the BOS
    token's text, as a rendered Llama 3 or Gemma chat does, gets no second one) and no appended EOS."""
    if not special:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    ids = list(tokenizer(text)["input_ids"])
    prepends_bos, appends_eos = special_tokens_added(tokenizer)
    bos = tokenizer.bos_token_id
    if prepends_bos and bos is not None and ids[:2] == [bos, bos]:
        ids = ids[1:]
    if appends_eos and len(ids) > 1 and ids[-1] == tokenizer.eos_token_id:
        ids = ids[:-1]
    return ids


def _to_token_ids(tok, text: str, prepend_bos: bool | None) -> list[int]:
    """One text's ids under ``to_tokens``: a :class:`Prompt` as the engine encodes it, a plain ``str`` as
    TransformerLens does (:func:`transformer_lens_ids`)."""
    if isinstance(text, Prompt):
        return text_ids(tok, text) if prepend_bos is False else encode_prompts(tok, [text])[0]
    return transformer_lens_ids(tok, text, special=prepend_bos is not False)


def bridge_to_tokens(
    self, input: str | list[str], prepend_bos: bool | None = None, padding_side: str | None = None,
    move_to_device: bool = True, truncate: bool = True,
) -> Int[Tensor, "batch pos"]:
    """``TransformerBridge.to_tokens`` with TransformerLens' meaning on the shipped tokenizer (installed on the
    models ``load_model`` returns): a plain ``str``'s special-token text is those tokens; a :class:`Prompt`
    (what :func:`reachlens.tasks.render_prompts` returns) is encoded as the engine encodes it, its text as data.

    ``prepend_bos`` None: the shipped tokenizer's defaults, one BOS. True: the same with the BOS (a BOS-less
    tokenizer: its EOS, TransformerLens' stand-in) first if it is not already; False: no special token added.
    Several texts are padded on ``padding_side`` (default: the tokenizer's) with its PAD, else its EOS, else 0.
    ``truncate`` keeps the first ``cfg.n_ctx`` tokens.
    """
    tok = tokenizer_of(self)
    texts = [input] if isinstance(input, str) else list(input)
    rows = [_to_token_ids(tok, t, prepend_bos) for t in texts]
    if prepend_bos:
        bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        rows = [r if (r[:1] == [bos] or bos is None) else [bos, *r] for r in rows]
    if truncate and getattr(self.cfg, "n_ctx", None):
        rows = [r[: self.cfg.n_ctx] for r in rows]
    pad = next((i for i in (tok.pad_token_id, tok.eos_token_id) if i is not None), 0)
    width = max((len(r) for r in rows), default=0)
    left = (padding_side or getattr(tok, "padding_side", "right")) == "left"
    out = torch.full((len(rows), width), int(pad), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            at = slice(width - len(r), width) if left else slice(0, len(r))
            out[i, at] = torch.tensor(r)
    return out.to(self.cfg.device) if move_to_device and getattr(self.cfg, "device", None) is not None else out


def encode(model, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text as the engine encodes a prompt, its text as data (equal to ``model.to_tokens(p)``
    for a prompt reachlens rendered, a :class:`Prompt`)."""
    return encode_prompts(tokenizer_of(model), texts)
