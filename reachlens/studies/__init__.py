"""Studies built on the engine: the audit (realized vs reachable) and its re-scoring."""

from reachlens.studies.auditing import AuditResult, audit, grade_questions, grader_for, summarize
from reachlens.studies.metrics import budget_grid, pass_at_k, pass_at_k_curve
from reachlens.studies.rescore import rescore

__all__ = [
    "AuditResult",
    "audit",
    "budget_grid",
    "grade_questions",
    "grader_for",
    "pass_at_k",
    "pass_at_k_curve",
    "rescore",
    "summarize",
]
