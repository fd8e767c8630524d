"""Self-verification: the full model's own likelihood of a candidate under a fixed verification prompt.

A :class:`VerificationPrompt` is a pair of templates over ``{prompt}``, ``{completion}`` and
``{answer}``: a *context* and a *target*. A candidate's verification score is the mean log-probability
of the target's tokens after the context, under the unmodified model (no route, graft or other probe),
whatever probe produced the candidate: the continuation's log-likelihood by lm-evaluation-harness' rules,
from the one scorer reachlens has (:func:`reachlens.engine.scoring.loglikelihoods`), divided by its token
count. The ``self_verify`` selector chooses by it (a bank's ``verify_logprob`` column). Named prompts
(:data:`VERIFICATION_PROMPTS`):

* ``rescore`` (the default): context ``{prompt}``, target ``{completion}``: how likely the full model
  finds the candidate's whole completion. It needs no words, so it works for the zoo's character
  models, whose alphabet has no letters.
* ``yes_no``: context ``{prompt}{completion}`` plus "Is the answer {answer} correct? Answer yes or
  no:", target `` yes``: the usual self-verification question, for models with a word vocabulary.

After a chat prompt (``prompt_format="chat"``) the context keeps the special tokens the chat template wrote
as those tokens (the candidate's completion and the fixed text stay text).

A prompt whose fixed text the tokenizer cannot encode (``<unk>``) is refused by name instead of
being scored on unknown tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from reachlens._registry import Registry
from reachlens.engine import tokenizer_of
from reachlens.engine.scoring import encode_pair, loglikelihoods
from reachlens.engine.tokens import ChatPrompt
from reachlens.errors import ReachlensError

__all__ = ["VerificationPrompt", "VERIFICATION_PROMPTS", "verification_scores"]


@dataclass(frozen=True)
class VerificationPrompt:
    """A fixed verification prompt; fields ``{prompt}``, ``{completion}``, ``{answer}``."""

    name: str
    context: str
    """Text the target is conditioned on."""
    target: str
    """Text whose mean token log-probability is the score."""


VERIFICATION_PROMPTS: Registry[VerificationPrompt] = Registry("verification prompt")
VERIFICATION_PROMPTS.register("rescore", VerificationPrompt("rescore", "{prompt}", "{completion}"))
VERIFICATION_PROMPTS.register("yes_no", VerificationPrompt(
    "yes_no", "{prompt}{completion}\nIs the answer {answer} correct? Answer yes or no:", " yes"))


def _check_vocabulary(tok, vp: VerificationPrompt) -> None:
    unk = getattr(tok, "unk_token_id", None)
    if unk is None:
        return
    fixed = (vp.context + vp.target).format(prompt="", completion="", answer="")
    if fixed and unk in tok(fixed, add_special_tokens=False)["input_ids"]:
        raise ReachlensError(f"verification prompt {vp.name!r} has text the tokenizer cannot encode ({fixed!r} gives "
                         f"<unk>); choose another, e.g. 'rescore'")


def _context(vp: VerificationPrompt, prompt: str, fields: dict[str, str]) -> str:
    """The verification context of one item; after a chat prompt (a :class:`ChatPrompt`) it is one too, so the
    special tokens its template wrote stay those tokens (the context must then start with the prompt)."""
    context = vp.context.format(**fields)
    if not isinstance(prompt, ChatPrompt):
        return context
    if not vp.context.startswith("{prompt}"):
        raise ReachlensError(f"verification prompt {vp.name!r} does not start with {{prompt}}, so a chat prompt's "
                             "template tokens would be read as text; use 'rescore' or 'yes_no'")
    return ChatPrompt(context, prompt.template)


def verification_scores(
    model,
    items: Sequence[tuple[str, str, str | None]],
    prompt: str | VerificationPrompt = "rescore",
    *,
    batch_size: int = 64,
) -> list[float]:
    """The verification score of each (prompt, completion, answer) item (NaN when the context or the target
    is empty, or the target has no tokens of its own).

    >>> verification_scores(model, [("Q: 1+1=?\\nA:", " 1+1=2 #### 2", "2")])  # doctest: +SKIP
    [-0.41]
    """
    vp = VERIFICATION_PROMPTS[prompt] if isinstance(prompt, str) else prompt
    tok = tokenizer_of(model)  # the tokenizer the engine encodes prompts with
    _check_vocabulary(tok, vp)
    texts = []
    for p, c, a in items:
        fields = {"prompt": p, "completion": c, "answer": "" if a is None else a}
        texts.append((_context(vp, p, fields), vp.target.format(**fields)))
    # a target with no tokens of its own has no score
    unique = sorted({t for t in texts if t[0] and t[1] and encode_pair(tok, *t)[1]})
    scores = {t: math.nan for t in texts}
    for t, r in zip(unique, loglikelihoods(model, unique, batch_size=batch_size)):
        scores[t] = r.logprob / r.n_tokens
    return [scores[t] for t in texts]
