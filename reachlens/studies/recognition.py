"""Recognition vs generation: does the model rank the right option first, and does it also emit it?

**Recognition** scores each option of a multiple-choice question by its log-likelihood as a
continuation of the question's prompt, exactly as lm-evaluation-harness (0.4.x) does, so that the
numbers are comparable with its ``acc`` and ``acc_norm``: context = the rendered prompt,
continuation = ``" " + option text`` (``target_delimiter=" "``), scored by
:func:`reachlens.engine.scoring.loglikelihoods` (lm-eval's tokenization, truncation and float32
sums; hooks the caller attached are live); ``acc`` = argmax of the sums is gold, ``acc_norm`` =
argmax of the sums divided by ``len(option text)`` in characters; ties go to the first option.

**Generation** decodes each question greedily with :func:`reachlens.engine.generate` in the task's
generation format and grades it with the task's grader.

A **failure set** is then chosen by a rule fixed before any intervention (:class:`FailureRule`):
recognition right and generation graded wrong, at least ``min_failures`` of them; the **healthy
panel** is the questions right both ways. :class:`EvalSets` stores both with the rule, the
configuration, the task spec and the model identity, so that every later run uses the same
questions.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.engine import Row, SamplingParams, generate, tokenizer_of
from reachlens.engine.scoring import LoglikResult, encode_pair, loglikelihoods
from reachlens.errors import MissingFileError, ReachlensError, UnknownNameError
from reachlens.studies.auditing import _identity, grader_for
from reachlens.tasks.base import Question, Task

__all__ = [
    "EvalSets", "FailureRule", "FailureSetTooSmall", "LoglikResult", "RecognitionConfig", "RecognitionResult",
    "TaskSpec", "compare_modes", "encode_pair", "generate_and_grade", "gold_index", "loglikelihoods",
    "score_options", "select_sets",
]

OPTION_COLUMNS = ["question_id", "option", "label", "text", "loglik", "n_tokens", "is_greedy", "loglik_norm", "gold"]
QUESTION_COLUMNS = [
    "question_id", "gold", "gold_index", "rec_choice", "rec_correct", "rec_choice_norm", "rec_correct_norm",
    "rec_margin", "gen_text", "gen_answer", "gen_correct", "gen_scored", "gen_finish",
]


# --- configuration -------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecognitionConfig:
    """How recognition and generation are run; ``None`` fields are filled from the task."""

    recognition_format: str | None = None
    """Prompt format whose rendering is the recognition context (the task's ``recognition_format``)."""
    generation_format: str | None = None
    """Prompt format for greedy generation (the task's default format)."""
    max_new_tokens: int = 96
    """Decode length of the greedy generation."""
    stop: tuple[str, ...] | None = None
    """Stop strings of the generation (the task's)."""
    grader: str | None = None
    """Grader of the generation (the task's)."""
    batch_size: int = 32
    """Rows per recognition forward."""
    max_batch_rows: int = 256
    """Most rows decoded together in generation."""

    def __post_init__(self) -> None:
        if isinstance(self.stop, list):
            object.__setattr__(self, "stop", tuple(self.stop))
        if self.max_new_tokens < 1 or self.batch_size < 1 or self.max_batch_rows < 1:
            raise ReachlensError(f"max_new_tokens, batch_size and max_batch_rows must be >= 1 in {self!r}")

    def resolved(self, task: Task) -> RecognitionConfig:
        rec = self.recognition_format or task.metadata.get("recognition_format")
        if rec is None:
            raise ReachlensError(f"task {task.name!r} names no recognition format; pass recognition_format "
                             f"(one of {sorted(task.prompt_formats)})")
        gen = self.generation_format or task.default_format
        task.format(rec), task.format(gen)  # LookupError naming the known formats
        return dataclasses.replace(
            self, recognition_format=rec, generation_format=gen,
            stop=tuple(task.stop) if self.stop is None else self.stop,
            grader=task.grader if self.grader is None else self.grader,
        )

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["stop"] = None if self.stop is None else list(self.stop)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RecognitionConfig:
        d = dict(d)
        if d.get("stop") is not None:
            d["stop"] = tuple(d["stop"])
        return cls(**d)


@dataclass(frozen=True)
class TaskSpec:
    """How to rebuild a task: the arguments of :func:`reachlens.load_task`."""

    name: str
    data: str | None = None
    split: str = "test"
    n: int | None = None
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)

    def load(self) -> Task:
        from reachlens.tasks import arith_mc as _arith_mc  # noqa: F401  (registers "arith_mc")
        from reachlens.tasks import load_task

        return load_task(self.name, self.data, split=self.split, n=self.n, seed=self.seed, **self.options)


