"""The runner: one scheduler for every audit job, on any executor, and one ``rerun``.

* :func:`run_jobs` runs a list of :class:`AuditJob` (an audit: model, task, protocol, directory, execution
  settings) on an executor: this process (:class:`InProcessExecutor`, the default), a pool of local processes
  (:class:`ProcessPool`) or Ray actors (:class:`RayExecutor`). The driver holds every directory's lock and
  writes; executors only decode. :func:`reachlens.audit`, the training study and every control go through it.
* :func:`rerun` is an audit again with one thing changed (budget, temperature, decode length, prompt format,
  question subset), under one directory rule (:func:`rerun_name`); the four controls are calls of it.
* :mod:`reachlens.runner.decode` is the one path from questions to their graded deployment and samples.

Sample j of question q depends only on (seed, q, j), and the slices decoded together are fixed
(:func:`batch_slices`), so an audit run here, in a pool, on Ray, or resumed by any of them after a crash gives
the same tables, bit for bit on the same hardware and dtype.
"""

from reachlens.runner.decode import (
    audit_slice,
    batch_slices,
    check_budget,
    check_context,
    deploy_and_grade,
    grade_completion,
    grade_questions,
)
from reachlens.runner.executors import InProcessExecutor, ProcessPool
from reachlens.runner.jobs import AuditJob, ShardJob, SliceResult, run_jobs
from reachlens.runner.ray_executor import RayExecutor
from reachlens.runner.rerun import CHANGES, PlannedRerun, plan_rerun, require_audited_with, rerun, rerun_name, run_reruns

__all__ = [
    "AuditJob", "CHANGES", "InProcessExecutor", "PlannedRerun", "ProcessPool", "RayExecutor", "ShardJob", "SliceResult",
    "audit_slice", "batch_slices", "check_budget", "check_context", "deploy_and_grade", "grade_completion", "grade_questions",
    "plan_rerun", "require_audited_with", "rerun", "rerun_name", "run_jobs", "run_reruns",
]
