"""The runner: one scheduler for every run decoded in slices, on any executor.

* :func:`run_jobs` runs a list of jobs (:class:`Job`: an audit, :class:`~reachlens.studies.AuditJob`; a probe run,
  :class:`~reachlens.probes.ProbeJob`) on an :class:`Executor`: this process (:class:`InProcessExecutor`), a pool
  of local processes (:class:`ProcessPool`) or Ray actors (:class:`RayExecutor`), the one :func:`executor_for`
  an :class:`~reachlens.execution.ExecConfig` asks for; a routing search, a recognition run and a causal sweep are
  jobs too (:class:`~reachlens.runner.tables_job.TablesJob`: their parts are named tables). The driver holds every
  directory's lock and writes its parts; executors only decode, each worker holding one model :class:`Replica`.
  A job hands its workers a shard, each a :class:`ModelShard` (the model, its identity, task and protocol, and
  the one check of a replica) with what its slices need.
* :func:`run_study` runs a run made of runs (a :class:`Study`: a training study, a control, an elicitation): what it
  checks first, its record started once, its children (:class:`Child`) by role in rounds through one
  :func:`run_jobs`, the finished ones skipped on a re-run, and its run composed and saved with relative child paths.
* :mod:`reachlens.runner.decode` is the one path from questions to their graded deployment and samples;
  :mod:`reachlens.runner.context` refuses what cannot fit the model's context (memory bounds:
  :mod:`reachlens.engine.memory`).

Sample j of question q depends only on (seed, q, j), and the slices decoded together are fixed
(:func:`batch_slices`), so a run made here, in a pool, on Ray, or resumed by any of them after a crash gives
the same tables, bit for bit on the same hardware and dtype.
"""

from reachlens.runner.decode import (
    audit_slice,
    batch_slices,
    deploy_and_grade,
    deploy_arms_and_grade,
    grade_questions,
    grade_samples,
    question_slices,
    sample_slice,
)
from reachlens.runner.context import check_context, check_fits
from reachlens.runner.executor import Executor, Replica, Shard, Slice, SliceResult, check_replica
from reachlens.runner.executors import InProcessExecutor, ProcessPool
from reachlens.runner.jobs import Job, Opened, ResolvedModel, executor_for, model_config, resolve_model, run_jobs
from reachlens.runner.ray_executor import RayExecutor
from reachlens.runner.shard import ModelShard
from reachlens.runner.study import Child, Progress, Study, run_children, run_study

__all__ = [
    "Child", "Executor", "InProcessExecutor", "Job", "ModelShard", "Opened", "ProcessPool", "RayExecutor", "Replica",
    "ResolvedModel", "Progress", "Shard", "Slice", "SliceResult", "Study", "audit_slice", "batch_slices", "check_context", "check_fits", "check_replica",
    "deploy_and_grade", "deploy_arms_and_grade", "executor_for", "model_config", "grade_questions", "grade_samples", "question_slices",
    "resolve_model", "run_children", "run_jobs", "run_study", "sample_slice",
]
