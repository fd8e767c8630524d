"""The audit: for each question, is the default deployment correct (realized) and does a K-sample
probe reach a correct answer (reachable)?

For question i with grader g_i: ``realized_i = g_i(greedy output)``, ``reachable_i = max_k g_i(c_k)``
over K samples at the protocol's temperature. D is the mean of realized, O_K the mean of reachable,
and ``gap = O_K - D`` is what the model could answer but does not emit. ``propensity`` is the share
of a question's graded samples that are correct (the per-question hit rate).

Samples the grader could not decide (``scored=False``: a math-verify timeout) are kept but excluded:
they count neither as correct nor as wrong, and pass@k uses the number of graded samples as n.

The audit asks :mod:`reachlens.engine` for every completion; it never decodes itself. Hooks the caller
attached to the model (``with model.hooks(...)``) are live throughout, so an audit of an ablated model
is this same function called inside the ablation's context.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.engine import Completion, Row, encode, row_seed
from reachlens.engine.backends import bind_backend, generate_rows, load_for
from reachlens.errors import ReachlensError
from reachlens.grading import question_grader
from reachlens.models import identity_of
from reachlens.protocol import Protocol
from reachlens.records import QUESTION_COLUMNS, SAMPLE_COLUMNS, canonical, in_task_order, update_question_table
from reachlens.store import AuditDir
from reachlens.studies.metrics import budget_grid, pass_at_k_curve
from reachlens.studies.stats import wilson_interval
from reachlens.tasks.base import Question, Task
from reachlens.tasks.chat import bind_chat, chat_inner, render_prompts

__all__ = ["AuditResult", "audit", "audit_batch", "batch_slices", "check_context", "finish_audit", "grade_questions"]

@dataclass(frozen=True)
class AuditResult:
    """Everything one audit produced. Tables keep raw text so a result can be re-scored."""

    protocol: Protocol
    model: dict[str, str]
    questions: pd.DataFrame = field(repr=False)
    samples: pd.DataFrame = field(repr=False)
    data: dict[str, Any] = field(default_factory=dict)
    """The data identity of the task audited (see :mod:`reachlens.tasks.base`); empty when unknown
    (an audit of a hand-made task, or one written before reachlens recorded it)."""

    @property
    def n(self) -> int:
        return len(self.questions)

    @property
    def k(self) -> int:
        return self.protocol.k

    @property
    def D(self) -> float:
        """Deployed accuracy: mean of realized over questions whose deployment was graded."""
        q = self.questions[self.questions["deployed_scored"]]
        return float(q["realized"].mean()) if len(q) else math.nan

    @property
    def O_K(self) -> float:
        """Reachable ceiling at budget K: mean of reachable over questions."""
        return float(self.questions["reachable"].mean()) if self.n else math.nan

    @property
    def gap(self) -> float:
        return self.O_K - self.D

    @property
    def D_ci(self) -> tuple[float, float]:
        """95 % Wilson interval of :attr:`D` (over the questions whose deployment was graded)."""
        q = self.questions[self.questions["deployed_scored"]]
        return wilson_interval(int(q["realized"].sum()), len(q))

    @property
    def O_K_ci(self) -> tuple[float, float]:
        """95 % Wilson interval of :attr:`O_K`."""
        return wilson_interval(int(self.questions["reachable"].sum()), self.n)

    @property
    def truncated_samples(self) -> float:
        """Share of the K samples that stopped at ``max_new_tokens`` (``finish_reason == "length"``)."""
        return float((self.samples["finish_reason"] == "length").mean()) if len(self.samples) else math.nan

    @property
    def truncated_deployed(self) -> float:
        """Share of the deployed (greedy) outputs that stopped at ``max_new_tokens``."""
        return float((self.questions["deployed_finish"] == "length").mean()) if self.n else math.nan

    def pass_at_k_curve(self) -> pd.DataFrame:
        """Unbiased pass@k averaged over questions, k = 1, 2, 4, ... up to K (columns ``k``, ``pass_at_k``)."""
        return pass_at_k_curve(self.questions["n_scored"], self.questions["n_correct"], budget_grid(self.k))

    def summary(self) -> dict[str, Any]:
        """D and O_K with their 95 % Wilson intervals, gap, n, k, the shares of samples and deployed outputs
        cut at ``max_new_tokens``, the protocol's hash, the model, unscored counts, data identity, pass@k."""
        curve = self.pass_at_k_curve()
        return {
            "D": self.D, "D_ci": list(self.D_ci), "O_K": self.O_K, "O_K_ci": list(self.O_K_ci), "gap": self.gap,
            "n": self.n, "k": self.k,
            "truncated_samples": self.truncated_samples, "truncated_deployed": self.truncated_deployed,
            "protocol_hash": self.protocol.hash, "model": self.model.get("spec"),
            "model_fingerprint": self.model.get("fingerprint"),
            "n_unscored_samples": int((~self.samples["scored"]).sum()) if len(self.samples) else 0,
            "n_unscored_deployed": int((~self.questions["deployed_scored"]).sum()) if self.n else 0,
            "data": dict(self.data) or None,
            "pass_at_k": {int(r.k): r.pass_at_k for r in curve.itertuples()},
        }

    def restrict_k(self, k: int) -> AuditResult:
        """This audit as if it had been run with budget ``k`` <= K: the first k samples of each question.

        Exact, because sample j depends on (seed, question, j) only: an audit at budget k would have
        drawn these very samples.
        """
        if not 1 <= k <= self.k:
            raise ReachlensError(f"k={k!r} must lie in 1..{self.k} (this audit's budget)")
        samples = self.samples[self.samples["sample_idx"] < k].reset_index(drop=True)
        q = update_question_table(self.questions, samples, k)
        return AuditResult(self.protocol.with_k(k), self.model, q, samples, self.data)

    @classmethod
    def load(cls, path: str | Path) -> AuditResult:
        """Read a finished (or partial) audit directory."""
        store = AuditDir(path)
        store.read_header()  # is it an audit directory at all?
        store.recover()  # finish an interrupted rewrite, if any
        header = store.read_header()
        return cls(Protocol.from_dict(header["protocol"]), header["model"], store.questions(), store.samples(),
                   dict(header.get("data") or {}))


