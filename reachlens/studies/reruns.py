"""``rerun(source, **change)``: an audit again with one thing changed, under one directory rule.

Every control of reachlens is a rerun of an audit under a protocol that differs in one field, on the same
model, data and seed stream:

* the **budget** control: ``k=K2`` (> K draws only samples K..K2-1: sample j of question q depends on
  (seed, q, j) alone, so the result equals a fresh K2 audit; < K cuts the first K2 samples, decoding nothing);
* the **temperature** control: ``temperature=T`` with ``questions=`` the ones that left a parent's reachable set;
* the **length** control: ``max_new_tokens=N``;
* the **prompt-format** control: ``prompt_format=NAME`` (with ``k=1`` in a training study: its table reads
  the deployment alone); ``prompt_format="chat"`` on a plain audit renders with the model's chat template (its
  hash bound when the rerun runs), a plain format on a chat audit drops the chat template and the system turn;
* the **system-turn** control: ``system=TEXT`` (or None: the template's own) on a chat audit. A rerun and its
  source compare as paired audits only with the changed fields allowed (``compare(..., allow=("system",))``;
  chat vs plain: ``allow=("prompt_format", "chat_template", "system")``), each named when refused.

A change of ``k`` alone reuses the source's samples (a cut, or an extension drawing only the new ones); ``k``
changed with anything else decodes every sample again under the new protocol.

The model must be the one the audit was made with, and the task its data: both identities are checked
against the source's record first (:func:`require_audited_with`). A rerun written to a folder is named by one
rule, :func:`rerun_name`: the source's name, then each change as ``field=value`` in field order, joined by
``--`` (``grpo--k=400``, ``sft--prompt_format=verbose``, ``grpo--questions=12q-3fa2b1c4--temperature=0.6``; a
system turn as ``system=`` and 8 hex digits of its SHA-256, ``system=none`` for None).

:func:`rerun_child` prepares a rerun as a :class:`~reachlens.runner.study.Child` (an
:class:`~reachlens.studies.AuditJob`, or nothing to decode, and how its audit is made), so a study hands its reruns
to :func:`~reachlens.runner.study.run_study` (a training study, a control); :func:`rerun` runs one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig
from reachlens.models import ModelSource, identity_of, model_identity
from reachlens.protocol import Protocol, ProtocolMismatch, chat_inner
from reachlens.records import in_task_order, update_question_table
from reachlens.runner import Executor
from reachlens.runner.study import Child, Progress, run_children
from reachlens.store import RunRecord, read_run, rerun_name, run_differences
from reachlens.studies.audit_job import AuditJob
from reachlens.studies.auditing import AuditResult
from reachlens.tasks.base import Task

__all__ = ["CHANGES", "as_rerun", "require_audited_with", "rerun", "rerun_child", "rerun_name"]

CHANGES = ("k", "temperature", "max_new_tokens", "prompt_format", "system", "questions")
"""What a rerun may change (in the order :func:`rerun_name` writes them)."""


def _check_change(src, change: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(change) - set(CHANGES))
    if unknown or not change:
        raise ReachlensError(f"a rerun changes one or more of {', '.join(CHANGES)}; got {sorted(change) or 'nothing'}")
    change = dict(change)
    same = [key for key in change if key != "questions" and getattr(src.protocol, key) == change[key]]
    subset = "questions" in change and set(change["questions"]) != set(src.questions["question_id"])
    if same and len(same) == len(change) - ("questions" in change) and not subset:
        raise ReachlensError(f"{same[0]}={change[same[0]]!r} is the audit's own; a rerun changes it")
    if "questions" in change:
        ids = list(dict.fromkeys(change["questions"]))
        missing = set(ids) - set(src.questions["question_id"])
        if missing or not ids:
            raise ReachlensError(f"questions= must be a non-empty subset of the audit's questions; "
                                 f"{len(missing)} are not in it (e.g. {sorted(missing)[:1]!r})")
        change["questions"] = ids
    if "temperature" in change and not float(change["temperature"]) > 0:
        raise ReachlensError(f"temperature {change['temperature']!r} must be > 0 (a K-sample probe at temperature 0 "
                             "repeats the greedy answer)")
    return change


def require_audited_with(model, task: Task, source, what: str = "rerun") -> None:
    """Refuse a rerun with another model or data than ``source`` (an audit run) was made with.

    The model fingerprint and the task's data identity are checked against the audit's record
    (:class:`~reachlens.protocol.ProtocolMismatch` naming what differs), and every audited question must be
    in ``task``: a control on another checkpoint would measure that checkpoint.
    """
    ident = dataclasses.asdict(model_identity(model.spec if isinstance(model, ModelSource) else model)) \
        if isinstance(model, (str, ModelSource)) else identity_of(model)
    diffs, _ = run_differences(source.record, None, ident, task.data_identity)
    if diffs:
        raise ProtocolMismatch(diffs, what=f"the audit to {what} was made with another model or data",
                               fix="pass the model and the task (data file) the audit was made with")
    missing = set(source.questions["question_id"]) - {q.question_id for q in task.questions}
    if missing:
        raise ReachlensError(f"the task lacks {len(missing)} of the audit's questions (e.g. {sorted(missing)[0]!r}); "
                             "pass the task the audit was made on")


def rerun_child(
    source, *, role: str = "rerun", label: str = "", log: Callable[[Any], str] | None = None, model: Any = None,
    task: Task | None = None, into: str | Path | None = None, name: str | None = None,
    exec_config: ExecConfig | None = None, **change: Any,
) -> Child:
    """``source`` (an audit run, or its directory) rerun with ``change`` as a study's child ``role`` (its progress
    ``label``, its ``log`` line); see :func:`rerun`."""
    src = read_run(source) if isinstance(source, (str, Path)) else source
    change = _check_change(src, change)
    exec_config = exec_config or ExecConfig()
    model = model if model is not None else ModelSource.from_exec(src.record.model["spec"], exec_config)
    task = task if task is not None else _task_of(src)
    what = "extend" if "k" in change else "re-probe" if "temperature" in change else "rerun"
    require_audited_with(model, task, src, what)
    location = getattr(src, "location", None)
    out = None if into is None else Path(into) / rerun_name(name or (location.name if location else "audit"), change)
    extra = {"rerun_of": None if location is None else str(location), "change": change}
    protocol = _changed(src.protocol, change)
    if "questions" in change:
        src = _only(src, change["questions"])
    sub = task.only(src.questions["question_id"])
    # the budget alone changed: cut the samples (k < K) or draw only the new ones (k > K); with any other
    # change the source's samples were drawn under another protocol, so everything is decoded again
    k_only = set(change) <= {"k", "questions"}
    child = Child(role, out, label or f"rerun {src.record.model.get('spec', 'audit')}", log=log)
    if k_only and "k" in change and change["k"] < src.k:
        return dataclasses.replace(child, make=lambda _: as_rerun(src.restrict_k(change["k"]), out, extra))
    if k_only and "k" in change and change["k"] > src.k:
        return _extension(child, src, model, sub, protocol, exec_config, extra)
    return dataclasses.replace(child, job=AuditJob(model, sub, protocol, out, exec_config, extra=extra))


def _changed(protocol: Protocol, change: Mapping[str, Any]) -> Protocol:
    """``protocol`` with ``change``; a new prompt format drops the old one's chat template (the runner binds the
    model's to a chat format), and a plain one its system turn too (a system turn with a plain format is refused)."""
    fields = {k: v for k, v in change.items() if k != "questions"}
    if "prompt_format" in fields:
        fields["chat_template"] = None
        if chat_inner(fields["prompt_format"]) is None:
            fields.setdefault("system", None)
    return dataclasses.replace(protocol, **fields)


