"""The answer-blind selectors: rules that pick one candidate of a question's pool without the gold answer.

A selector reads only answer-blind columns (the extracted answers, log-probabilities, a verification
score) to choose; the chosen candidate's grade then says whether the selection is right. Registered rules
(:data:`SELECTORS`), each with the columns it reads and its options:

* ``majority``: the plurality answer (self-consistency). Ties are averaged: the selection's correctness is
  the mean over the tied answers, which is the expected correctness under a uniform tie-break, equal to the
  average over tie-break seeds. Option ``seed`` (an int) breaks ties instead by a uniform draw that depends
  on (seed, question) only.
* ``logprob``: the candidate with the highest mean token log-probability (``mean_logprob``).
* ``deepconf``: the candidate whose lowest sliding-window mean token log-probability is highest: DeepConf's
  "lowest group confidence" (Fu et al., arXiv 2508.15260), read from ``token_logprobs`` (one list of the
  chosen tokens' log-probabilities per candidate, option ``window``, :data:`DEFAULT_WINDOW` tokens) or from
  a bank's precomputed ``lowest_window_logprob``. DeepConf's token confidence is the negative mean
  log-probability of the top-k tokens at each step; banks keep only the chosen token's, so this is the
  chosen-token version of the same statistic.
* ``self_verify``: the candidate the full model finds most likely under a fixed verification prompt
  (``verify_logprob``, from :func:`reachlens.selectors.verification_scores`).
* ``search``: the candidate with the highest search objective (``objective``: a routing search's own pick;
  answer-blind unless the search ran in oracle mode).

Only graded candidates with an extracted answer take part (an ungraded one is left out here as it is left
out of O_K). Score ties go to the earliest candidate (by ``candidate_idx``); a score that is NaN is never
chosen.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reachlens._registry import Registry
from reachlens.errors import ReachlensError

__all__ = ["DEFAULT_WINDOW", "Pool", "SELECTORS", "Selector", "lowest_window_mean"]

DEFAULT_WINDOW = 8
"""Tokens per window of ``deepconf`` when the bank holds ``token_logprobs`` and no window is given."""


@dataclass(frozen=True)
class Pool:
    """One question's candidates, in ``candidate_idx`` order, as plain lists (one per column)."""

    question_id: str
    candidate_idx: list[int]
    answer: list[Any]
    """Extracted answers (None where none was found)."""
    correct: list[bool]
    scored: list[bool]
    columns: Mapping[str, list[Any]] = field(default_factory=dict)
    """The other columns a selector reads (``mean_logprob``, ``token_logprobs``, ...)."""

    def __len__(self) -> int:
        return len(self.answer)

    def eligible(self) -> list[int]:
        """Positions of the graded candidates that have an answer: those a selector may choose."""
        return [i for i, (a, s) in enumerate(zip(self.answer, self.scored)) if s and not _missing(a)]


@dataclass(frozen=True)
class Selector:
    """A named rule: a pool (and options) -> the positions a uniform tie-break chooses among (none: nothing)."""

    name: str
    needs: tuple[tuple[str, ...], ...]
    """Alternatives of the columns it reads besides the base ones: the bank must hold one of them in full."""
    choose: Callable[..., tuple[int, ...]]
    options: tuple[str, ...] = ()
    """Keyword options ``choose`` takes."""
    answer_blind: bool = True
    """False for a rule that may read the gold answer (``search`` in oracle mode)."""


SELECTORS: Registry[Selector] = Registry("selector")


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _question_seed(seed: int, question_id: str) -> int:
    """A tie-break seed of (seed, question) alone, stable across processes (not Python's salted hash)."""
    digest = hashlib.blake2b(f"{seed}\x00{question_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _majority(pool: Pool, *, seed: object = None) -> tuple[int, ...]:
    """The first candidate of each answer tied for the most votes (or one of them, drawn by ``seed``)."""
    counts: dict[Any, int] = {}
    first: dict[Any, int] = {}
    for i in pool.eligible():
        a = pool.answer[i]
        counts[a] = counts.get(a, 0) + 1
        first.setdefault(a, i)
    if not counts:
        return ()
    top = max(counts.values())
    tied = tuple(sorted(first[a] for a in counts if counts[a] == top))
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ReachlensError(f"seed={seed!r} must be an integer (or None to average over ties)")
    if seed is None or len(tied) == 1:
        return tied
    return (tied[int(np.random.default_rng(_question_seed(seed, pool.question_id)).integers(len(tied)))],)


def _argmax(scores: Sequence[float], pool: Pool) -> tuple[int, ...]:
    best = None
    for i in pool.eligible():
        s = scores[i]
        if s is None or math.isnan(s):
            continue
        if best is None or s > scores[best]:
            best = i
    return () if best is None else (best,)


def _by_column(column: str) -> Callable[..., tuple[int, ...]]:
    def choose(pool: Pool) -> tuple[int, ...]:
        return _argmax([_float(v) for v in pool.columns[column]], pool)

    return choose


def _float(value: Any) -> float:
    return math.nan if _missing(value) else float(value)


def lowest_window_mean(logprobs: Sequence[float], window: int) -> float:
    """The lowest mean of ``window`` consecutive values (the mean of all when fewer; NaN when none).

    >>> lowest_window_mean([-0.1, -2.0, -0.1, -0.1], 2)
    -1.05
    """
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ReachlensError(f"window={window!r} must be an integer >= 1")
    n = len(logprobs)
    if n == 0:
        return math.nan
    if n <= window:
        return sum(logprobs) / n
    total = sum(logprobs[:window])
    best = total
    for i in range(window, n):
        total += logprobs[i] - logprobs[i - window]
        best = min(best, total)
    return best / window


def _deepconf(pool: Pool, *, window: object = None) -> tuple[int, ...]:
    if "token_logprobs" in pool.columns:
        w = DEFAULT_WINDOW if window is None else window
        scores = [math.nan if _missing(lp) else lowest_window_mean(list(lp), w) for lp in pool.columns["token_logprobs"]]
        return _argmax(scores, pool)
    if window is not None:
        raise ReachlensError(f"window={window!r} needs a token_logprobs column; this bank holds only "
                             "lowest_window_logprob, computed at the window it was made with: leave window out")
    return _argmax([_float(v) for v in pool.columns["lowest_window_logprob"]], pool)


for _sel in (
    Selector("majority", ((),), _majority, options=("seed",)),
    Selector("logprob", (("mean_logprob",),), _by_column("mean_logprob")),
    Selector("deepconf", (("token_logprobs",), ("lowest_window_logprob",)), _deepconf, options=("window",)),
    Selector("self_verify", (("verify_logprob",),), _by_column("verify_logprob")),
    Selector("search", (("objective",),), _by_column("objective"), answer_blind=False),
):
    SELECTORS.register(_sel.name, _sel)