def gold_index(question: Question) -> int:
    """Position of the correct option: ``fields["gold_index"]``, else the gold label's position."""
    if question.choices is None:
        raise ReachlensError(f"question {question.question_id!r} has no options; recognition needs a multiple-choice task")
    if "gold_index" in question.fields:
        return int(question.fields["gold_index"])
    if question.labels is not None and question.gold.strip() in question.labels:
        return question.labels.index(question.gold.strip())
    if question.gold in question.choices:
        return question.choices.index(question.gold)
    raise ReachlensError(f"question {question.question_id!r}: gold {question.gold!r} is neither a label nor an option")


# --- recognition and generation ------------------------------------------------------------------
def score_options(model, task: Task, config: RecognitionConfig | None = None) -> pd.DataFrame:
    """One row per (question, option): summed and length-normalized log-likelihood (``OPTION_COLUMNS``)."""
    config = (config or RecognitionConfig()).resolved(task)
    fmt = task.format(config.recognition_format)
    requests, rows = [], []
    for q in task.questions:
        g = gold_index(q)
        context = fmt.render(q)
        labels = q.labels or tuple(str(i) for i in range(len(q.choices)))
        for j, text in enumerate(q.choices):
            requests.append((context, " " + text))
            rows.append({"question_id": q.question_id, "option": j, "label": labels[j], "text": text, "gold": j == g})
    scores = loglikelihoods(model, requests, batch_size=config.batch_size)
    for row, s in zip(rows, scores):
        row.update(loglik=s.logprob, n_tokens=s.n_tokens, is_greedy=s.is_greedy,
                   loglik_norm=s.logprob / max(len(row["text"]), 1))
    return pd.DataFrame(rows, columns=OPTION_COLUMNS)


def generate_and_grade(
    model, task: Task, config: RecognitionConfig, question_ids: Sequence[str] | None = None
) -> pd.DataFrame:
    """Greedy generation of the chosen questions, graded: ``question_id, gen_text, gen_answer,
    gen_correct, gen_scored, gen_finish``. Hooks the caller attached are live on every step."""
    config = config.resolved(task)
    by_id = {q.question_id: q for q in task.questions}
    ids = list(by_id) if question_ids is None else list(question_ids)
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise UnknownNameError(f"question ids {missing[:5]!r} are not in task {task.name!r} ({len(missing)} missing)")
    questions = [by_id[i] for i in ids]
    fmt = task.format(config.generation_format)
    params = SamplingParams(max_new_tokens=config.max_new_tokens, stop=tuple(config.stop or ()))
    outs = generate(model, [fmt.render(q) for q in questions], [Row(i) for i in range(len(questions))], params,
                    max_batch_rows=config.max_batch_rows)
    rows = []
    for q, out in zip(questions, outs):
        labels = "".join(q.labels) if q.labels is not None else None
        g = grader_for(str(config.grader), labels).grade(out.text, q.gold)
        rows.append({"question_id": q.question_id, "gen_text": out.text, "gen_answer": g.answer,
                     "gen_correct": bool(g.correct and g.scored), "gen_scored": bool(g.scored),
                     "gen_finish": out.finish_reason})
    return pd.DataFrame(rows, columns=["question_id", "gen_text", "gen_answer", "gen_correct", "gen_scored", "gen_finish"])


def _first_argmax(values: Sequence[float]) -> int:
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


