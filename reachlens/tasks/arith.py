"""``arith``: synthetic multi-step integer arithmetic, generated deterministically from a seed.

One module (about 440 lines) because the generator, its difficulty tiers and its prompt formats are one task.

A question is a chain of integer operations evaluated strictly left to right; its worked solution
follows GSM8K's convention, one step ``a op b=c`` per operation and the answer after ``####``::

    prompt:    "Q: 94+2-39-48=?\\nA:"
    solution:  " 94+2=96;96-39=57;57-48=9 #### 9"

A completion is the solution and ends at ``"\\n"`` (or EOS). A negative running value is written
with a leading ``-`` (``5-9=-4;-4+3=-1``). Multiplication appears only as the *first* operation
and only by a single digit (``7*3+5=?``), so strict left-to-right evaluation and the usual
precedence of ``*`` give the same answer: no reader can evaluate a prompt two ways.

Difficulty tiers (:data:`DEFAULT_TIERS`, mixed in equal thirds by default) give the spread a
realized-vs-reachable audit needs: ``easy`` (2 ops of +/-, operands 1-99) is what a tiny model
saturates at O_64 ~ 98%; ``medium`` has 3 ops; ``hard`` has 4-5 ops and, half the time, a leading
``*`` by a digit 2-9, so running values reach three and four digits and every extra step is one
more chance to slip. Each question records its tier in ``fields["difficulty"]``.

Every character of every prompt and solution is in :data:`ARITH_ALPHABET` (22 symbols), so a
character tokenizer over it plus a few special tokens covers the task with no ``<unk>``.

Determinism: every draw comes from a ``random.Random`` seeded with a string such as
``"arith/0/test"`` (CPython hashes string seeds with SHA-512; nothing uses the salted ``hash()``
or the global RNG). The test split is drawn first and does not depend on ``n_train``; the train
split rejects every test expression and every duplicate.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reachlens.errors import ReachlensError
from reachlens.tasks.base import PromptFormat, Question, Task
from reachlens.tasks.password import PASSWORD_FORMAT_NAME, password_format
from reachlens.tasks.registry import register_task

__all__ = [
    "ARITH_ALPHABET", "DEFAULT_TIERS", "HARD_TIERS", "PROMPT_FORMATS", "SMALL_FORMATS", "SMALL_TIERS", "STOP",
    "ArithConfig", "Problem", "Slip", "Step", "Tier", "arith_splits", "clean_texts", "draw_slip", "expr_of",
    "format_prompt", "format_solution", "generate_problem", "load_arith", "load_arith_hard", "load_arith_small",
    "make_slipped_solution", "pretraining_texts", "solve",
]

ARITH_ALPHABET = "\n #*+-0123456789:;=?AQ"
"""Every character that can appear in an arith prompt (any format) or solution, sorted."""

STOP = ("\n",)
"""A completion ends at the first newline (or EOS)."""

PROMPT_FORMATS = {
    "qa": PromptFormat("qa", "Q: {expr}=?\nA:", "the training format"),
    # A prompt-format control that stays inside ARITH_ALPHABET: English instructions ("Compute
    # step by step") would be <unk> or untrained embeddings to a character model trained on "qa".
    "verbose": PromptFormat("verbose", "Q: {expr_spaced} = ?\nA:", "spaces around every symbol"),
}
PROMPT_FORMATS[PASSWORD_FORMAT_NAME] = password_format(PROMPT_FORMATS["qa"])  # zoo:locked's key (tasks/password.py)

Problem = tuple[int | str, ...]
"""Expression tokens, operands and operators alternating: ``(94, "+", 2, "-", 39)``."""
Step = tuple[int, str, int, int]
"""One solution step ``(a, op, b, c)``: the running value ``a``, operator, operand, result."""


@dataclass(frozen=True)
class Tier:
    """One difficulty tier: how many operations, how large the operands, how often a ``*``."""

    name: str  # recorded as Question.fields["difficulty"]
    min_ops: int  # fewest operations in an expression (2 ops = 3 operands = 2 solution steps)
    max_ops: int  # most operations; the count is drawn uniformly in [min_ops, max_ops]
    operand_max: int = 99  # operands of + and - are drawn uniformly from 1..operand_max
    mul_prob: float = 0.0  # probability that the first operation is "*" by a digit 2..9

    def __post_init__(self) -> None:
        if not self.name:
            raise ReachlensError("a tier needs a non-empty name")
        if not 1 <= self.min_ops <= self.max_ops:
            raise ReachlensError(f"tier {self.name!r}: need 1 <= min_ops <= max_ops, "
                             f"got min_ops={self.min_ops!r}, max_ops={self.max_ops!r}")
        if self.operand_max < 1:
            raise ReachlensError(f"tier {self.name!r}: operand_max={self.operand_max!r} must be >= 1")
        if not 0.0 <= self.mul_prob <= 1.0:
            raise ReachlensError(f"tier {self.name!r}: mul_prob={self.mul_prob!r} must be in [0, 1]")


DEFAULT_TIERS = (
    Tier("easy", 2, 2),
    Tier("medium", 3, 3),
    Tier("hard", 4, 5, mul_prob=0.5),
)

HARD_TIERS = (Tier("hard", 3, 6, mul_prob=0.5),)
"""The one tier of task ``arith_hard``, chosen by measurement (see :func:`load_arith_hard`)."""

SMALL_TIERS = (Tier("small", 1, 1, operand_max=20),)
"""The one tier of task ``arith_small``: one ``+`` or ``-`` of two operands in 1..20 (800 distinct expressions),
chosen for real instruct checkpoints by a pilot (see :func:`load_arith_small`)."""

SMALL_FORMATS = {
    "what": PromptFormat("what", "What is {expr_spaced}?", "a plain English question, as a user asks an assistant"),
    **PROMPT_FORMATS,
}
"""``arith_small``'s prompt formats: ``what`` (its default, for instruct models behind their chat template) and
every format of ``arith`` (``qa`` is what the zoo's character models read)."""


@dataclass(frozen=True)
class ArithConfig:
    """What to generate. The same config yields the same questions on every call and machine."""

    seed: int = 0  # seeds every draw (splits, and with the text seed, pretraining texts)
    n_train: int = 50_000  # distinct train problems (for pretraining / SFT texts)
    n_test: int = 300  # distinct test problems, none of which occurs in train
    tiers: tuple[Tier, ...] = DEFAULT_TIERS  # the difficulty tiers
    mix: tuple[float, ...] | None = None  # relative weight per tier (None: equal); counts are exact
    family: str = "arith"  # names the RNG streams and the question ids ("arith-test-00000")
    exclude_default: bool = False  # also reject every expression of the default ``arith`` splits (same seed)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tiers", tuple(self.tiers))
        if not self.tiers:
            raise ReachlensError("ArithConfig needs at least one tier")
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ReachlensError(f"tier names must be distinct, got {names!r}")
        if self.mix is not None:
            object.__setattr__(self, "mix", tuple(float(w) for w in self.mix))
            if len(self.mix) != len(self.tiers) or min(self.mix) < 0 or sum(self.mix) <= 0:
                raise ReachlensError(f"mix={self.mix!r} needs one non-negative weight per tier "
                                 f"{names!r}, with a positive sum")
        if not self.family or not self.family.replace("_", "").isalnum():
            raise ReachlensError(f"family={self.family!r} must be a non-empty name of letters, digits and '_'")
        if self.n_test < 0 or self.n_train < 0:
            raise ReachlensError(f"n_train={self.n_train!r} and n_test={self.n_test!r} must be >= 0")

    @property
    def weights(self) -> tuple[float, ...]:
        return self.mix if self.mix is not None else (1.0,) * len(self.tiers)


@dataclass(frozen=True)
class Slip:
    """A plausible error: step ``step`` (0-based) writes ``value`` instead of its true result."""

    step: int
    value: int
    kind: str = ""  # "off_by_one", "off_by_ten", "carry" (a dropped carry/borrow), "transpose"


def generate_problem(rng: random.Random, tier: Tier) -> Problem:
    """Draw one expression of ``tier``.

    >>> generate_problem(random.Random(0), DEFAULT_TIERS[0])
    (98, '+', 34, '-', 52)
    """
    n_ops = rng.randint(tier.min_ops, tier.max_ops)
    tokens: list[int | str] = [rng.randint(1, tier.operand_max)]
    for i in range(n_ops):
        if i == 0 and rng.random() < tier.mul_prob:
            tokens += ["*", rng.randint(2, 9)]
        else:
            tokens += [rng.choice("+-"), rng.randint(1, tier.operand_max)]
    return tuple(tokens)


def expr_of(problem: Problem, sep: str = "") -> str:
    """The expression as text.

    >>> expr_of((5, "-", 9, "+", 3))
    '5-9+3'
    """
    return sep.join(str(t) for t in problem)


def _steps(problem: Problem, slip: Slip | None = None) -> list[Step]:
    if len(problem) < 3 or len(problem) % 2 == 0 or any(op not in "+-*" for op in problem[1::2]):
        raise ValueError(f"malformed problem {problem!r}: want (int, op, int, ...) with op in +-*")
    n = len(problem) // 2
    if slip is not None and not 0 <= slip.step < n:
        raise ValueError(f"slip step {slip.step!r} is out of range for a {n}-step problem")
    steps: list[Step] = []
    value = int(problem[0])
    for op, b in zip(problem[1::2], problem[2::2]):
        a, b = value, int(b)
        value = a + b if op == "+" else a - b if op == "-" else a * b
        if slip is not None and slip.step == len(steps):
            value = slip.value
        steps.append((a, str(op), b, value))
    return steps


def solve(problem: Problem) -> tuple[list[Step], int]:
    """The left-to-right steps and the answer.

    >>> solve((5, "-", 9, "+", 3))
    ([(5, '-', 9, -4), (-4, '+', 3, -1)], -1)
    """
    steps = _steps(problem)
    return steps, steps[-1][3]


def format_prompt(problem: Problem, style: str = "qa") -> str:
    """The prompt in format ``style`` (``"qa"`` or ``"verbose"``).

    >>> format_prompt((94, "+", 2, "-", 39, "-", 48))
    'Q: 94+2-39-48=?\\nA:'
    """
    if style not in PROMPT_FORMATS:
        raise ReachlensError(f"unknown arith prompt style {style!r}; known: {sorted(PROMPT_FORMATS)}")
    return PROMPT_FORMATS[style].template.format(expr=expr_of(problem), expr_spaced=expr_of(problem, " "))


def format_solution(problem: Problem, slip: Slip | None = None) -> str:
    """The worked solution (the completion), with ``slip`` carried forward when given.

    >>> format_solution((94, "+", 2, "-", 39, "-", 48))
    ' 94+2=96;96-39=57;57-48=9 #### 9'
    >>> format_solution((94, "+", 2, "-", 39, "-", 48), Slip(0, 86))
    ' 94+2=86;86-39=47;47-48=-1 #### -1'
    """
    steps = _steps(problem, slip)
    return " " + ";".join(f"{a}{op}{b}={c}" for a, op, b, c in steps) + f" #### {steps[-1][3]}"


def _digits(x: int) -> list[int]:
    return [int(ch) for ch in reversed(str(x))]


def _carry_places(x: int, y: int, subtract: bool) -> list[int]:
    """Place values ``10**(j+1)`` of the columns ``j`` that carry (x + y) or borrow (x - y, x >= y)."""
    ys, places, carry = _digits(y), [], 0
    for j, xj in enumerate(_digits(x)):
        yj = ys[j] if j < len(ys) else 0
        col = xj - yj - carry if subtract else xj + yj + carry
        carry = int(col < 0) if subtract else int(col >= 10)
        if carry:
            places.append(10 ** (j + 1))
    return places


def _carry_errors(a: int, op: str, b: int, c: int) -> list[int]:
    """Results of the column method with one carry (or borrow) forgotten."""
    sign = -1 if c < 0 else 1
    if op == "*":
        if abs(b) > 9:
            return []
        out, carry = [], 0
        for j, xj in enumerate(_digits(abs(a))):
            carry = (xj * abs(b) + carry) // 10
            if carry:
                out.append(c - sign * carry * 10 ** (j + 1))
        return out
    t = b if op == "+" else -b
    x, y = sorted((abs(a), abs(t)), reverse=True)
    if (a >= 0) == (t >= 0):  # magnitudes add: a dropped carry makes the result smaller
        return [c - sign * p for p in _carry_places(x, y, subtract=False)]
    return [c + sign * p for p in _carry_places(x, y, subtract=True)]  # a forgotten borrow: larger


def _transpositions(c: int) -> list[int]:
    """``c`` with two adjacent, different digits swapped (never creating a leading zero)."""
    s, out = str(abs(c)), []
    for i in range(len(s) - 1):
        if s[i] != s[i + 1] and not (i == 0 and s[1] == "0"):
            out.append((-1 if c < 0 else 1) * int(s[:i] + s[i + 1] + s[i] + s[i + 2:]))
    return out


def draw_slip(problem: Problem, rng: random.Random) -> Slip:
    """One plausible slip in a uniformly chosen step; its value always differs from the truth.

    >>> draw_slip((94, "+", 2, "-", 39, "-", 48), random.Random(1))
    Slip(step=0, value=69, kind='transpose')
    """
    steps = _steps(problem)
    k = rng.randrange(len(steps))
    a, op, b, c = steps[k]
    errors = {"off_by_one": [c - 1, c + 1], "off_by_ten": [c - 10, c + 10],
              "carry": _carry_errors(a, op, b, c), "transpose": _transpositions(c)}
    kind = rng.choice([name for name, values in errors.items() if values])
    return Slip(k, rng.choice(errors[kind]), kind)


def make_slipped_solution(problem: Problem, rng: random.Random, slip_rate: float) -> tuple[str, Slip | None]:
    """A solution that, with probability ``slip_rate``, carries one plausible slip forward.

    The slipped value feeds every later step, so the wrong final answer is self-consistent.

    >>> make_slipped_solution((94, "+", 2, "-", 39, "-", 48), random.Random(0), 0.0)
    (' 94+2=96;96-39=57;57-48=9 #### 9', None)
    """
    if not 0.0 <= slip_rate <= 1.0:
        raise ReachlensError(f"slip_rate={slip_rate!r} must be in [0, 1]")
    slip = draw_slip(problem, rng) if rng.random() < slip_rate else None
    return format_solution(problem, slip), slip


def _tier_counts(n: int, weights: tuple[float, ...]) -> list[int]:
    """Exact per-tier counts summing to ``n`` (largest remainder; ties go to the earlier tier)."""
    raw = [n * w / sum(weights) for w in weights]
    counts = [int(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: (counts[i] - raw[i], i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def _draw(rng: random.Random, config: ArithConfig, n: int, taken: set[str], split: str) -> tuple:
    sequence = [t for t, k in zip(config.tiers, _tier_counts(n, config.weights)) for _ in range(k)]
    rng.shuffle(sequence)
    out = []
    for tier in sequence:
        for _ in range(1000):
            problem = generate_problem(rng, tier)
            key = expr_of(problem)
            if key not in taken:
                break
        else:
            raise ReachlensError(f"tier {tier.name!r} ran out of distinct expressions for the {split} "
                             f"split: raise its operand_max or max_ops, or lower n_{split}={n!r}")
        taken.add(key)
        out.append((problem, tier))
    return tuple(out)


@functools.lru_cache(maxsize=8)
def _problems(config: ArithConfig, split: str) -> tuple[tuple[Problem, Tier], ...]:
    """Test is drawn first (independent of ``n_train``); train rejects every test expression.

    With ``exclude_default`` both splits also reject every expression of the default ``arith`` config's
    train and test splits (the zoo base's pretraining data and the standard test set)."""
    taken = set() if split == "test" else {expr_of(p) for p, _ in _problems(config, "test")}
    if config.exclude_default:
        default = ArithConfig(seed=config.seed)
        taken |= {expr_of(p) for s in ("train", "test") for p, _ in _problems(default, s)}
    n = config.n_test if split == "test" else config.n_train
    return _draw(random.Random(f"{config.family}/{config.seed}/{split}"), config, n, taken, split)


@functools.lru_cache(maxsize=8)
def _questions(config: ArithConfig, split: str) -> tuple[Question, ...]:
    problems = _problems(config, split)
    width = max(5, len(str(len(problems) - 1)))
    out = []
    for i, (problem, tier) in enumerate(problems):
        expr, (_, answer) = expr_of(problem), solve(problem)
        fields = {"expr": expr, "expr_spaced": expr_of(problem, " "), "question": f"{expr}=?",
                  "difficulty": tier.name, "n_ops": len(problem) // 2}
        out.append(Question(f"{config.family}-{split}-{i:0{width}d}", fields, str(answer),
                            solution=format_solution(problem)))
    return tuple(out)


def arith_splits(config: ArithConfig) -> tuple[list[Question], list[Question]]:
    """The disjoint ``(train, test)`` questions of ``config``.

    >>> train, test = arith_splits(ArithConfig(n_train=20, n_test=5))
    >>> len(train), len(test), test[0].question_id
    (20, 5, 'arith-test-00000')
    """
    return list(_questions(config, "train")), list(_questions(config, "test"))


def pretraining_texts(config: ArithConfig, n: int, slip_rate: float, seed: int = 0) -> list[str]:
    """``n`` "prompt + solution" strings from the train split, a fraction ``slip_rate`` slipped.

    Train problems are visited in a fresh shuffled order each pass (repeating when ``n > n_train``).
    No EOS or newline is appended: the trainer adds its EOS token.

    >>> pretraining_texts(ArithConfig(n_train=10, n_test=2), 1, 0.0)[0].startswith("Q: ")
    True
    """
    if n < 0:
        raise ReachlensError(f"n={n!r} must be >= 0")
    train = _problems(config, "train")
    if n and not train:
        raise ReachlensError(f"config has n_train={config.n_train!r}: no train problems to draw texts from")
    rng = random.Random(f"arith/{config.seed}/texts/{seed}")
    texts: list[str] = []
    order: list[int] = []
    while len(texts) < n:
        if not order:
            order = list(range(len(train)))
            rng.shuffle(order)
        problem = train[order.pop()][0]
        texts.append(format_prompt(problem) + make_slipped_solution(problem, rng, slip_rate)[0])
    return texts


def clean_texts(config: ArithConfig, n: int, seed: int = 0) -> list[str]:
    """``n`` slip-free "prompt + solution" strings from the train split (for SFT).

    >>> " #### " in clean_texts(ArithConfig(n_train=10, n_test=2), 1)[0]
    True
    """
    return pretraining_texts(config, n, 0.0, seed)


@register_task("arith")
def load_arith(path: str | Path | None = None, split: str = "test", seed: int = 0, **options: Any) -> Task:
    """The generated ``arith`` task; ``options`` are :class:`ArithConfig` fields (``n_test``, ...).

    >>> task = load_arith(split="test", n_test=3)
    >>> task.prompt(task.questions[0]).startswith("Q: "), task.grader, task.stop
    (True, 'numeric', ('\\n',))
    """
    return _load("arith", path, split, seed, options, {}, max_new_tokens=96)


@register_task("arith_hard")
def load_arith_hard(path: str | Path | None = None, split: str = "test", seed: int = 0, **options: Any) -> Task:
    """``arith_hard``: the hard tier alone (:data:`HARD_TIERS`), with its own splits and question ids.

    Its test and train splits are drawn from their own streams (``"arith_hard/0/test"``), are disjoint
    from each other, and reject every expression of the default ``arith`` splits (the zoo base's
    pretraining data and the standard test set). ``options`` are :class:`ArithConfig` fields.

    >>> task = load_arith_hard(n_test=2)
    >>> task.name, task.questions[0].question_id, task.questions[0].fields["difficulty"]
    ('arith_hard', 'arith_hard-test-00000', 'hard')
    """
    return _load("arith_hard", path, split, seed, options,
                 {"tiers": HARD_TIERS, "family": "arith_hard", "exclude_default": True}, max_new_tokens=128)


@register_task("arith_small")
def load_arith_small(path: str | Path | None = None, split: str = "test", seed: int = 0, **options: Any) -> Task:
    """``arith_small``: one ``+`` or ``-`` of two operands in 1..20 (:data:`SMALL_TIERS`), asked in English.

    The task of the real checkpoints' studies: SmolLM2-135M-Instruct, deployed behind its chat template
    (``prompt_format="chat"``: the ``what`` question as the user turn), leaves room both ways here where it has
    almost none on ``arith`` (notes/real-checkpoints.md, the pilot). Its 800 distinct expressions give 300 test
    and 480 train questions (disjoint; no expression of ``arith``'s splits has one operation); an answer runs to
    the model's end of turn, so the task has no stop string and 96 new tokens.

    >>> task = load_arith_small(n_test=2)
    >>> task.name, task.prompt(task.questions[0]).startswith("What is "), task.stop
    ('arith_small', True, ())
    """
    return _load("arith_small", path, split, seed, {"n_train": 480, **options},
                 {"tiers": SMALL_TIERS, "family": "arith_small"}, max_new_tokens=96,
                 formats=SMALL_FORMATS, default_format="what", stop=())


def _load(name: str, path, split: str, seed: int, options: dict[str, Any], defaults: dict[str, Any], *,
          max_new_tokens: int, formats: dict[str, PromptFormat] = PROMPT_FORMATS, default_format: str = "qa",
          stop: tuple[str, ...] = STOP) -> Task:
    """A generated arith task; ``max_new_tokens`` is its decode length (a worked solution of 6
    operations with four-digit running values needs more than 96 characters)."""
    if path is not None:
        raise ReachlensError(f"task {name!r} is generated from a seed, not read from a file; "
                             f"got path {str(path)!r}: drop it (and data=)")
    if split not in ("train", "test"):
        raise ReachlensError(f"{name} has splits 'train' and 'test', not {split!r}")
    known = {f.name for f in dataclasses.fields(ArithConfig)} - {"seed", "family"}
    if set(options) - known:
        raise ReachlensError(f"unknown {name} option(s) {sorted(set(options) - known)!r}; known: {sorted(known)}")
    config = ArithConfig(seed=seed, **{**defaults, **options})
    return Task(name, _questions(config, split), formats, default_format, "numeric", stop,
                max_new_tokens=max_new_tokens,
                source=f"generated by reachlens.tasks.arith (task {name!r}, seed={seed}, split={split!r})",
                metadata={"split": split, "config": dataclasses.asdict(config), "alphabet": ARITH_ALPHABET})
