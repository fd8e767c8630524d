"""The one base of every job's shard: the model a worker loads, the identity it must have, and the questions and
protocol it decodes (:class:`ModelShard`).

A job of the runner hands its workers a :class:`~reachlens.runner.executor.Shard` (an audit's, a probe run's, a
route search's, a recognition run's, a causal sweep's). Each holds the same plumbing, here once: the model's
:attr:`~ModelShard.source` (what a worker loads) or the :attr:`~ModelShard.model` this process holds, the
:attr:`~ModelShard.model_id` the run records, the task and its resolved protocol; and one
:meth:`~ModelShard.prepare`, which refuses a replica that is not the run's checkpoint
(:func:`~reachlens.runner.executor.check_replica`) or a question that cannot fit its context
(:func:`~reachlens.runner.context.check_context`), then the job's own checks (:meth:`~ModelShard.check_model`).
A subclass adds what its slices need and :meth:`~ModelShard.decode`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from reachlens.models import ModelSource
from reachlens.protocol import Protocol
from reachlens.runner.context import check_context
from reachlens.runner.executor import Slice, check_replica
from reachlens.tasks.base import Task

__all__ = ["ModelShard"]


@dataclass(frozen=True, kw_only=True)
class ModelShard:
    """What every shard holds (keyword fields; a subclass's own fields may be positional)."""

    source: ModelSource | None
    """What a worker loads; None for a model only this process holds (:attr:`model`)."""
    task: Task
    protocol: Protocol
    """Resolved (explicit format, stop strings, grader), bound to the model's chat template where it has one."""
    model_id: dict[str, Any]
    """The identity the run records; a worker whose checkpoint differs refuses to run."""
    model: Any = field(default=None, repr=False, compare=False)
    """The model this process holds (decoded in process, hooks live); None for a shard sent to workers."""

    def context(self) -> Task:
        """The questions whose prompts must fit the model's context (default: all of the task's)."""
        return self.task

    def check_model(self, model: Any) -> None:
        """The job's own refusals of a replica (default none)."""

    def prepare(self, model: Any) -> None:
        """Refuse, on the worker, a replica that is not the run's checkpoint or a decode it cannot do."""
        check_replica(model, self.model_id, self.source)
        check_context(model, self.context(), self.protocol)
        self.check_model(model)

    def decode(self, model: Any, part: Slice) -> dict[str, pd.DataFrame]:
        """The tables of one slice (a part of the run)."""
        raise NotImplementedError
