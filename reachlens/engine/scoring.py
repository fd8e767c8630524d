"""Log-likelihood of a continuation given a context, by lm-evaluation-harness' rules (0.4.x).

The recognition side of :mod:`reachlens.studies.recognition` and anything else that scores options
uses this, so numbers are comparable with lm-eval's ``acc`` / ``acc_norm``:

* trailing whitespace of the context is moved into the continuation;
* continuation tokens = ``encode(context + continuation)[len(encode(context)):]``, with the
  default special tokens of the model's own tokenizer as it ships (:func:`reachlens.engine.tokenizer_of`,
  not the BOS-prepending copy TransformerLens' bridge installs): a BOS where the tokenizer adds one
  (one: a rendered chat template that starts with it gets no second one), the text of a special token
  in a context or continuation encoded as text (:mod:`reachlens.engine.tokens`),
  none for the zoo's character tokenizer; an empty context is replaced by one prefix token, the
  tokenizer's BOS or, for a BOS-less tokenizer, its EOS (lm-eval's ``prefix_token_id``);
* the model reads ``(context + continuation)[-(max_length + 1):][:-1]`` (cut from the left;
  ``max_length`` is lm-eval's ``max_length``: given, or the config's ``n_positions``/``max_position_embeddings``/
  ``n_ctx``, :func:`scoring_window`); a continuation longer than the window is refused, as lm-eval asserts;
* score = float32 log-softmax summed over the continuation tokens, with lm-eval's ``is_greedy``.

Rows run right-padded through :class:`~reachlens.engine.LayerStack`, longest first (causal
attention never lets a real token see the padding, as in lm-eval), so the caller's hooks are live.
Batching changes matmul shapes: a score can differ from a one-row forward in the last float32 bits
(about 1e-6 relative); an exact tie can then break either way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from reachlens.engine.stack import LayerStack
from reachlens.engine.tokens import ChatPrompt, encode_prompts, text_ids, tokenizer_of
from reachlens.errors import ReachlensError

__all__ = ["LoglikResult", "encode_pair", "loglikelihoods", "right_padded", "scoring_window"]


@dataclass(frozen=True)
class LoglikResult:
    """The score of one (context, continuation) request."""

    logprob: float
    """Summed float32 log-probability of the continuation tokens."""
    is_greedy: bool
    """Whether every continuation token is the argmax of its position (lm-eval's ``is_greedy``)."""
    n_tokens: int
    """Number of continuation tokens scored."""


def encode_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """Context and continuation token ids by lm-eval's rule (whitespace moved, whole-string encoding).

    >>> encode_pair(tok, "Q: 1+1=?\\nA:", " 2")  # doctest: +SKIP
    ([...], [4, 9])
    """
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        continuation, context = context[-n_spaces:] + continuation, _cut(context, len(context) - n_spaces)
    if context == "":
        prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        if prefix is None:
            raise ReachlensError("an empty context needs a prefix token, and the tokenizer has neither BOS nor EOS")
        return [int(prefix)], text_ids(tokenizer, continuation)
    if isinstance(context, ChatPrompt):  # one BOS: the template's own, where it starts with it
        ctx, whole = encode_prompts(tokenizer, [context, ChatPrompt(context + continuation, context.template)])
        return ctx, whole[len(ctx):]
    whole = list(tokenizer(context + continuation, split_special_tokens=True)["input_ids"])
    ctx = list(tokenizer(context, split_special_tokens=True)["input_ids"])
    return ctx, whole[len(ctx):]


def _cut(context: str, n: int) -> str:
    """The first ``n`` characters of ``context`` (a :class:`ChatPrompt` keeps its template's spans there)."""
    if not isinstance(context, ChatPrompt):
        return context[:n]
    return ChatPrompt(context[:n], [(a, min(b, n)) for a, b in context.template if a < n])


def scoring_window(model) -> int:
    """lm-eval's default ``max_length`` for ``model`` (or its HuggingFace config): the config's ``n_positions``,
    ``max_position_embeddings`` or ``n_ctx`` (the first set), else 2048."""
    cfg = model.original_model.config if hasattr(model, "original_model") else model
    for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(cfg, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return 2048  # lm-eval's default when the config names none


def right_padded(seqs: Sequence[Sequence[int]], pad_id: int) -> Int[Tensor, "batch pos"]:
    """Token rows right-padded with ``pad_id`` into one ``[batch, longest]`` tensor."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(list(s), dtype=torch.long)
    return ids


def _score_rows(
    logits: Float[Tensor, "batch pos d_vocab"], inputs: Sequence[Sequence[int]], conts: Sequence[Sequence[int]]
) -> list[LoglikResult]:
    out = []
    for row, (inp, cont) in enumerate(zip(inputs, conts)):
        n = len(cont)
        logp = torch.log_softmax(logits[row, len(inp) - n : len(inp)].float(), dim=-1)
        target = torch.tensor(cont, device=logp.device)
        out.append(LoglikResult(
            float(logp.gather(-1, target[:, None]).sum()), bool((logp.argmax(-1) == target).all()), n,
        ))
    return out


@torch.inference_mode()
def loglikelihoods(
    model, requests: Sequence[tuple[str, str]], *, batch_size: int = 32, max_length: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[LoglikResult]:
    """lm-eval ``loglikelihood`` of each ``(context, continuation)`` request, in request order.

    Args:
        model: a TransformerBridge (hooks the caller attached are live).
        requests: ``(context, continuation)`` strings; the continuation includes its delimiter.
        batch_size: rows per forward (longest first, right-padded).
        max_length: the model's window (the config's when None); longer inputs lose their left end.
        progress: ``progress(requests scored, requests in all)`` after each forward.

    >>> loglikelihoods(model, [("Question: Why?\\nAnswer:", " Because.")])[0].logprob  # doctest: +SKIP
    -12.3
    """
    if batch_size < 1:
        raise ReachlensError(f"batch_size={batch_size!r} must be at least 1")
    tok = tokenizer_of(model)
    if max_length is not None and (not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < 1):
        raise ReachlensError(f"max_length={max_length!r} must be a positive integer (or None: the model's window)")
    window = scoring_window(model) if max_length is None else max_length
    pairs = [encode_pair(tok, c, x) for c, x in requests]
    for i, (_, cont) in enumerate(pairs):
        if not cont:
            raise ReachlensError(f"request {i}: continuation {requests[i][1]!r} encodes to no tokens")
        if len(cont) > window:
            raise ReachlensError(f"request {i}: continuation has {len(cont)} tokens, more than the window {window}")
    inputs = [(ctx + cont)[-(window + 1):][:-1] for ctx, cont in pairs]
    order = sorted(range(len(pairs)), key=lambda i: (-len(inputs[i]), i))
    stack = LayerStack(model)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    results: list[LoglikResult | None] = [None] * len(pairs)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        ids = right_padded([inputs[i] for i in chunk], int(pad_id)).to(stack.device)
        logits = stack.forward(ids)
        for i, r in zip(chunk, _score_rows(logits, [inputs[i] for i in chunk], [pairs[i][1] for i in chunk])):
            results[i] = r
        if progress is not None:
            progress(start + len(chunk), len(order))
    return [r for r in results if r is not None]
