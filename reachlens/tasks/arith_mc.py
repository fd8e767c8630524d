"""``arith_mc``: the ``arith`` questions as multiple choice, for recognition-vs-generation studies.

Each ``arith`` question gets four options: its gold worked solution and three *slipped* solutions,
each carrying one plausible slip (off by one or ten, a dropped carry, swapped digits; see
:func:`reachlens.tasks.arith.draw_slip`) forward to a wrong final answer. The three distractors have
distinct final answers, all different from the gold one. Options are shuffled and drawn from a
``random.Random`` seeded with ``"arith_mc/{seed}/{question_id}"``: the same question always gets
the same options in the same order, whatever else is loaded.

Why full worked solutions and not just ``" #### N"``. The zoo models are character-level models
trained on ``"Q: 94+2-39-48=?\\nA: 94+2=96;96-39=57;57-48=9 #### 9"``; they never saw an answer
without its working, and a 1M-parameter model cannot add four numbers in one token position.
Scoring ``" #### N"`` right after ``"A:"`` would therefore measure an out-of-distribution guess
(near chance for every model), not what the model *recognizes*. Scoring the whole chain asks the
question recognition is meant to ask: shown the correct working and three plausible wrong ones
(teacher-forced), does the model find the correct one most likely? A question it recognizes but
fails to generate is then a real recognition-vs-generation failure: it can tell the right chain
from the slipped ones, yet its own greedy chain slips.

Format: the recognition context is the ``qa`` prompt ``"Q: {expr}=?\\nA:"`` and each option is
scored as the continuation ``" " + text`` with ``text`` the solution without its leading space
(``"94+2=96;96-39=57;57-48=9 #### 9"``), exactly lm-eval-harness' ``target_delimiter=" "``
convention, and exactly the training text. Generation uses the same ``qa`` prompt and the
``numeric`` grader, as ``arith`` does; ``Question.gold`` stays the numeric answer and
``fields["gold_index"]`` gives the correct option's position. Question ids equal ``arith``'s, so
the two tasks join question by question.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

from reachlens.errors import ReachlensError
from reachlens.tasks.arith import PROMPT_FORMATS, STOP, Problem, draw_slip, format_solution, load_arith
from reachlens.tasks.base import Question, Task
from reachlens.tasks.registry import register_task

__all__ = ["LABELS", "load_arith_mc", "mc_options", "parse_expr"]

LABELS = ("A", "B", "C", "D", "E", "F")
_TOKEN = re.compile(r"\d+|[-+*]")


def parse_expr(expr: str) -> Problem:
    """The problem tuple of an arith expression string.

    >>> parse_expr("7*3+5")
    (7, '*', 3, '+', 5)
    """
    tokens = _TOKEN.findall(expr)
    if "".join(tokens) != expr or len(tokens) < 3 or len(tokens) % 2 == 0:
        raise ReachlensError(f"{expr!r} is not an arith expression (operands and +, -, * alternating)")
    return tuple(int(t) if t.isdigit() else t for t in tokens)


def _final(solution: str) -> str:
    return solution.rsplit("#### ", 1)[1]


def mc_options(expr: str, question_id: str, seed: int = 0, n_distractors: int = 3) -> tuple[tuple[str, ...], int]:
    """``(option texts, gold index)`` for one question: gold solution plus ``n_distractors`` slipped ones.

    Texts carry no leading space (the scorer adds the ``" "`` delimiter).

    >>> opts, gold = mc_options("94+2-39-48", "q0")
    >>> opts[gold]
    '94+2=96;96-39=57;57-48=9 #### 9'
    """
    if n_distractors < 1:
        raise ReachlensError(f"n_distractors={n_distractors!r} must be at least 1")
    problem = parse_expr(expr)
    gold = format_solution(problem)[1:]
    rng = random.Random(f"arith_mc/{seed}/{question_id}")
    seen_answers = {_final(gold)}
    distractors: list[str] = []
    for _ in range(1000):
        if len(distractors) == n_distractors:
            break
        text = format_solution(problem, draw_slip(problem, rng))[1:]
        if _final(text) not in seen_answers:
            seen_answers.add(_final(text))
            distractors.append(text)
    else:
        if len(distractors) < n_distractors:
            raise ValueError(f"could not draw {n_distractors} distinct slipped answers for {expr!r}")
    options = [gold, *distractors]
    rng.shuffle(options)
    return tuple(options), options.index(gold)


@register_task("arith_mc")
def load_arith_mc(
    path: str | Path | None = None, split: str = "test", seed: int = 0, *, n_distractors: int = 3, **options: Any
) -> Task:
    """``arith`` with four options per question; ``options`` are :class:`~reachlens.tasks.arith.ArithConfig`
    fields (``n_test``, ...). Grader ``numeric`` (generation); recognition format ``qa``.

    >>> task = load_arith_mc(n_test=3)
    >>> q = task.questions[0]
    >>> len(q.choices), q.labels, q.choices[q.fields["gold_index"]].endswith("#### " + q.gold)
    (4, ('A', 'B', 'C', 'D'), True)
    """
    if not 1 <= n_distractors < len(LABELS):
        raise ReachlensError(f"n_distractors={n_distractors!r} must lie in 1..{len(LABELS) - 1}")
    base = load_arith(path, split=split, seed=seed, **options)
    questions = []
    for q in base.questions:
        choices, gold_index = mc_options(q.fields["expr"], q.question_id, seed, n_distractors)
        fields = {**q.fields, "gold_index": gold_index, "gold_label": LABELS[gold_index]}
        questions.append(Question(q.question_id, fields, q.gold, choices, LABELS[: len(choices)], q.solution))
    metadata = {
        **base.metadata, "recognition_format": "qa", "n_distractors": n_distractors,
        "options": "gold worked solution + slipped worked solutions (reachlens.tasks.arith_mc)",
    }
    return Task("arith_mc", tuple(questions), PROMPT_FORMATS, "qa", "numeric", STOP, max_new_tokens=96,
                source=f"{base.source}; options by reachlens.tasks.arith_mc (seed={seed})", metadata=metadata)