@dataclass(frozen=True)
class RecognitionResult:
    """Option scores and the per-question recognition-vs-generation table of one model on one task."""

    config: RecognitionConfig
    model: dict[str, str]
    options: pd.DataFrame = field(repr=False)
    questions: pd.DataFrame = field(repr=False)

    @property
    def records(self) -> pd.DataFrame:
        """The long form: one row per question and mode (``recognition``, ``generation``)."""
        q = self.questions
        rec = pd.DataFrame({"question_id": q["question_id"], "mode": "recognition", "output": q["rec_choice"].astype(str),
                            "answer": q["rec_choice"].astype(str), "correct": q["rec_correct"], "scored": True})
        gen = pd.DataFrame({"question_id": q["question_id"], "mode": "generation", "output": q["gen_text"],
                            "answer": q["gen_answer"], "correct": q["gen_correct"], "scored": q["gen_scored"]})
        return pd.concat([rec, gen], ignore_index=True)

    def summary(self) -> dict[str, Any]:
        q = self.questions
        scored = q[q["gen_scored"]]
        return {
            "n": len(q), "acc": float(q["rec_correct"].mean()), "acc_norm": float(q["rec_correct_norm"].mean()),
            "generation_acc": float(scored["gen_correct"].mean()) if len(scored) else float("nan"),
            "rec_right_gen_wrong": int((q["rec_correct"] & q["gen_scored"] & ~q["gen_correct"]).sum()),
            "rec_wrong_gen_right": int((~q["rec_correct"] & q["gen_correct"]).sum()),
            "both_right": int((q["rec_correct"] & q["gen_correct"]).sum()),
            "model": self.model.get("spec"), "config": self.config.to_dict(),
        }


def compare_modes(model, task: Task, config: RecognitionConfig | None = None) -> RecognitionResult:
    """Recognition (option likelihoods) and greedy generation of every question of ``task``.

    >>> result = compare_modes(load_model("zoo:base"), load_task("arith_mc", n=100))  # doctest: +SKIP
    >>> result.summary()["rec_right_gen_wrong"]  # doctest: +SKIP
    """
    config = (config or RecognitionConfig()).resolved(task)
    options = score_options(model, task, config)
    by_question = {qid: df for qid, df in options.groupby("question_id", sort=False)}
    rows = []
    for q in task.questions:
        opts = by_question[q.question_id].sort_values("option")
        sums, norms = opts["loglik"].tolist(), opts["loglik_norm"].tolist()
        g = gold_index(q)
        choice, choice_norm = _first_argmax(sums), _first_argmax(norms)
        others = [s for j, s in enumerate(sums) if j != g]
        labels = q.labels or tuple(str(i) for i in range(len(q.choices)))
        rows.append({"question_id": q.question_id, "gold": q.gold, "gold_index": g,
                     "rec_choice": labels[choice], "rec_correct": choice == g,
                     "rec_choice_norm": labels[choice_norm], "rec_correct_norm": choice_norm == g,
                     "rec_margin": sums[g] - max(others) if others else float("nan")})
    rec = pd.DataFrame(rows)
    gen = generate_and_grade(model, task, config)
    questions = rec.merge(gen, on="question_id", how="left")[QUESTION_COLUMNS]
    return RecognitionResult(config, _identity(model), options, questions)


# --- failure set and healthy panel ---------------------------------------------------------------
class FailureSetTooSmall(ReachlensError):
    """Fewer questions meet the failure rule than its ``min_failures``."""


