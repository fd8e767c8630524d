"""Few-shot prompts: worked demonstrations from the task's train split before each test question.

A *demonstration* is a train question with its target, the text a correct completion of it is: the worked
solution where the task has one (GSM8K, MATH, arith), else the gold answer, after a space unless it starts with
whitespace (lm-eval's ``target_delimiter``). Under the task's plain formats a few-shot prompt is::

    render(demo_1) + target(demo_1) + delimiter + ... + render(demo_n) + target(demo_n) + delimiter + render(question)

with ``delimiter`` lm-eval's ``fewshot_delimiter`` (a blank line by default); under a chat format each
demonstration is an earlier user turn (its rendering) and assistant turn (its target, without the leading
space) of the model's chat template, then the question's user turn (lm-eval's ``fewshot_as_multiturn``), rendered
by :func:`~reachlens.tasks.chat.render_prompts`.

Which demonstrations: ``n`` distinct train questions drawn for each (question, candidate) from a seed of
(seed, question id, candidate index) alone (:func:`draw_demonstrations`): candidate ``j`` of a question always
gets the same ones, different candidates get different ones, and nothing depends on which other questions are
decoded. A demonstration is never the test question itself (the same prompt), and on an open-ended task never
has the test question's gold as its own answer, so no test answer is ever shown before its question (on a
multiple-choice task every label is some demonstration's answer, and only the question itself is excluded).
The pool must be the task's *train* split: :func:`fewshot_prompts` refuses a pool whose data identity says
it is another split.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reachlens.engine.tokens import Prompt
from reachlens.errors import ReachlensError
from reachlens.protocol import chat_inner
from reachlens.tasks.base import Question, Task
from reachlens.tasks.chat import render_prompts
from reachlens.tasks.registry import load_task, loader_name

if TYPE_CHECKING:
    from reachlens.protocol import Protocol

__all__ = [
    "FewShot", "check_admissible", "check_train_pool", "demonstration_format", "demonstration_target",
    "draw_demonstrations", "fewshot_prompts", "train_pool",
]


@dataclass(frozen=True)
class FewShot:
    """How many demonstrations, drawn how, joined how."""

    n: int
    """Demonstrations before each question (>= 1)."""
    seed: int = 0
    """The stream of draws (a run's seed)."""
    delimiter: str = "\n\n"
    """Between demonstrations and before the question, under a plain format (lm-eval's ``fewshot_delimiter``)."""

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ReachlensError(f"few-shot n={self.n!r} must be an integer >= 1")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ReachlensError(f"few-shot seed={self.seed!r} must be an integer")


def demonstration_target(question: Question) -> str:
    """The text a correct completion of ``question`` is: its worked solution, else its gold answer, after a space
    unless it starts with whitespace.

    >>> demonstration_target(Question("q", {"expr": "2+3"}, "5", solution=" 2+3=5 #### 5"))
    ' 2+3=5 #### 5'
    >>> demonstration_target(Question("q", {"question": "Capital of France?"}, "Paris"))
    ' Paris'
    """
    text = question.solution if question.solution else question.gold
    return text if text[:1].isspace() else " " + text


def _rng(seed: int, question_id: str, candidate: int) -> random.Random:
    digest = hashlib.sha256(f"fewshot\x1f{seed}\x1f{question_id}\x1f{candidate}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


def draw_demonstrations(
    pool: Task, question: Question, n: int, *, seed: int = 0, candidate: int = 0, format_name: str | None = None
) -> tuple[Question, ...]:
    """``n`` distinct demonstrations from ``pool`` for candidate ``candidate`` of ``question`` (see the module
    docstring for what is excluded), in the order they are shown.

    Raises:
        ReachlensError: the pool has fewer than ``n`` admissible questions.
    """
    admissible = _admissible(pool, question, format_name)
    rng = _rng(seed, question.question_id, candidate)
    left, moved = len(pool.questions), {}  # a lazy partial Fisher-Yates shuffle: each draw uniform over what is left
    out: list[Question] = []
    while left and len(out) < n:
        i = rng.randrange(left)
        left -= 1
        d = pool.questions[moved.get(i, i)]
        moved[i] = moved.get(left, left)
        if admissible(d):
            out.append(d)
    if len(out) < n:
        raise _too_few(pool, question, len(out), n)
    return tuple(out)


def _admissible(pool: Task, question: Question, format_name: str | None) -> Callable[[Question], bool]:
    """Whether a pool question may be shown before ``question``: not its own prompt, nor (open-ended) its gold."""
    shown = pool.prompt(question, format_name)
    open_ended = question.choices is None
    gold = question.gold.strip()
    return lambda d: pool.prompt(d, format_name) != shown and not (open_ended and d.gold.strip() == gold)


def _too_few(pool: Task, question: Question, found: int, n: int) -> ReachlensError:
    return ReachlensError(f"the train split of {pool.name!r} has {found} questions admissible as demonstrations "
                          f"for {question.question_id!r}, fewer than n={n}; lower n")


def check_admissible(task: Task, pool: Task, n: int, format_name: str | None = None) -> None:
    """Refuse, before any prompt is built, a question of ``task`` with fewer than ``n`` admissible demonstrations in
    ``pool`` (what :func:`draw_demonstrations` refuses mid-run): counted from the pool's prompts and golds, each
    question scanned only where those counts leave fewer than ``n`` sure."""
    if n > len(pool.questions):
        raise ReachlensError(f"few-shot n={n:,}: the train split of {pool.name!r} has {len(pool.questions):,} "
                             f"questions; lower n")
    prompts = Counter(pool.prompt(d, format_name) for d in pool.questions)
    golds = Counter(d.gold.strip() for d in pool.questions)
    for q in task.questions:
        excluded = prompts[pool.prompt(q, format_name)] + (golds[q.gold.strip()] if q.choices is None else 0)
        if len(pool.questions) - excluded < n:
            found = sum(map(_admissible(pool, q, format_name), pool.questions))
            if found < n:
                raise _too_few(pool, q, found, n)


def demonstration_format(protocol: Protocol) -> str | None:
    """The task format the demonstrations (and the question, to exclude itself) are rendered in under ``protocol``:
    its prompt format, or a chat format's inner one (None: the task's default)."""
    inner = chat_inner(protocol.prompt_format)
    return protocol.prompt_format if inner is None else (inner or None)


def check_train_pool(task: Task, pool: Task) -> None:
    """Refuse a demonstration pool that is not ``task``'s train split (by its data identity's split and its name).

    Raises:
        ReachlensError: another split, or another task.
    """
    split = pool.data_identity.get("split")
    if split is not None and split != "train":
        raise ReachlensError(f"few-shot demonstrations come from the train split; the pool given is {pool.name!r} "
                             f"split {split!r}: load it with split='train'")
    if loader_name(pool.name) != loader_name(task.name):  # a file task is named by its file: jsonl:train, jsonl:test
        raise ReachlensError(f"the demonstration pool is task {pool.name!r}, not {task.name!r}: load the same task "
                             "with split='train'")


def train_pool(task: Task, path: str | None = None) -> Task:
    """The train split of ``task``: of a generated task by its name and seed, else read from ``path`` (the task's
    train data file) with the loader options ``task`` was read with, cached per process.

    Raises:
        ReachlensError: a task read from a file, and no ``path``.
    """
    ident = task.data_identity or {}
    if path is None and "generator" not in ident:
        raise ReachlensError(f"the demonstrations come from the train split of {task.name!r}, which is read from a "
                             f"file: pass its train data (pool=load_task({task.name!r}, PATH, split='train'), or "
                             "the probe's train=PATH)")
    # a file is read with the options the task's own file was (its field mapping, template, grader, stops)
    options = json.dumps(ident.get("options", {}), sort_keys=True)
    return _load_train(loader_name(task.name), path, int(ident.get("seed", 0)) if path is None else 0, options)


@functools.lru_cache(maxsize=8)
def _load_train(name: str, path: str | None, seed: int, options: str) -> Task:
    return load_task(name, path, split="train", seed=seed, **json.loads(options))


def fewshot_prompts(
    task: Task,
    pool: Task,
    protocol: Protocol,
    questions: Sequence[Question],
    fewshot: FewShot,
    *,
    candidate: int = 0,
    tokenizer=None,
) -> list[str]:
    """The few-shot prompt of each question for candidate ``candidate``, under ``protocol.prompt_format``.

    >>> pool = load_task("arith_hard", split="train")  # doctest: +SKIP
    >>> fewshot_prompts(task, pool, protocol, task.questions[:1], FewShot(2))[0]  # doctest: +SKIP
    'Q: 7*3+5=?\\nA: 7*3=21;21+5=26 #### 26\\n\\nQ: 94+2-39=?\\nA: 94+2=96;96-39=57 #### 57\\n\\nQ: 82-95-9+55=?\\nA:'
    """
    check_train_pool(task, pool)
    inner = chat_inner(protocol.prompt_format)
    fmt_name = demonstration_format(protocol)
    demos = [draw_demonstrations(pool, q, fewshot.n, seed=fewshot.seed, candidate=candidate, format_name=fmt_name)
             for q in questions]
    if inner is not None:
        history = [[turn for d in ds for turn in ({"role": "user", "content": pool.prompt(d, fmt_name)},
                                                  {"role": "assistant", "content": demonstration_target(d).lstrip()})]
                   for ds in demos]
        return render_prompts(task, protocol, questions, tokenizer, history=history)
    plain = render_prompts(task, protocol, questions, tokenizer)
    return [Prompt(fewshot.delimiter.join([*(pool.prompt(d, fmt_name) + demonstration_target(d) for d in ds), prompt]))
            for ds, prompt in zip(demos, plain)]
