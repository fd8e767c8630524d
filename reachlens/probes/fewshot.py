"""The few-shot probe (``fewshot:n=4:k=6``): worked train demonstrations before the question, a decoding probe.

Each candidate is the greedy deployment of the question's prompt with ``n`` worked demonstrations from the task's
**train** split before it (:func:`~reachlens.tasks.fewshot.fewshot_prompts`): in the task's plain format (joined
by a blank line, lm-eval's ``fewshot_delimiter``), or under ``prompt_format="chat"`` as earlier user/assistant turns
of the model's chat template (lm-eval's ``fewshot_as_multiturn``). Candidate ``c`` of a question draws its own
``n`` demonstrations from (seed, question, c) alone (:func:`~reachlens.tasks.fewshot.draw_demonstrations`), never
the question itself nor, on an open-ended task, one whose answer is the question's gold: answer-blind. The model
computes as it was trained (``intervention = False``); only its prompt changes.

The prompts are longer than the task's own: a candidate whose prompt and ``max_new_tokens`` do not fit the model's
context is refused in one line naming the lengths (lower ``n``), never cut.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reachlens.engine import Row
from reachlens.engine.backends import generate_rows
from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig
from reachlens.grading import grade_completion, question_grader
from reachlens.probes.bank import bank_row
from reachlens.probes.spec import Probe, register_probe
from reachlens.protocol import Protocol
from reachlens.records import candidate_row
from reachlens.runner.context import check_fits
from reachlens.runner.decode import question_slices
from reachlens.tasks.base import Question, Task
from reachlens.tasks.fewshot import (
    FewShot,
    check_admissible,
    check_train_pool,
    demonstration_format,
    fewshot_prompts,
    train_pool,
)

__all__ = ["FewShotProbe"]


@register_probe
@dataclass(frozen=True, kw_only=True)
class FewShotProbe(Probe):
    """``n`` train demonstrations before the question, ``k`` draws of them (``fewshot:n=4:k=6``)."""

    family = "fewshot"
    intervention = False
    example = "fewshot:n=4:k=6"

    n: int = field(default=4, metadata={"help": "demonstrations before each question"})
    k: int = field(default=6, metadata={"help": "candidates per question, each with its own demonstrations"})
    train: str = field(default="auto", metadata={"help": "the train split: auto (a generated task's) or a data file"})
    seed: int | None = field(default=None, metadata={"help": "seed of the draws (none: the run's)"})
    train_sha256: str | None = field(default=None, init=False, repr=False, compare=False)
    """The train file's SHA-256 as the run's driver read it (:meth:`read_inputs`): what every decode checks."""

    def validate(self) -> None:
        FewShot(self.n)  # refuses n < 1 in its own words

    def check_task(self, task: Task, protocol: Protocol) -> None:
        """The train split read and checked before any decode: ``train=`` on a generated task, a file of another
        task or split, and a question with fewer than ``n`` admissible demonstrations are refused here."""
        pool = self.pool(task)
        check_train_pool(task, pool)
        check_admissible(task, pool, self.n, demonstration_format(protocol.resolved(task)))

    def read_inputs(self) -> tuple[FewShotProbe, dict[str, str]]:
        """A ``train=PATH`` file's SHA-256, read once in the driver and recorded in the run's identity (a resume with
        another file is refused); the probe returned holds it, and every decode checks the file against it."""
        if self.train == "auto":
            return self, {}
        read = dataclasses.replace(self)
        object.__setattr__(read, "train_sha256", _file_sha256(self.train))
        return read, {self.train: read.train_sha256}

    @property
    def budget(self) -> int:
        return self.k

    def expected(self) -> dict[str, int]:
        return {self.label: self.k}

    def pool(self, task: Task) -> Task:
        """The task's train split, where the demonstrations come from (a ``train=PATH`` file checked against the
        SHA-256 the run recorded, when it was read by :meth:`read_inputs`)."""
        if self.train == "auto":
            return train_pool(task, None)
        if self.train_sha256 is not None and _file_sha256(self.train) != self.train_sha256:
            raise ReachlensError(f"fewshot train={self.train!r} changed since the run recorded it (SHA-256 "
                                 f"{self.train_sha256[:12]}...); put the recorded file back or start another run")
        return train_pool(task, self.train)

    def prompts(self, task: Task, protocol: Protocol, questions: Sequence[Question], candidate: int,
                tokenizer=None, pool: Task | None = None) -> list[str]:
        """The prompt of candidate ``candidate`` of each question (``pool``: :meth:`pool`'s, read once by the
        caller that builds every candidate's prompts)."""
        fewshot = FewShot(self.n, self.run_seed(protocol))
        return fewshot_prompts(task, self.pool(task) if pool is None else pool, protocol, questions, fewshot,
                               candidate=candidate, tokenizer=tokenizer)

    def slices(self, task: Task, protocol: Protocol, max_batch_rows: int) -> list[tuple[int, int]]:
        return question_slices(len(task), self.k, max_batch_rows)

    def decode(self, model, task: Task, protocol: Protocol, start: int, stop: int,
               exec_config: ExecConfig) -> list[dict[str, Any]]:
        """Every candidate of ``task.questions[start:stop]``, greedy, in one engine call."""
        questions = list(task.questions[start:stop])
        tokenizer = getattr(model, "tokenizer", None)
        pool = self.pool(task)  # the train file read and checked once per slice, not once per candidate
        by_candidate = [self.prompts(task, protocol, questions, c, tokenizer, pool) for c in range(self.k)]
        prompts = [by_candidate[c][i] for i in range(len(questions)) for c in range(self.k)]
        check_fits(model, prompts, protocol.max_new_tokens, f"probe {self.label!r}: a few-shot prompt",
                   lambda room: "lower n (or max_new_tokens)")
        rows = [Row(i * self.k + c, None, tag=(q.question_id, c)) for i, q in enumerate(questions) for c in range(self.k)]
        outs = generate_rows(model, prompts, rows, protocol, max_batch_rows=exec_config.max_batch_rows,
                             share_prefixes=exec_config.share_prefixes)
        out = []
        for i, q in enumerate(questions):
            grader = question_grader(str(protocol.grader), q)
            for c in range(self.k):
                comp = outs[i * self.k + c]
                cand = candidate_row(q.question_id, c, comp, grade_completion(grader, q, comp))
                out.append(bank_row(cand, self.label, self.label, False))
        return out


def _file_sha256(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as e:
        raise ReachlensError(f"fewshot train={path!r} cannot be read ({e.strerror}); name the task's train "
                             "file") from None
