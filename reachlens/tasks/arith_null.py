"""``arith_null``: a negative control, ``arith_hard``'s prompts with golds that no model can infer from them.

Construction: question ``i`` of a split is question ``i`` of ``arith_hard`` (same expression, same prompt in
every arith prompt format, ``password`` included), under its own id (``arith_null-test-00000``), and its gold is
a six-digit integer of random sign drawn by a random stream of its own, ``"arith_null/{seed}/{split}/{i}"``,
graded by the same ``numeric`` grader. It has no worked solution (``solution`` is None).

Why no probe can reach it. A probe (samples at any temperature, layer routes, activation grafts, embedding
noise, a steering grid, a password) only changes which completion the model writes for the prompt it is given;
reachability is whether one of those completions carries the gold. Here the gold is drawn independently of
everything in the prompt, so no computation on the prompt, right or wrong, leads to it: a completion hits it
only by naming one particular integer out of the 1.8 million of six digits. A model of the zoo answers with the
value of a hard-tier expression or of a slip of one (every true answer of the tier is under 2,000 in magnitude),
not a six-digit number, so it does not even guess; for any other model, a guess is worth about K / 1.8e6 per
question. D and O_K are 0 for every model and probe, and a probe that reaches one here, or beats its placebo,
found something that is not there (a leak of the gold, a grader bug).

Why six digits and not golds from the distribution of real answers (the value of an unrelated hard-tier
expression): the tier's answers crowd into a few hundred values, so such a gold lies a slip or two from some
question's own answer by chance, a model's samples would hit a few, and a more diverse probe would beat its
placebo there without reaching anything.

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