def grade_questions(
    protocol: Protocol,
    questions: Sequence[Question],
    deployed: Sequence[Completion],
    samples: Sequence[Sequence[Completion]],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Grade completions into the question and sample tables (no model needed)."""
    q_rows, s_rows = [], []
    for q, dep, outs in zip(questions, deployed, samples):
        labels = "".join(q.labels) if q.labels is not None else None
        grader = question_grader(str(protocol.grader), q)
        g_dep = grader.grade(dep.text, q.gold)
        grades = [grader.grade(o.text, q.gold) for o in outs]
        for j, (o, g) in enumerate(zip(outs, grades)):
            s_rows.append({
                "question_id": q.question_id, "sample_idx": j, "text": o.text, "answer": g.answer,
                "correct": bool(g.correct and g.scored), "scored": bool(g.scored), "finish_reason": o.finish_reason,
                "n_tokens": len(o.token_ids), "mean_logprob": o.mean_logprob,
            })
        n_scored = sum(g.scored for g in grades)
        n_correct = sum(g.correct and g.scored for g in grades)
        q_rows.append({
            "question_id": q.question_id, "realized": bool(g_dep.correct and g_dep.scored),
            "reachable": n_correct > 0, "n_correct": n_correct, "n_scored": n_scored, "k": protocol.k,
            "propensity": n_correct / n_scored if n_scored else math.nan,
            "deployed_answer": g_dep.answer, "deployed_text": dep.text, "deployed_scored": bool(g_dep.scored),
            "deployed_finish": dep.finish_reason, "gold": q.gold, "labels": labels,
        })
    return canonical(pd.DataFrame(q_rows, columns=QUESTION_COLUMNS)), canonical(pd.DataFrame(s_rows, columns=SAMPLE_COLUMNS))


def audit(
    model,
    task: Task,
    protocol: Protocol,
    *,
    out: str | Path | None = None,
    max_batch_rows: int = 1024,
    sample_offset: int = 0,
    progress: Callable[[int], None] | None = None,
    share_prefixes: bool | None = None,
    executor=None,
) -> AuditResult:
    """Audit ``model`` on ``task`` under ``protocol``.

    Args:
        model: a TransformerBridge from :func:`reachlens.load_model` (hooks the caller attached stay live),
            a model of another backend (:func:`reachlens.engine.backends.load_vllm`), or a model spec
            (``"zoo:base"``, a :class:`~reachlens.engine.backends.ModelSource`) loaded for
            ``protocol.backend`` (with ``executor``, by each worker, never by this process).
        task: the questions; all of them are audited (use ``task.head(n)`` for fewer).
        protocol: how each question is probed; ``default``/None fields are filled from the task.
        out: an audit directory; finished questions are written as they finish and skipped on a re-run.
        max_batch_rows: most completions decoded together (memory bound).
        sample_offset: draw samples ``sample_offset .. sample_offset + K - 1`` of the seed stream
            (used to extend an audit from K to 2K without redrawing the first K).
        progress: called with the number of questions finished after each batch.
        share_prefixes: decode samples that agree so far as one batch row (the same tokens; see
            :func:`reachlens.engine.generate`). None (default): share unless a hook other than
            reachlens' own is attached, in which case every sample has its own batch row; True
            shares even then (a hook reads :func:`reachlens.engine.current_rows`, whose tags are
            ``(question_id, sample_idx)``, ``sample_idx`` None for the deployed greedy answer).
        executor: None runs every batch in this process; a :class:`reachlens.scale.RayExecutor`
            sends the batches to Ray actors (one model replica each). The result is the same either
            way: sample j of question q depends on (seed, q, j) only and the batches are the same.

    >>> result = audit(load_model("zoo:base"), load_task("arith", n=20), Protocol("arith", k=8))  # doctest: +SKIP
    >>> result.D, result.O_K  # doctest: +SKIP
    """
    if executor is not None:
        from reachlens.scale import AuditJob, run_audits

        job = AuditJob(model, task, _bind_chat(model, protocol.resolved(task)), out, max_batch_rows=max_batch_rows,
                       sample_offset=sample_offset, share_prefixes=share_prefixes)
        return run_audits([job], executor, progress=None if progress is None else lambda i, done: progress(done))[0]
    model = load_for(model, protocol)
    protocol = bind_chat(bind_backend(model, protocol.resolved(task)), getattr(model, "tokenizer", None))
    model_id = identity_of(model)
    check_context(model, task, protocol)
    if out is None:
        return _run(model, task, protocol, model_id, None, max_batch_rows, sample_offset, progress, share_prefixes)
    store = AuditDir(out)
    with store.writer():
        store.open(protocol, model_id, extra={"task_source": task.source, "n_questions": len(task)},
                   data=task.data_identity)
        return _run(model, task, protocol, model_id, store, max_batch_rows, sample_offset, progress, share_prefixes)


def _bind_chat(model, protocol: Protocol) -> Protocol:
    """``protocol`` bound to the chat template of ``model`` (a spec or source: its tokenizer files)."""
    if chat_inner(protocol.prompt_format) is None:
        return protocol
    from reachlens.engine.backends import ModelSource
    from reachlens.models import load_tokenizer

    if isinstance(model, (str, ModelSource)):
        spec = model if isinstance(model, str) else model.spec
        return bind_chat(protocol, load_tokenizer(spec), model=repr(spec))
    return bind_chat(protocol, getattr(model, "tokenizer", None))


def check_context(model, task: Task, protocol: Protocol) -> None:
    """Refuse a decode that cannot fit the model's context window (``model.cfg.n_ctx``): the longest
    prompt of ``task`` plus ``protocol.max_new_tokens``. :func:`audit` calls it before anything runs."""
    n_ctx = getattr(getattr(model, "cfg", None), "n_ctx", None)
    if not isinstance(n_ctx, int) or not len(task):
        return
    if protocol.max_new_tokens >= n_ctx:
        raise ReachlensError(
            f"max_new_tokens={protocol.max_new_tokens} does not fit the model's context of {n_ctx} tokens "
            f"(with the prompt); use max_new_tokens below {n_ctx}"
        )
    prompts = render_prompts(task, protocol, task.questions, getattr(model, "tokenizer", None))
    longest = max(len(ids) for ids in encode(model, prompts))
    if longest + protocol.max_new_tokens > n_ctx:
        raise ReachlensError(
            f"the longest prompt ({longest} tokens) plus max_new_tokens={protocol.max_new_tokens} exceeds the "
            f"model's context of {n_ctx} tokens; use max_new_tokens <= {max(n_ctx - longest, 0)}"
        )


def batch_slices(task: Task, protocol: Protocol, max_batch_rows: int, done: Set[str] = frozenset()) -> list[tuple[int, int]]:
    """The fixed slices ``(start, stop)`` of ``task`` decoded together, less those wholly in ``done``.

    A slice holds ``max_batch_rows // (K + 1)`` questions (at least one), counted from the task's
    first question whatever is done already. So a resumed run, and every executor, decodes exactly
    the batches an uninterrupted single-process run would have: same shapes, same numbers, bit for bit.
    """
    group = max(1, max_batch_rows // (protocol.k + 1))
    slices = [(start, min(start + group, len(task))) for start in range(0, len(task), group)]
    return [(a, b) for a, b in slices if any(q.question_id not in done for q in task.questions[a:b])]


def audit_batch(
    model, task: Task, protocol: Protocol, start: int, stop: int, *, done: Set[str] = frozenset(),
    max_batch_rows: int = 1024, sample_offset: int = 0, share_prefixes: bool | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Decode and grade the questions ``task.questions[start:stop]`` (one slice of :func:`batch_slices`):
    their question and sample tables, less the questions in ``done``. ``protocol`` is resolved."""
    batch = list(task.questions[start:stop])
    per_q = protocol.k + 1
    prompts = render_prompts(task, protocol, batch, getattr(model, "tokenizer", None))
    rows: list[Row] = []
    for i, q in enumerate(batch):
        rows.append(Row(i, None, tag=(q.question_id, None)))
        for j in range(protocol.k):
            # temperature 0 (allowed with k=1 only) makes the one sample greedy too
            seed = row_seed(protocol.seed, q.question_id, sample_offset + j) if protocol.temperature > 0 else None
            rows.append(Row(i, seed, tag=(q.question_id, sample_offset + j)))
    outs = generate_rows(model, prompts, rows, protocol, max_batch_rows=max(max_batch_rows, per_q),
                         share_prefixes=share_prefixes)
    deployed = [outs[i * per_q] for i in range(len(batch))]
    samples = [outs[i * per_q + 1 : (i + 1) * per_q] for i in range(len(batch))]
    q_df, s_df = grade_questions(protocol, batch, deployed, samples)
    if sample_offset:
        s_df["sample_idx"] += sample_offset
    keep = ~q_df["question_id"].isin(done)
    q_df = q_df[keep].reset_index(drop=True)
    s_df = s_df[s_df["question_id"].isin(set(q_df["question_id"]))].reset_index(drop=True)
    return q_df, s_df


def _run(
    model, task: Task, protocol: Protocol, model_id: dict[str, str], store: AuditDir | None,
    max_batch_rows: int, sample_offset: int, progress: Callable[[int], None] | None, share_prefixes: bool | None,
) -> AuditResult:
    """The audit proper (under the directory's writer lock when ``store`` is given)."""
    done = store.finished_ids() if store is not None else set()
    todo = batch_slices(task, protocol, max_batch_rows, done)
    n_done = len(task) - sum(b - a for a, b in todo)
    if progress and n_done:
        progress(n_done)
    q_frames, s_frames = [], []
    for start, stop in todo:
        q_df, s_df = audit_batch(model, task, protocol, start, stop, done=done, max_batch_rows=max_batch_rows,
                                 sample_offset=sample_offset, share_prefixes=share_prefixes)
        if store is not None:
            store.append(q_df, s_df)
        q_frames.append(q_df)
        s_frames.append(s_df)
        n_done += stop - start
        if progress:
            progress(n_done)
    return finish_audit(task, protocol, model_id, store, q_frames, s_frames)


def finish_audit(
    task: Task, protocol: Protocol, model_id: dict[str, str], store: AuditDir | None,
    q_frames: Sequence[pd.DataFrame], s_frames: Sequence[pd.DataFrame],
) -> AuditResult:
    """The result of a run whose batches are done: a directory's whole tables (consolidated into it),
    or the frames of a run without one, in task order."""
    if store is not None:
        # A directory's result is every question it holds (a re-run with a larger n extends it).
        questions, samples = store.questions(), store.samples()
    else:
        questions = pd.concat(q_frames, ignore_index=True) if q_frames else pd.DataFrame(columns=QUESTION_COLUMNS)
        samples = pd.concat(s_frames, ignore_index=True) if s_frames else pd.DataFrame(columns=SAMPLE_COLUMNS)
    questions, samples = in_task_order(questions, samples, [q.question_id for q in task.questions])
    result = AuditResult(protocol, model_id, questions, samples, dict(task.data_identity))
    if store is not None:
        store.consolidate(questions, samples, result.summary())
    return result
