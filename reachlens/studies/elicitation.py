"""Training-based elicitation: does fine-tuning on a few correct demonstrations lift the model beyond what the same
fine-tune lifts a never-locked control? A run of kind ``elicitation``.

A model that withholds a skill (a password-locked or sandbagging model) gives it back after a fine-tune on a few
correct demonstrations (Greenblatt et al., arXiv 2405.19550); but the same fine-tune also lifts a model that
never withheld anything (by about 10 points in arXiv 2512.07810), so an uplift alone detects nothing. For each
``n`` of ``demos``, :func:`elicit` fine-tunes a copy of the model and a copy of the control on the *same* ``n``
demonstrations (:func:`~reachlens.studies.finetune.finetune_on_demonstrations`), audits the model, the control
and every copy under one protocol (the source's: a study of :func:`~reachlens.runner.study.run_study`, its audits through one
:func:`~reachlens.runner.run_jobs`),
and reports per ``n``:

* each side's uplift over its own source, in D (greedy) and O_K, with the paired bootstrap interval and the
  exact McNemar test of :func:`~reachlens.studies.compare.compare` (table ``uplift``);
* the model's uplift minus the control's, per question ``(tuned_m - source_m) - (tuned_c - source_c)``, its mean
  with a paired bootstrap interval over questions and a sign-flip p-value (:mod:`reachlens.stats`; table
  ``difference``);
* on a task with a trace grader (``arith*``, ``gsm8k``), both again by verified solutions (D^trace, O_K^trace:
  :mod:`~reachlens.studies.trace_reach`), and each source's lucky-guess null of O_K beside its reach.

The demonstrations are the first ``n`` of one seeded shuffle of the task's *train* split (nested: the 2 include
the 1), less any whose prompt is a test question's and any question the model, the control or another lock named in
``unseen_by`` records training on (:mod:`reachlens.studies.elicitation_split`: the elicitation split), each its
worked solution (or gold answer): table ``demonstrations``. Early stopping's held-out questions are the next ones
of the same shuffle, so they are unseen too. With ``placebo`` the same questions carry a placebo's targets instead
(:mod:`reachlens.studies.placebo`). This is **training-based reach**: a fine-tuned copy is another model, so what it reaches is
reported apart from the inference-time probes of a probe run and never pooled with them.

Layout of the run directory (every audit and checkpoint resumes where it stopped)::

    DIR/run.json, its summary, uplift.parquet, difference.parquet, demonstrations.parquet
    DIR/audits/model, DIR/audits/control                  the two sources' audits
    DIR/audits/model-n4, DIR/audits/control-n4, ...       each fine-tuned copy's audit
    DIR/checkpoints/model-n4, DIR/checkpoints/control-n4  the copies (safetensors and their card)
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import random
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig
from reachlens.models.loading import model_identity, resolve_spec
from reachlens.protocol import Protocol
from reachlens.runner.study import Child, Progress, Study, run_study
from reachlens.stats import N_BOOT, paired_bootstrap_ci, paired_permutation_p
from reachlens.store import Run, RunDir, RunRecord, register_kind, single_name
from reachlens.studies.audit_job import AuditJob
from reachlens.studies.auditing import AuditResult
from reachlens.studies.compare import compare, delta_row
from reachlens.studies.elicitation_split import unseen_pool
from reachlens.studies.finetune import FineTune, finetune_on_demonstrations
from reachlens.studies.placebo import Placebo, make_placebo
from reachlens.studies.rl_finetune import RLConfig, reinforce_on_questions
from reachlens.studies.trace_reach import traced, verified_questions
from reachlens.tasks.base import Question, Task
from reachlens.tasks.fewshot import check_train_pool, demonstration_target, train_pool

__all__ = ["DIFFERENCE_COLUMNS", "Elicitation", "UPLIFT_COLUMNS", "elicit", "select_demonstrations"]

SIDES = ("model", "control")
UPLIFT_COLUMNS = ["n_demos", "side", "checkpoint", "D_source", "D_tuned", "delta_D", "delta_D_lo", "delta_D_hi",
                  "p_realized", "O_K_source", "O_K_tuned", "delta_O_K", "delta_O_K_lo", "delta_O_K_hi", "p_reachable",
                  "O_K_null_source", "O_K_null_tuned",
                  "D_trace_source", "D_trace_tuned", "delta_D_trace", "delta_D_trace_lo", "delta_D_trace_hi",
                  "O_K_trace_source", "O_K_trace_tuned", "delta_O_K_trace", "delta_O_K_trace_lo",
                  "delta_O_K_trace_hi"]
"""Per ``n`` and side: the uplift over the source by answers, the lucky-guess nulls of both O_K, and the uplift by
verified solutions (``*_trace``, :mod:`~reachlens.studies.trace_compare`; NaN when the task has no trace grader)."""
DIFFERENCE_COLUMNS = ["n_demos", "metric", "uplift_model", "uplift_control", "difference", "difference_lo",
                      "difference_hi", "p"]
DEMO_COLUMNS = ["order", "question_id", "prompt", "target"]
LABEL = "training-based reach"


def _demos(demos: Sequence[int]) -> tuple[int, ...]:
    out = sorted({int(n) for n in demos if not isinstance(n, bool)})
    if not demos or len(out) != len(demos) or any(isinstance(n, bool) or int(n) != n or n < 1 for n in demos):
        raise ReachlensError(f"demos={list(demos)!r} must be distinct integers >= 1, e.g. (1, 2, 4, 8, 16)")
    return tuple(out)


def select_demonstrations(task: Task, pool: Task, n: int, *, seed: int = 0, held_out: int = 0) -> tuple[Question, ...]:
    """The first ``n + held_out`` of one seeded shuffle of ``pool`` (the task's train split), less any whose prompt
    is one of ``task``'s questions: the same demonstrations for the model and its control, nested in ``n``, then
    early stopping's ``held_out`` questions.

    Raises:
        ReachlensError: the pool is not the train split, or holds fewer admissible questions than asked (the
            message blames ``held_out`` where the demonstrations alone would fit).
    """
    check_train_pool(task, pool)
    shown = {task.prompt(q) for q in task.questions}
    order = list(range(len(pool.questions)))
    random.Random(int.from_bytes(hashlib.sha256(f"elicit\x1f{seed}".encode()).digest()[:8], "little")).shuffle(order)
    picked = [pool.questions[i] for i in order if pool.prompt(pool.questions[i]) not in shown][:n + held_out]
    if len(picked) < n + held_out:
        have = f"the train split of {pool.name!r} has {len(picked):,} admissible questions"
        if len(picked) >= n:
            raise ReachlensError(f"held_out={held_out:,} (--held-out) questions after {n:,} demonstrations: {have}; "
                                 f"use held_out <= {len(picked) - n:,}")
        raise ReachlensError(f"{have}, fewer than {n:,} demonstrations; lower demos")
    return tuple(picked)


def _uplift_row(n: int, side: str, source: AuditResult, tuned: AuditResult) -> dict[str, Any]:
    summary = compare(source, tuned).summary()
    row = delta_row(summary)
    return {"n_demos": n, "side": side, "checkpoint": f"checkpoints/{side}-n{n}", "D_source": row["D_base"],
            "D_tuned": row["D_trained"], **{k: row[k] for k in ("delta_D", "delta_D_lo", "delta_D_hi", "p_realized")},
            "O_K_source": row["O_K_base"], "O_K_tuned": row["O_K_trained"],
            **{k: row[k] for k in ("delta_O_K", "delta_O_K_lo", "delta_O_K_hi", "p_reachable")},
            **_verified_uplift(summary)}


def _verified_uplift(s: dict[str, Any]) -> dict[str, Any]:
    """The nulls and the verified uplift of a comparison's summary as uplift columns (NaN where it has none)."""
    out = {"O_K_null_source": s["O_K_null_base"], "O_K_null_tuned": s["O_K_null_trained"]}
    for m in ("D_trace", "O_K_trace"):
        lo, hi = s.get(f"delta_{m}_ci", [math.nan, math.nan])
        out.update({f"{m}_source": s.get(f"{m}_base", math.nan), f"{m}_tuned": s.get(f"{m}_trained", math.nan),
                    f"delta_{m}": s.get(f"delta_{m}", math.nan), f"delta_{m}_lo": lo, f"delta_{m}_hi": hi})
    return out


def _per_question(audits: dict[str, AuditResult], name: str, column: str) -> pd.Series:
    a = audits[name]
    q = verified_questions(a.questions, a.samples, a.trace) if column.endswith("_trace") else a.questions
    return q.set_index("question_id")[column].astype(float)


def _difference_rows(n: int, audits: dict[str, AuditResult], n_boot: int) -> list[dict[str, Any]]:
    rows = []
    names = (*SIDES, *_copies(n))
    verified = [("D^trace", "realized_trace"), ("O_K^trace", "reachable_trace")] \
        if all(audits[x].trace is not None for x in names) else []
    for metric, column in (("D", "realized"), ("O_K", "reachable"), *verified):
        up = {side: _per_question(audits, f"{side}-n{n}", column) - _per_question(audits, side, column)
              for side in SIDES}
        both = up["model"].index.intersection(up["control"].index)
        d = (up["model"][both] - up["control"][both]).to_numpy()
        lo, hi = paired_bootstrap_ci(d, n_boot=n_boot)
        rows.append({"n_demos": n, "metric": metric, "uplift_model": float(up["model"][both].mean()),
                     "uplift_control": float(up["control"][both].mean()), "difference": float(np.mean(d)),
                     "difference_lo": lo, "difference_hi": hi, "p": paired_permutation_p(d)})
    return rows


@register_kind
@dataclass(frozen=True)
class Elicitation(Run):
    """A training-based elicitation run: the sources' and the fine-tuned copies' audits and the demonstrations."""

    kind: ClassVar[str] = "elicitation"
    record_fields: ClassVar[dict[str, tuple[type, ...]]] = {
        "protocol": (dict,), "options.demos": (list,), "options.control": (str,), "options.finetune": (dict,)}

    audits: dict[str, AuditResult] = field(repr=False)
    """By name: ``model``, ``control`` (the sources), ``model-n4``, ``control-n4``, ... (the copies): its
    children."""
    demonstrations: pd.DataFrame = field(repr=False)
    n_boot: int = N_BOOT

    def children(self) -> dict[str, Run]:
        return dict(self.audits)

    @property
    def demos(self) -> tuple[int, ...]:
        return tuple(int(n) for n in self.record.options["demos"])

    def uplift(self) -> pd.DataFrame:
        """Per ``n`` and side, the uplift in D and O_K over the source, with intervals and McNemar p-values."""
        return self._uplift.copy()

    def difference(self) -> pd.DataFrame:
        """Per ``n`` and metric, the model's uplift minus the control's, with its paired interval and p-value."""
        return self._difference.copy()

    @property
    def finished(self) -> tuple[int, ...]:
        """The ``n`` whose four audits (both sources, both copies) are here: all of them in a complete run."""
        return tuple(n for n in self.demos if all(name in self.audits for name in (*SIDES, *_copies(n))))

    @functools.cached_property
    def _uplift(self) -> pd.DataFrame:
        rows = [_uplift_row(n, side, self.audits[side], self.audits[f"{side}-n{n}"])
                for n in self.finished for side in SIDES]
        return pd.DataFrame(rows, columns=UPLIFT_COLUMNS)

    @functools.cached_property
    def _difference(self) -> pd.DataFrame:
        rows = [r for n in self.finished for r in _difference_rows(n, self.audits, self.n_boot)]
        return pd.DataFrame(rows, columns=DIFFERENCE_COLUMNS)

    def tables(self) -> dict[str, pd.DataFrame]:
        return {"uplift": self.uplift(), "difference": self.difference(), "demonstrations": self.demonstrations}

    def summary(self) -> dict[str, Any]:
        diff = self.difference()
        src = {side: _source(a) for side in SIDES if (a := self.audits.get(side)) is not None}
        by_n = {str(r.n_demos): {} for r in diff.itertuples()}
        for r in diff.itertuples():
            by_n[str(r.n_demos)][r.metric] = {"uplift_model": r.uplift_model, "uplift_control": r.uplift_control,
                                              "difference": r.difference, "ci": [r.difference_lo, r.difference_hi],
                                              "p": r.p}
        return {"label": LABEL, "model": self.record.model["model"].get("spec"),
                "control": self.record.options["control"], "n": _n(self.audits),
                "k": self.record.protocol.k,
                "demos": list(self.demos), "source": src, "by_n": by_n, "bootstrap_resamples": self.n_boot,
                "ci_level": 0.95}

    @classmethod
    def read(cls, run: RunDir) -> Elicitation:
        """The run as far as it got: its audits (its children once complete, else the finished ones in
        ``audits/``) and its demonstrations."""
        record = run.record()
        names = [*SIDES, *(name for n in record.options["demos"] for name in _copies(n))]
        if record.children:
            audits = {name: traced(Run.read_child(run, name)) for name in names if name in record.children}
        else:
            folders = {name: run.path / "audits" / single_name(name, "audit folder name") for name in names}
            audits = {name: traced(AuditResult.load(f)) for name, f in folders.items() if RunDir(f).is_complete()}
        demos = run.read_table("demonstrations") if run.is_complete() else pd.DataFrame(
            columns=DEMO_COLUMNS)
        return cls(audits, demos, record=record, location=run.path)


def _source(a: AuditResult) -> dict[str, Any]:
    """A source's D and O_K, its lucky-guess null and, trace-graded, its D^trace and O_K^trace."""
    s = a.summary()
    return {"D": a.D, "O_K": a.O_K, "O_K_null": s["O_K_null"], "O_K_null_p95": s["O_K_null_p95"],
            **{key: s[key] for key in ("D_trace", "O_K_trace", "checkable_share") if key in s}}


def _copies(n: int) -> tuple[str, ...]:
    return tuple(f"{side}-n{n}" for side in SIDES)


def _n(audits: dict[str, AuditResult]) -> int | None:
    return next((a.n for a in audits.values()), None)


def _record(model: str, control: str, task: Task, protocol: Protocol, demos: tuple[int, ...], config: FineTune,
            pool: Task, unseen_by: tuple[str, ...], rl: RLConfig | None, placebo: Placebo | None) -> RunRecord:
    identity = {side: dataclasses.asdict(model_identity(spec)) for side, spec in zip(SIDES, (model, control))}
    return RunRecord.new("elicitation", protocol, identity, task.data_identity or None,
                         {"demos": list(demos), "control": control, "finetune": dataclasses.asdict(config),
                          "pool": dict(pool.data_identity), "pool_unseen_by": [model, control, *unseen_by],
                          "pool_size": len(pool.questions), "label": LABEL, "method": "sft" if rl is None else "rl",
                          **({} if rl is None else {"rl": dataclasses.asdict(rl)}),
                          **({} if placebo is None else {"placebo": placebo.record()})})


def _local(spec: str, role: str) -> None:
    if not resolve_spec(spec)[1]:
        raise ReachlensError(f"{role} {spec!r} is not a local checkpoint folder; elicitation fine-tunes a copy of a "
                             "folder (zoo:NAME or a path)")


def _copy(spec: str, task: Task, protocol: Protocol, questions: Sequence[Question], target: Path, finetune: FineTune,
          held: Task | None, rl: RLConfig | None) -> Path:
    """One trained copy: supervised on the demonstrations, or (``rl``) reinforced on their questions."""
    if rl is None:
        return finetune_on_demonstrations(spec, task, protocol, questions, target, finetune, held)
    return reinforce_on_questions(spec, task, protocol, questions, target, rl)


@dataclass(frozen=True)
class _ElicitStudy(Study):
    """An elicitation as a :class:`~reachlens.runner.study.Study`: the fine-tunes prepared under its lock, its children
    the audits of both sources and every copy (roles ``model``, ``control``, ``model-n4``, ...)."""

    specs: dict[str, str]
    """``model`` and ``control``: the sources' specs."""
    task: Task
    protocol: Protocol
    demos: tuple[int, ...]
    finetune: FineTune
    pool: Task
    picked: tuple[Question, ...]
    unseen_by: tuple[str, ...]
    rl: RLConfig | None
    placebo: Placebo | None
    out: Path
    exec_config: ExecConfig
    say: Callable[[str], None]

    def check(self) -> None:
        self._job("model", self.specs["model"]).check()  # a budget that cannot fit, refused before any fine-tune

    def root_record(self) -> RunRecord:
        return _record(self.specs["model"], self.specs["control"], self.task, self.protocol, self.demos, self.finetune,
                       self.pool, self.unseen_by, self.rl, self.placebo)

    @property
    def chosen(self) -> tuple[Question, ...]:
        return self.picked[:max(self.demos)]  # early stopping's held-out questions: the next ones of the shuffle

    def shown(self, n: int) -> tuple[Question, ...]:
        """The first ``n`` drawn questions with the targets the copies train on (a placebo's, else the gold)."""
        return self.chosen[:n] if self.placebo is None else self.placebo.demonstrations(self.chosen[:n])

    def prepare(self, root: RunDir) -> None:
        """The fine-tuned copies, under the run's lock: a failure or Ctrl-C is recorded as the run's."""
        held = self.pool.only([q.question_id for q in self.picked[max(self.demos):]]) if self.finetune.held_out \
            else None
        for stale in (self.out / "checkpoints").glob(".finetune-*"):  # a killed fine-tune's staging folder
            shutil.rmtree(stale)
        for n in self.demos:
            for side in SIDES:
                self.say(f"fine-tune {side} on {n} demonstration(s)" if self.rl is None else f"RL (GRPO) of {side} "
                         f"on {n} question(s)")
                _copy(self.specs[side], self.task, self.protocol, self.shown(n), self._checkpoint(side, n),
                      self.finetune, held, self.rl)
        kids = self.children({})
        self.say(f"audit {sum(not c.complete() for c in kids)} of {len(kids)} models")

    def _checkpoint(self, side: str, n: int) -> Path:
        return self.out / "checkpoints" / f"{side}-n{n}"

    def _job(self, name: str, spec: str) -> AuditJob:
        return AuditJob(spec, self.task, self.protocol, self.out / "audits" / name, self.exec_config)

    def children(self, done: Mapping[str, Any]) -> list[Child]:
        specs = {**self.specs, **{f"{side}-n{n}": str(self._checkpoint(side, n).resolve())
                                  for n in self.demos for side in SIDES}}
        return [Child(name, self.out / "audits" / name, f"audit {name} ({spec})", self._job(name, spec))
                for name, spec in specs.items()]

    def compose(self, done: Mapping[str, Any], seconds: Mapping[str, float]) -> Elicitation:
        table = pd.DataFrame([{"order": i, "question_id": d.question_id, "prompt": self.task.prompt(d),
                               "target": demonstration_target(d)} for i, d in enumerate(self.shown(max(self.demos)))],
                             columns=DEMO_COLUMNS)
        return Elicitation({name: traced(run) for name, run in done.items()}, table, record=RunDir(self.out).record())


def elicit(
    model: str, task: Task, protocol: Protocol, *, out: str | Path, demos: Sequence[int] = (1, 2, 4, 8, 16),
    control: str = "zoo:base", finetune: FineTune = FineTune(), pool: Task | None = None,
    exec_config: ExecConfig | None = None, executor=None, progress: Progress | None = None,
    log: Callable[[str], None] | None = None, unseen_by: Sequence[str] = (), rl: RLConfig | None = None,
    placebo: str | None = None, weak_model: str | None = None,
) -> Elicitation:
    """Fine-tune copies of ``model`` and ``control`` on the same ``n`` train demonstrations for each ``n`` of
    ``demos``, audit all of them under ``protocol``, and write the run to ``out`` (a study,
    :func:`~reachlens.runner.study.run_study`: a re-run with the same arguments finishes what is missing).

    Args:
        model: the spec of a local checkpoint (``zoo:locked``, a folder).
        control: the never-locked control's spec (``zoo:base``, a folder), fine-tuned alike.
        task: the test questions (all are audited).
        protocol: the sources' protocol (resolved against the task here).
        pool: the task's train split (default: by name), less what model, control and ``unseen_by`` trained on.
        rl: GRPO on the ``n`` questions instead of SFT (:mod:`reachlens.studies.rl_finetune`; no early stopping).
        placebo: a placebo of :data:`~reachlens.studies.placebo.PLACEBOS` instead of the gold targets, on the same
            drawn questions (``weak``: ``weak_model``'s greedy outputs); recorded, so a resume with another is refused.
        progress: ``progress(label, done, total)`` per audit as its questions finish.
        log: called with a line as each fine-tune starts.

    >>> run = elicit("zoo:locked", load_task("arith_hard", n=300), Protocol("arith_hard", k=8),
    ...              out="runs/eli", demos=(1, 4, 16))  # doctest: +SKIP
    >>> run.difference()  # doctest: +SKIP
    """
    demos = _demos(demos)
    if rl is not None and finetune.held_out:
        raise ReachlensError("early stopping (held_out) is for supervised fine-tunes; RL runs its steps (held_out=0)")
    _local(model, "model")
    _local(control, "control")
    protocol = protocol.resolved(task)
    pool = unseen_pool(pool if pool is not None else train_pool(task), [model, control, *unseen_by])
    picked = select_demonstrations(task, pool, max(demos), seed=finetune.seed, held_out=finetune.held_out)
    if rl is not None and placebo is not None:
        raise ReachlensError(f"placebo {placebo!r} changes demonstrations' targets; RL trains on rewards (method sft)")
    if placebo is not None and placebo != "weak":  # refused before any model loads: a kind or a draw it cannot make
        for n in demos:
            Placebo(placebo, finetune.seed, weak_model).demonstrations(picked[:n])
    made = make_placebo(placebo, seed=finetune.seed, weak_model=weak_model, protocol=protocol, pool=pool,
                        picked=picked[:max(demos)])
    study = _ElicitStudy({"model": model, "control": control}, task, protocol, demos, finetune, pool, picked,
                         tuple(unseen_by), rl, made, Path(out), exec_config or ExecConfig(), log or (lambda line: None))
    return run_study(study, executor, progress=progress)