@dataclass(frozen=True)
class FailureRule:
    """The rule that picks the failure set and the healthy panel, fixed before any intervention."""

    metric: str = "acc"
    """Which recognition is "right": ``acc`` (summed log-likelihood) or ``acc_norm`` (per character)."""
    min_failures: int = 8
    """Refuse (``FailureSetTooSmall``) when fewer questions are recognized but generated wrong."""
    max_failures: int | None = None
    """Keep at most this many failures, the first in task order (None: all)."""
    max_healthy: int | None = None
    """Keep at most this many healthy questions, the first in task order (None: all)."""

    def __post_init__(self) -> None:
        if self.metric not in ("acc", "acc_norm"):
            raise ReachlensError(f"metric={self.metric!r} must be 'acc' or 'acc_norm'")
        if self.min_failures < 1:
            raise ReachlensError(f"min_failures={self.min_failures!r} must be at least 1")
        for name in ("max_failures", "max_healthy"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ReachlensError(f"{name}={v!r} must be at least 1 (or None for all)")

    def describe(self) -> str:
        return (f"failure: recognition ({self.metric}) right and greedy generation graded wrong (unscored "
                f"generations excluded), at least {self.min_failures}, first {self.max_failures or 'all'} in task "
                f"order; healthy: right both ways, first {self.max_healthy or 'all'} in task order")


@dataclass(frozen=True)
class EvalSets:
    """The failure set and the healthy panel, with everything needed to reuse them."""

    failure: tuple[str, ...]
    healthy: tuple[str, ...]
    rule: FailureRule
    config: RecognitionConfig
    """The resolved recognition/generation configuration the sets were chosen under."""
    model: dict[str, str]
    """Identity of the model the sets were chosen on (spec, fingerprint)."""
    task: TaskSpec | None = None
    """How to rebuild the task (None when the sets were made from an in-memory task)."""
    counts: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": dataclasses.asdict(self.rule), "rule_text": self.rule.describe(),
            "config": self.config.to_dict(), "model": dict(self.model),
            "task": None if self.task is None else dataclasses.asdict(self.task),
            "counts": dict(self.counts), "failure": list(self.failure), "healthy": list(self.healthy),
        }

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> EvalSets:
        path = Path(path)
        if path.is_dir():
            path = path / "sets.json"
        if not path.is_file():
            raise MissingFileError(f"sets file {str(path)!r} does not exist (write one with `reachlens recognize`)")
        from reachlens.store import read_json

        d = read_json(path, "sets file")
        missing = {"rule", "config", "model", "failure", "healthy"} - set(d)
        if missing:
            raise ReachlensError(f"{str(path)!r} is not a sets file: it lacks {sorted(missing)}")
        return cls(
            tuple(d["failure"]), tuple(d["healthy"]), FailureRule(**d["rule"]), RecognitionConfig.from_dict(d["config"]),
            d["model"], None if d.get("task") is None else TaskSpec(**d["task"]), d.get("counts", {}),
        )

    def check_model(self, model) -> None:
        """Refuse a model other than the one the sets were chosen on (its fingerprint differs)."""
        from reachlens.models.loading import same_model

        ident = _identity(model)
        mine, theirs = self.model.get("fingerprint"), ident.get("fingerprint")
        if not same_model(self.model, ident):  # (a sets file written before full hashing: its legacy hash)
            raise ReachlensError(f"these sets were chosen on {self.model.get('spec')!r} (fingerprint {mine}), not "
                                 f"{ident.get('spec')!r} (fingerprint {theirs}); choose sets on this model with "
                                 "`reachlens recognize`, or pass --allow-other-model")


def select_sets(result: RecognitionResult, rule: FailureRule | None = None, task: TaskSpec | None = None) -> EvalSets:
    """Apply ``rule`` to ``result``'s question table (in its row order, which is task order).

    Raises:
        FailureSetTooSmall: fewer than ``rule.min_failures`` questions qualify.
    """
    rule = rule or FailureRule()
    q = result.questions
    rec = q["rec_correct"] if rule.metric == "acc" else q["rec_correct_norm"]
    fail_mask = rec & q["gen_scored"] & ~q["gen_correct"]
    healthy_mask = rec & q["gen_correct"]
    failure = q.loc[fail_mask, "question_id"].tolist()
    healthy = q.loc[healthy_mask, "question_id"].tolist()
    counts = {"n_questions": len(q), "n_recognized": int(rec.sum()), "n_generated": int(q["gen_correct"].sum()),
              "n_failure_candidates": len(failure), "n_healthy_candidates": len(healthy),
              "n_unscored_generations": int((~q["gen_scored"]).sum())}
    if len(failure) < rule.min_failures:
        raise FailureSetTooSmall(
            f"only {len(failure)} of {len(q)} questions are recognized ({rule.metric}) but generated wrong; the "
            f"rule needs at least {rule.min_failures}: use more questions, lower min_failures, or study a "
            "pruned model (reachlens prune)")
    failure = failure[: rule.max_failures] if rule.max_failures else failure
    healthy = healthy[: rule.max_healthy] if rule.max_healthy else healthy
    counts.update(n_failure=len(failure), n_healthy=len(healthy))
    return EvalSets(tuple(failure), tuple(healthy), rule, result.config, result.model, task, counts)