def _only(src, ids: Sequence[str]):
    """The audit ``src`` on the questions ``ids`` alone."""
    keep = set(ids)
    return dataclasses.replace(src, questions=src.questions[src.questions["question_id"].isin(keep)].reset_index(drop=True),
                               samples=src.samples[src.samples["question_id"].isin(keep)].reset_index(drop=True))


def _task_of(src) -> Task:
    from reachlens.tasks import load_task

    p = src.protocol
    data = (src.record.data or {}).get("file")
    if data is not None:
        raise ReachlensError(f"the audit was made on the data file {data!r}; pass the task (task=load_task("
                             f"{p.task!r}, PATH)) to rerun it")
    return load_task(p.task, split=p.split)


def as_rerun(result, out: Path | None, extra: Mapping[str, Any]):
    """``result`` (an audit cut or joined from another) with a record of its own describing it by ``extra`` (what
    it reruns, and with which change), written complete to ``out`` when given."""
    record = RunRecord.new("audit", result.protocol, result.model, result.data or None, extra=extra,
                           exec=result.record.exec)
    result = dataclasses.replace(result, record=record, location=None)
    if out is None:
        return result
    result.save(out)
    return read_run(out)


def _extension(child: Child, src, model, sub: Task, protocol, exec_config: ExecConfig, extra) -> Child:
    """A budget extension: samples K..K2-1 drawn now (in memory), joined to the source's first K."""
    k = protocol.k
    job = AuditJob(model, sub, protocol.with_k(k - src.k), None, exec_config, sample_offset=src.k)

    def make(more):
        samples = pd.concat([src.samples, more.samples], ignore_index=True)
        questions = update_question_table(src.questions, samples, k)
        questions, samples = in_task_order(questions, samples, [q.question_id for q in sub.questions])
        return as_rerun(AuditResult(questions, samples, record=dataclasses.replace(more.record, protocol=protocol)),
                        child.path, extra)

    return dataclasses.replace(child, job=job, make=make)


def rerun(
    source, *, model: Any = None, task: Task | None = None, into: str | Path | None = None, name: str | None = None,
    exec_config: ExecConfig | None = None, executor: Executor | None = None,
    progress: Progress | None = None, **change: Any,
):
    """The audit ``source`` again with ``change`` (one or more of :data:`CHANGES`); its audit run.

    Args:
        source: an audit run (:class:`~reachlens.AuditResult`) or its directory.
        model: the audited model (loaded, a spec or a :class:`~reachlens.models.ModelSource`); default: the
            spec the audit recorded, loaded as ``exec_config`` says. Its identity must be the audit's.
        task: the audited task (default: the audit's task reloaded; a task from a data file must be given).
        into: a folder: the rerun is written (resumably) to ``into / rerun_name(name, change)``; None keeps
            it in memory.
        name: the rerun's name (default: the source directory's name).
        exec_config: how it runs; executor: who decodes (:func:`~reachlens.runner.run_jobs`).
        progress: ``progress(label, questions finished, questions in all)``.

    >>> rerun("runs/base", k=400, into="runs").location  # doctest: +SKIP
    PosixPath('runs/base--k=400')
    >>> rerun(trained, temperature=1.2, questions=left, model=model, task=task)  # doctest: +SKIP
    """
    child = rerun_child(source, model=model, task=task, into=into, name=name, exec_config=exec_config, **change)
    return run_children([child], executor, progress=progress)[child.role]
