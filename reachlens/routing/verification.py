"""Self-verification: the full model's own likelihood of a candidate under a fixed verification prompt.

A :class:`VerificationPrompt` is a pair of templates over ``{prompt}``, ``{completion}`` and
``{answer}``: a *context* and a *target*. A candidate's verification score is the mean log-probability
of the target's tokens after the context, under the unmodified model (the identity route), whatever
route produced the candidate. Named prompts (:data:`VERIFICATION_PROMPTS`):

* ``rescore`` (the default): context ``{prompt}``, target ``{completion}``: how likely the full model
  finds the candidate's whole completion. It needs no words, so it works for the zoo's character
  models, whose alphabet has no letters.
* ``yes_no``: context ``{prompt}{completion}`` plus "Is the answer {answer} correct? Answer yes or
  no:", target `` yes``: the usual self-verification question, for models with a word vocabulary.

A prompt whose fixed text the tokenizer cannot encode (``<unk>``) is refused by name instead of
being scored on unknown tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from reachlens._registry import Registry
from reachlens.engine import LayerStack, tokenizer_of
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


@torch.inference_mode()
def verification_scores(
    model,
    items: Sequence[tuple[str, str, str | None]],
    prompt: str | VerificationPrompt = "rescore",
    *,
    batch_size: int = 64,
) -> list[float]:
    """The verification score of each (prompt, completion, answer) item (NaN when the target is empty).

    >>> verification_scores(model, [("Q: 1+1=?\\nA:", " 1+1=2 #### 2", "2")])  # doctest: +SKIP
    [-0.41]
    """
    vp = VERIFICATION_PROMPTS[prompt] if isinstance(prompt, str) else prompt
    tok = tokenizer_of(model)  # the tokenizer the engine encodes prompts with
    _check_vocabulary(tok, vp)
    texts = []
    for p, c, a in items:
        fields = {"prompt": p, "completion": c, "answer": "" if a is None else a}
        texts.append((vp.context.format(**fields), vp.target.format(**fields)))
    unique = sorted(set(texts))
    seqs = []
    for ctx, tgt in unique:
        ctx_ids = list(tok(ctx, add_special_tokens=True)["input_ids"])
        tgt_ids = list(tok(tgt, add_special_tokens=False)["input_ids"])
        seqs.append((ctx_ids, tgt_ids))
    scores: dict[tuple[str, str], float] = {}
    stack = LayerStack(model)
    device = stack.device
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    order = sorted(range(len(unique)), key=lambda i: len(seqs[i][0]) + len(seqs[i][1]))
    for start in range(0, len(order), batch_size):
        chunk = [i for i in order[start : start + batch_size] if seqs[i][1] and seqs[i][0]]
        for i in order[start : start + batch_size]:
            if not seqs[i][1] or not seqs[i][0]:
                scores[unique[i]] = math.nan
        if not chunk:
            continue
        width = max(len(seqs[i][0]) + len(seqs[i][1]) for i in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        for row, i in enumerate(chunk):
            full = seqs[i][0] + seqs[i][1]
            ids[row, : len(full)] = torch.tensor(full)  # right padding: causal attention never sees it
        logp = torch.log_softmax(stack.forward(ids.to(device)).float(), dim=-1)
        for row, i in enumerate(chunk):
            n_ctx, n_tgt = len(seqs[i][0]), len(seqs[i][1])
            target = ids[row, n_ctx : n_ctx + n_tgt].to(device)
            lp = logp[row, n_ctx - 1 : n_ctx + n_tgt - 1].gather(-1, target[:, None]).squeeze(-1)
            scores[unique[i]] = float(lp.mean())
    return [scores[t] for t in texts]
