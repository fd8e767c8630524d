"""Recognition vs generation: does the model rank the right option first, and does it also emit it?

**Recognition** scores each option of a multiple-choice question by its log-likelihood as a
continuation of the question's prompt, exactly as lm-evaluation-harness (0.4.x) does, so that the
numbers are comparable with its ``acc`` and ``acc_norm``: context = the rendered prompt,
continuation = ``" " + option text`` (``target_delimiter=" "``), scored by
:func:`reachlens.engine.scoring.loglikelihoods` (lm-eval's tokenization, truncation and float32
sums; hooks the caller attached are live); ``acc`` = argmax of the sums is gold, ``acc_norm`` =
argmax of the sums divided by ``len(option text)`` in characters; ties go to the first option.

**Under a chat format** (``prompt_format="chat"``, lm-eval's ``--apply_chat_template [--system_instruction]``)
the context is the recognition format's text as the user turn of the model's chat template, after the
protocol's system turn, with the generation prompt (``add_generation_prompt=True``), and the delimiter is
``""``: the continuation is the option text alone. lm-eval then moves the context's trailing whitespace (the
newline the template ends its generation prompt with) into the continuation, so the template's newline is
scored as each option's first token(s): reachlens matches that quirk, so its log-likelihoods are lm-eval's
(they include the same newline term for every option; the pick is unchanged by it).

**Generation** decodes each question greedily in the task's generation format and grades it with the task's
grader: the deployment, by the one path every study decodes and grades it (:func:`reachlens.runner.deploy_and_grade`).

A **failure set** is then chosen by a rule fixed before any intervention (:class:`FailureRule`):
recognition right and generation graded wrong, at least ``min_failures`` of them; the **healthy
panel** is the questions right both ways. :class:`EvalSets` stores both with the rule, the
configuration, the task spec and the model identity, so that every later run uses the same
questions. A recognition run (:class:`RecognitionResult`, kind ``recognition``) saves its tables and, when the
rule picked them, the sets (``sets.json``).

One module (about 440 lines): recognition, generation, the failure rule and its sets are one study, and the
sets are only ever chosen from a recognition run's table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from reachlens.engine.scoring import LoglikResult, encode_pair, loglikelihoods, scoring_window
from reachlens.errors import MissingFileError, ReachlensError
from reachlens.execution import ExecConfig, model_exec
from reachlens.models import identity_of
from reachlens.protocol import CHAT, Protocol, chat_inner
from reachlens.records import OPTION_COLUMNS, RECOGNITION_COLUMNS
from reachlens.runner import deploy_and_grade
from reachlens.store import Run, RunDir, RunRecord, read_json, register_kind, run_differences, write_json
from reachlens.tasks.base import Question, Task
from reachlens.tasks.chat import bind_chat, render_prompts

__all__ = [
    "EvalSets", "FailureRule", "FailureSetTooSmall", "LoglikResult", "RecognitionConfig", "RecognitionResult",
    "TaskSpec", "compare_modes", "encode_pair", "generate_and_grade", "generation_protocol", "gold_index",
    "loglikelihoods", "recognition_contexts", "score_options", "select_sets",
]



# --- configuration -------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecognitionConfig:
    """Recognition's own options, beside the :class:`~reachlens.protocol.Protocol` of the greedy
    generation (its decode length, prompt format, stop strings and grader)."""

    recognition_format: str | None = None
    """Prompt format whose rendering is the recognition context (None: the task's ``recognition_format``)."""
    batch_size: int = 32
    """Rows per recognition forward."""
    max_batch_rows: int = 256
    """Most rows decoded together in generation."""
    max_length: int | None = None
    """The scoring window, lm-eval's ``max_length``: the model reads ``(context + continuation)[-(max_length +
    1):][:-1]``, cut from the left (:func:`~reachlens.engine.scoring.loglikelihoods`). None: the model config's
    window (:func:`~reachlens.engine.scoring.scoring_window`), filled in by :meth:`resolved` when it meets the
    model, so a run's record always states the window it scored with."""

    def __post_init__(self) -> None:
        for name in ("batch_size", "max_batch_rows", "max_length"):
            v = getattr(self, name)
            if (v is not None or name != "max_length") and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ReachlensError(f"{name}={v!r} must be an integer >= 1" +
                                     (" (or None: the model's window)" if name == "max_length" else ""))

    def resolved(self, task: Task, model=None) -> RecognitionConfig:
        """The recognition format filled from ``task`` and, given the ``model``, the window from its config."""
        rec = self.recognition_format or task.metadata.get("recognition_format")
        if rec is None:
            raise ReachlensError(f"task {task.name!r} names no recognition format; pass recognition_format "
                                 f"(one of {sorted(task.prompt_formats)})")
        task.format(rec)  # LookupError naming the known formats
        window = self.max_length if self.max_length is not None or model is None else scoring_window(model)
        return dataclasses.replace(self, recognition_format=rec, max_length=window)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RecognitionConfig:
        """The config :meth:`to_dict` wrote (a record or sets file holds it); an unknown field is one line."""
        known = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(d, dict) or set(d) - known:
            raise ReachlensError(f"recognition options {d!r} are not a mapping of {sorted(known)}; the record was "
                                 "damaged or edited by hand")
        return cls(**d)


def generation_protocol(task: Task, protocol: Protocol | None = None) -> Protocol:
    """The protocol of recognition's generation side, resolved against ``task``: the greedy deployment
    (:meth:`Protocol.deployment`, the task's decode length unless ``protocol`` says otherwise)."""
    protocol = protocol or Protocol.deployment(task)
    if not protocol.is_greedy:
        raise ReachlensError(f"recognition's generation is the greedy deployment; pass a greedy protocol "
                             f"(Protocol.greedy(...)), not k={protocol.k}, temperature={protocol.temperature}")
    return protocol.resolved(task)


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
def recognition_contexts(task: Task, config: RecognitionConfig, protocol: Protocol | None = None,
                         tokenizer=None) -> tuple[list[str], str]:
    """Each question's recognition context and the target delimiter before every option, as lm-eval 0.4 builds
    a multiple-choice request: the recognition format's text and ``" "``; under a chat ``protocol``
    (``--apply_chat_template``) that text as the user turn of the model's chat template after the protocol's
    system turn, with the generation prompt, and ``""`` (lm-eval's delimiter under a chat template, so the
    template's trailing newline is scored as each option's first token, as lm-eval scores it)."""
    if protocol is None or chat_inner(protocol.prompt_format) is None:
        return [task.format(config.recognition_format).render(q) for q in task.questions], " "
    chat = dataclasses.replace(protocol, prompt_format=f"{CHAT}:{config.recognition_format}")
    return render_prompts(task, chat, task.questions, tokenizer), ""


def score_options(model, task: Task, config: RecognitionConfig | None = None,
                  protocol: Protocol | None = None, progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """One row per (question, option): summed and length-normalized log-likelihood (``OPTION_COLUMNS``), each
    request cut to ``config.max_length`` tokens from the left as lm-eval cuts it (the model's window when None);
    the contexts of :func:`recognition_contexts` (a chat ``protocol``: rendered by the model's chat template).
    ``progress(options scored, options in all)`` after each forward."""
    config = (config or RecognitionConfig()).resolved(task, model)
    contexts, delimiter = recognition_contexts(task, config, protocol, getattr(model, "tokenizer", None))
    requests, rows = [], []
    for q, context in zip(task.questions, contexts):
        g = gold_index(q)
        labels = q.labels or tuple(str(i) for i in range(len(q.choices)))
        for j, text in enumerate(q.choices):
            requests.append((context, delimiter + text))
            rows.append({"question_id": q.question_id, "option": j, "label": labels[j], "text": text, "gold": j == g})
    scores = loglikelihoods(model, requests, batch_size=config.batch_size, max_length=config.max_length,
                            progress=progress)
    for row, s in zip(rows, scores):
        row.update(loglik=s.logprob, n_tokens=s.n_tokens, is_greedy=s.is_greedy,
                   loglik_norm=s.logprob / max(len(row["text"]), 1))
    return pd.DataFrame(rows, columns=OPTION_COLUMNS)


def generate_and_grade(
    model, task: Task, protocol: Protocol | None = None, question_ids: Sequence[str] | None = None,
    *, max_batch_rows: int = 256,
) -> pd.DataFrame:
    """Greedy generation (the deployment) of the chosen questions, graded: ``question_id,
    deployed_text, deployed_answer, realized, deployed_scored, deployed_finish``
    (:func:`reachlens.runner.deploy_and_grade` under :func:`generation_protocol`). Hooks the caller
    attached are live on every step.

    Args:
        protocol: the greedy protocol (:func:`generation_protocol`; 96 new tokens in the task's
            default format when None).
        question_ids: which questions (all when None), in this order.
        max_batch_rows: most rows decoded together.
    """
    return deploy_and_grade(model, task, generation_protocol(task, protocol), question_ids,
                            ExecConfig(max_batch_rows=max_batch_rows))


def _first_argmax(values: Sequence[float]) -> int:
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


def compare_modes(
    model, task: Task, protocol: Protocol | None = None, config: RecognitionConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> RecognitionResult:
    """Recognition (option likelihoods) and greedy generation of every question of ``task``.

    Args:
        protocol: the greedy protocol of the generation (:func:`generation_protocol`: 96 new tokens in
            the task's default format when None).
        config: recognition's own options (the task's recognition format when None).
        progress: ``progress(options scored, options in all)`` as the recognition scores (the generation's
            decode reports its steps to :mod:`reachlens.engine.progress`).

    >>> result = compare_modes(load_model("zoo:base"), load_task("arith_mc", n=100))  # doctest: +SKIP
    >>> result.summary()["recognized_not_realized"]  # doctest: +SKIP
    """
    protocol = bind_chat(generation_protocol(task, protocol), getattr(model, "tokenizer", None))
    config = (config or RecognitionConfig()).resolved(task, model)
    options = score_options(model, task, config, protocol, progress)
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
    gen = generate_and_grade(model, task, protocol, max_batch_rows=config.max_batch_rows)
    questions = rec.merge(gen, on="question_id", how="left")[RECOGNITION_COLUMNS]
    return RecognitionResult(protocol, config, identity_of(model), options, questions, dict(task.data_identity),
                             exec=model_exec(model))


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
    protocol: Protocol
    """The greedy protocol of the generation the sets were chosen under (resolved)."""
    config: RecognitionConfig
    """The recognition options the sets were chosen under (resolved)."""
    model: dict[str, str | None]
    """Identity of the model the sets were chosen on (spec, fingerprint)."""
    task: TaskSpec | None = None
    """How to rebuild the task (None when the sets were made from an in-memory task)."""
    counts: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": dataclasses.asdict(self.rule), "rule_text": self.rule.describe(),
            "protocol": self.protocol.to_dict(), "config": self.config.to_dict(), "model": dict(self.model),
            "task": None if self.task is None else dataclasses.asdict(self.task),
            "counts": dict(self.counts), "failure": list(self.failure), "healthy": list(self.healthy),
        }

    def save(self, path: str | Path) -> Path:
        """Write the sets as JSON to ``path`` (durably; the folder is made if needed)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, self.to_dict())
        return path

    @classmethod
    def load(cls, path: str | Path) -> EvalSets:
        path = Path(path)
        path = path / "sets.json" if path.is_dir() else path.resolve()  # a run's own sets.json is never a link
        if not path.is_file():
            raise MissingFileError(f"sets file {str(path)!r} does not exist (write one with `reachlens recognize`)")
        d = read_json(path, "sets file")
        missing = {"rule", "config", "model", "failure", "healthy"} - set(d)
        if missing:
            raise ReachlensError(f"{str(path)!r} is not a sets file: it lacks {sorted(missing)}")
        if "protocol" not in d:
            raise ReachlensError(f"{str(path)!r} was written by an older reachlens (no protocol); rewrite its "
                                 "directory with `reachlens convert DIR`")
        task = None if d.get("task") is None else TaskSpec(**d["task"])
        return cls(tuple(d["failure"]), tuple(d["healthy"]), FailureRule(**d["rule"]), Protocol.from_dict(d["protocol"]),
                   RecognitionConfig.from_dict(d["config"]), d["model"], task, d.get("counts", {}))

    def check_model(self, model) -> None:
        """Refuse a model other than the one the sets were chosen on (its fingerprint differs)."""
        ident = identity_of(model)
        mine, theirs = self.model.get("fingerprint"), ident.get("fingerprint")
        diffs, _ = run_differences({"model": self.model}, None, ident, None)
        # the spec may differ (a copy of the folder elsewhere); the weights may not
        if "model.fingerprint" in diffs or (mine != theirs and "unknown" in (mine, theirs)):
            raise ReachlensError(f"these sets were chosen on {self.model.get('spec')!r} (fingerprint {mine}), not "
                                 f"{ident.get('spec')!r} (fingerprint {theirs}); choose sets on this model with "
                                 "`reachlens recognize`, or pass allow_other_model=True")


def select_sets(result: RecognitionResult, rule: FailureRule | None = None, task: TaskSpec | None = None) -> EvalSets:
    """Apply ``rule`` to ``result``'s question table (in its row order, which is task order).

    Raises:
        FailureSetTooSmall: fewer than ``rule.min_failures`` questions qualify.
    """
    rule = rule or FailureRule()
    q = result.questions
    rec = q["rec_correct"] if rule.metric == "acc" else q["rec_correct_norm"]
    fail_mask = rec & q["deployed_scored"] & ~q["realized"]
    healthy_mask = rec & q["realized"]
    failure = q.loc[fail_mask, "question_id"].tolist()
    healthy = q.loc[healthy_mask, "question_id"].tolist()
    counts = {"n_questions": len(q), "n_recognized": int(rec.sum()), "n_realized": int(q["realized"].sum()),
              "n_failure_candidates": len(failure), "n_healthy_candidates": len(healthy),
              "n_unscored_deployed": int((~q["deployed_scored"]).sum())}
    if len(failure) < rule.min_failures:
        raise FailureSetTooSmall(
            f"only {len(failure)} of {len(q)} questions are recognized ({rule.metric}) but generated wrong; the "
            f"rule needs at least {rule.min_failures}: use more questions, lower min_failures, or study a "
            "pruned model (reachlens prune)")
    failure = failure[: rule.max_failures] if rule.max_failures else failure
    healthy = healthy[: rule.max_healthy] if rule.max_healthy else healthy
    counts.update(n_failure=len(failure), n_healthy=len(healthy))
    return EvalSets(tuple(failure), tuple(healthy), rule, result.protocol, result.config, result.model, task, counts)


@register_kind
@dataclass(frozen=True)
class RecognitionResult(Run):
    """Option scores and the per-question recognition-vs-deployment table of one model on one task (a run of
    kind ``recognition``); with the failure rule applied, also its failure set and healthy panel (``sets``,
    saved as ``sets.json``)."""

    kind: ClassVar[str] = "recognition"
    record_fields: ClassVar[dict[str, tuple[type, ...]]] = {
        "protocol": (dict,), "options.config": (dict,), "options.rule": (dict, type(None)),
        "options.task": (dict, type(None))}

    protocol: Protocol
    """The greedy protocol of the generation side (resolved against the task)."""
    config: RecognitionConfig
    """Recognition's own options (resolved: the recognition format is explicit)."""
    model: dict[str, str | None]
    options: pd.DataFrame = field(repr=False)
    questions: pd.DataFrame = field(repr=False)
    data: dict[str, Any] = field(default_factory=dict)
    """The data identity of the task (empty when unknown)."""
    rule: FailureRule | None = None
    """The rule that picked :attr:`sets` (None: not applied)."""
    task: TaskSpec | None = None
    """How to rebuild the task (None when made from an in-memory task)."""
    sets: EvalSets | None = None
    """The failure set and healthy panel (None: the rule was not applied, or too few questions met it)."""
    exec: dict[str, Any] | None = None
    """The precision and device the model ran in (:func:`reachlens.execution.model_exec`)."""

    def make_record(self) -> RunRecord:
        options = {"config": self.config.to_dict(), "rule": None if self.rule is None else dataclasses.asdict(self.rule),
                   "task": None if self.task is None else dataclasses.asdict(self.task)}
        return RunRecord.new("recognition", self.protocol, self.model, self.data or None, options, exec=self.exec)

    @property
    def records(self) -> pd.DataFrame:
        """The long form: one row per question and mode (``recognition``, ``generation``)."""
        q = self.questions
        rec = pd.DataFrame({"question_id": q["question_id"], "mode": "recognition", "output": q["rec_choice"].astype(str),
                            "answer": q["rec_choice"].astype(str), "correct": q["rec_correct"], "scored": True})
        gen = pd.DataFrame({"question_id": q["question_id"], "mode": "generation", "output": q["deployed_text"],
                            "answer": q["deployed_answer"], "correct": q["realized"], "scored": q["deployed_scored"]})
        return pd.concat([rec, gen], ignore_index=True)

    def summary(self) -> dict[str, Any]:
        """Recognition accuracy (``acc``, ``acc_norm``), ``D`` (the greedy deployment's accuracy over
        graded questions), and the counts of each (recognized, realized) combination."""
        q = self.questions
        scored = q[q["deployed_scored"]]
        return {
            "n": len(q), "acc": float(q["rec_correct"].mean()), "acc_norm": float(q["rec_correct_norm"].mean()),
            "D": float(scored["realized"].mean()) if len(scored) else float("nan"),
            "recognized_not_realized": int((q["rec_correct"] & q["deployed_scored"] & ~q["realized"]).sum()),
            "realized_not_recognized": int((~q["rec_correct"] & q["realized"]).sum()),
            "recognized_and_realized": int((q["rec_correct"] & q["realized"]).sum()),
            "model": self.model.get("spec"), "protocol_hash": self.protocol.hash,
            **({"task": dataclasses.asdict(self.task)} if self.task is not None else {}),
        }

    def tables(self) -> dict[str, pd.DataFrame]:
        return {"options": self.options, "questions": self.questions, "records": self.records}

    def report_tables(self) -> dict[str, pd.DataFrame]:
        return {"Per question": self.questions}

    def write_to(self, run: RunDir) -> None:
        Run.write_to(self, run)
        if self.sets is not None:
            self.sets.save(run.path / "sets.json")

    @classmethod
    def read(cls, run: RunDir) -> RecognitionResult:
        record = run.record()
        o = record.options
        sets = EvalSets.load(run.path / "sets.json") if (run.path / "sets.json").is_file() else None
        return cls(record.protocol, RecognitionConfig.from_dict(o["config"]), record.model, run.read_table("options"),
                   run.read_table("questions"), dict(record.data or {}),
                   _from_record(FailureRule, o.get("rule"), run), _from_record(TaskSpec, o.get("task"), run), sets,
                   record.exec, record=record,
                   location=run.path)


def _from_record(cls, d: dict[str, Any] | None, run: RunDir):
    """``cls(**d)`` for a dataclass a record holds (None for None); unknown fields are one line naming them."""
    if d is None:
        return None
    unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ReachlensError(f"{str(run.header_path)!r}: the {cls.__name__} it records has unknown fields {unknown}; "
                             "it was damaged or edited by hand")
    return cls(**d)
