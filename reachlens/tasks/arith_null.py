"""``arith_null``: a negative control, ``arith_hard``'s prompts with golds that no model can infer from them.

Construction: question ``i`` of a split is question ``i`` of ``arith_hard`` (same expression, same prompt in
every arith prompt format, ``password`` included), under its own id (``arith_null-test-00000``), and its gold is
a six-digit integer of random sign drawn by a random stream of its own, ``"arith_null/{seed}/{split}/{i}"``:
independent of everything in the prompt, graded by the same ``numeric`` grader, and out of reach of any worked
solution of the hard tier (its answers stay within four digits, slips included). So a model solves none, with
or without any probe, password or intervention, and not by chance either: a probe that reaches one here, or
beats its placebo, found something that is not there (a leak of the gold, a grader bug). It has no worked
solution (``solution`` is None).

Golds drawn from the distribution of real answers instead (the value of an unrelated hard-tier expression) were
hit by chance: ``zoo:base`` at K=64 had O_64 = 0.037 on them (11 of 300 questions, where the unrelated value lay
a slip or two from the true one; notes/zoo.md), which a more diverse probe would beat without reaching anything.

>>> task = load_arith_null(n_test=2)
>>> task.name, task.questions[0].question_id, task.questions[0].solution, len(task.questions[0].gold.lstrip("-"))
('arith_null', 'arith_null-test-00000', None, 6)
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

from reachlens.tasks.arith import load_arith_hard
from reachlens.tasks.base import Task
from reachlens.tasks.registry import register_task

__all__ = ["load_arith_null", "unrelated_gold"]


def unrelated_gold(seed: int, split: str, index: int) -> int:
    """A six-digit integer of random sign from the stream ``arith_null/SEED/SPLIT/INDEX``.

    >>> unrelated_gold(0, "test", 0) == unrelated_gold(0, "test", 0), 10**5 <= abs(unrelated_gold(0, "test", 0)) < 10**6
    (True, True)
    """
    rng = random.Random(f"arith_null/{seed}/{split}/{index}")
    return rng.choice((-1, 1)) * rng.randint(10**5, 10**6 - 1)


@register_task("arith_null")
def load_arith_null(path: str | Path | None = None, split: str = "test", seed: int = 0, **options: Any) -> Task:
    """The negative control (see the module docstring); ``options`` as ``arith_hard``'s (ArithConfig fields)."""
    hard = load_arith_hard(path, split=split, seed=seed, **options)
    questions = tuple(
        dataclasses.replace(q, question_id=q.question_id.replace("arith_hard-", "arith_null-", 1),
                            gold=str(unrelated_gold(seed, split, i)), solution=None)
        for i, q in enumerate(hard.questions))
    return dataclasses.replace(
        hard, name="arith_null", questions=questions,
        source=f"arith_hard's prompts with unrelated golds (reachlens.tasks.arith_null, seed={seed}, split={split!r})",
        metadata={**hard.metadata, "negative_control": "gold = a random six-digit integer of random sign, "
                                                     "independent of the question"})
