"""Studies built on the engine: the audit (realized vs reachable), re-scoring, and the checkpoint comparison."""

from reachlens.studies.auditing import AuditResult, audit, grade_questions
from reachlens.studies.budget import extend_budget
from reachlens.studies.compare import Comparison, compare, propensity_bins
from reachlens.studies.metrics import budget_grid, pass_at_k, pass_at_k_curve
from reachlens.studies.rescore import rescore

__all__ = [
    "AuditResult",
    "Comparison",
    "audit",
    "budget_grid",
    "compare",
    "extend_budget",
    "grade_questions",
    "pass_at_k",
    "pass_at_k_curve",
    "propensity_bins",
    "rescore",
]
