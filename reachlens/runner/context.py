"""The context checks: a decode that cannot fit the model's context window is refused before anything runs.

:func:`check_context` bounds a task's longest prompt plus the protocol's ``max_new_tokens`` by ``model.cfg.n_ctx``
(a prompt too long in characters is refused before it is tokenized); :func:`check_fits` bounds any prompts a study
builds itself (a few-shot probe's). Neither cuts a prompt: the message names the lengths and the fix.
"""

from __future__ import annotations

from collections.abc import Sequence

from reachlens.engine import encode, tokenizer_of
from reachlens.errors import ReachlensError
from reachlens.protocol import Protocol
from reachlens.tasks.base import Task
from reachlens.tasks.chat import render_prompts

__all__ = ["CHARS_PER_TOKEN_MARGIN", "check_context", "check_fits"]

CHARS_PER_TOKEN_MARGIN = 4
"""Slack on "a token spans at most as many characters as the tokenizer's longest vocabulary entry":
a normalizer can merge characters (NFC composes one Hangul syllable from three jamo)."""


def check_context(model, task: Task, protocol: Protocol) -> None:
    """Refuse a decode that cannot fit the model's context window (``model.cfg.n_ctx``): the longest
    prompt of ``task`` plus ``protocol.max_new_tokens``. The runner calls it before anything runs.

    A prompt longer in characters than ``n_ctx`` tokens can span is refused before anything is
    tokenized (a 20 MB question would take minutes): no token of the tokenizer spans more characters
    than its longest vocabulary entry (times :data:`CHARS_PER_TOKEN_MARGIN`)."""
    n_ctx = getattr(getattr(model, "cfg", None), "n_ctx", None)
    if not isinstance(n_ctx, int) or not len(task):
        return
    if protocol.max_new_tokens >= n_ctx:
        raise ReachlensError(
            f"max_new_tokens={protocol.max_new_tokens} does not fit the model's context of {n_ctx} tokens "
            f"(with the prompt); use max_new_tokens below {n_ctx}"
        )
    prompts = render_prompts(task, protocol, task.questions, getattr(model, "tokenizer", None))
    _check_characters(model, task, prompts, n_ctx)
    check_fits(model, prompts, protocol.max_new_tokens, "the longest prompt",
               lambda room: f"use max_new_tokens <= {room}" if room else
               "it fills the context alone: shorten that question (or the system prompt, or use a shorter prompt "
               "format), or use a model with a longer context")


def check_fits(model, prompts: Sequence[str], max_new_tokens: int, what: str, fix) -> None:
    """Refuse ``prompts`` whose longest, plus ``max_new_tokens``, exceeds the model's context (``model.cfg.n_ctx``;
    nothing checked when it has none): ``what`` names the prompt in the message, ``fix(room)`` says how to fit
    (``room``: the tokens the longest prompt leaves, at least 0)."""
    n_ctx = getattr(getattr(model, "cfg", None), "n_ctx", None)
    if not isinstance(n_ctx, int) or not prompts:
        return
    longest = max(len(ids) for ids in encode(model, prompts))
    if longest + max_new_tokens > n_ctx:
        raise ReachlensError(f"{what} ({longest} tokens) plus max_new_tokens={max_new_tokens} exceeds the model's "
                             f"context of {n_ctx} tokens; {fix(max(n_ctx - longest, 0))}")


def _check_characters(model, task: Task, prompts: Sequence[str], n_ctx: int) -> None:
    """Refuse, untokenized, a prompt with more characters than ``n_ctx`` tokens of the model's
    tokenizer can span (see :func:`check_context`)."""
    i = max(range(len(prompts)), key=lambda j: len(prompts[j]))
    if len(prompts[i]) <= n_ctx:  # within the bound of any tokenizer (a token spans >= 1 character)
        return
    try:
        span = max(map(len, tokenizer_of(model).get_vocab()))
    except (AttributeError, TypeError, ValueError, ReachlensError):  # no vocabulary to bound by
        return
    bound = n_ctx * span * CHARS_PER_TOKEN_MARGIN
    if len(prompts[i]) > bound:
        raise ReachlensError(
            f"question {task.questions[i].question_id!r} makes a prompt of {len(prompts[i]):,} characters, more "
            f"than the model's {n_ctx}-token context can hold: a token of its tokenizer spans at most {span} "
            f"characters (its longest vocabulary entry), so the context holds at most {bound:,} ({n_ctx} x {span} "
            f"x {CHARS_PER_TOKEN_MARGIN}, the last for normalization). Shorten or drop that question"
        )
