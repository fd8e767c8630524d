"""Past one process: an audit's question slices on other executors (Ray actors), one result.

Sample j of question q depends only on (seed, q, j), and the slices decoded together are fixed
(:func:`~reachlens.studies.auditing.batch_slices`), so an audit run here, on Ray actors, or resumed
by either after a crash gives the same tables, bit for bit on the same hardware and dtype.
"""

from reachlens.scale.jobs import AuditJob, LocalExecutor, ShardJob, run_audits
from reachlens.scale.ray_executor import RayExecutor

__all__ = ["AuditJob", "LocalExecutor", "RayExecutor", "ShardJob", "run_audits"]
