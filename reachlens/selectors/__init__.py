"""Answer-blind selectors over any candidate bank, and the selection gap.

A probe turns a question into a bank of candidates; a **selector** picks one of them without the gold
answer. O_K (some candidate is correct) is the ceiling a selector is measured against, and
``O_K - best selector`` is the selection gap. The bank's columns and the per-question rules are in
:mod:`~reachlens.selectors.bank`; the selectors themselves (``majority`` with ties averaged, ``logprob``,
``deepconf``, ``self_verify``, ``search``) in :mod:`~reachlens.selectors.rules`; the verification prompt
``self_verify`` reads in :mod:`~reachlens.selectors.verification`.

>>> from reachlens.selectors import select, selection_gap, selector_table
>>> select(result.bank, "majority")  # doctest: +SKIP
>>> selection_gap(result.bank, best_of=["majority", "logprob"]).gap  # doctest: +SKIP
"""

from reachlens.selectors.bank import (
    SELECTION_COLUMNS,
    SelectionGap,
    answer_blind,
    reachable,
    select,
    selection_gap,
    selector_table,
)
from reachlens.selectors.rules import DEFAULT_WINDOW, SELECTORS, Pool, Selector, lowest_window_mean
from reachlens.selectors.verification import VERIFICATION_PROMPTS, VerificationPrompt, verification_scores

__all__ = [
    "DEFAULT_WINDOW",
    "Pool",
    "SELECTION_COLUMNS",
    "SELECTORS",
    "SelectionGap",
    "Selector",
    "VERIFICATION_PROMPTS",
    "VerificationPrompt",
    "answer_blind",
    "lowest_window_mean",
    "reachable",
    "select",
    "selection_gap",
    "selector_table",
    "verification_scores",
]
