"""Studies: each a run (:class:`reachlens.store.Run`) built from the runner: the audit (realized vs reachable; a
job of the runner, :class:`AuditJob`), its reruns, re-scoring, the comparison of two audits, the controls, the
training study, training-based elicitation, recognition and the causal sweeps; and the plan of a comparison from a pilot (:func:`plan`: its
power, not a run)."""

from reachlens.runner import grade_questions
from reachlens.store import rerun_name
from reachlens.studies.audit_job import AuditJob, AuditShard, audit
from reachlens.studies.auditing import AuditResult
from reachlens.studies.causal import CausalResult
from reachlens.studies.compare import Comparison, compare, propensity_bins
from reachlens.studies.controls import LengthControl, TemperatureControl, length_control, temperature_control
from reachlens.studies.elicitation import Elicitation, elicit
from reachlens.studies.finetune import FineTune, finetune_on_demonstrations
from reachlens.studies.metrics import budget_grid, pass_at_k, pass_at_k_curve
from reachlens.studies.planning import PowerPlan, plan
from reachlens.studies.recognition import RecognitionResult
from reachlens.studies.reruns import CHANGES, require_audited_with, rerun, rerun_child
from reachlens.studies.rescore import rescore
from reachlens.studies.study_plan import StudyPlan
from reachlens.studies.study_view import StudyView
from reachlens.studies.training_audit import TrainingAudit, run_training_audit

__all__ = [
    "AuditJob",
    "AuditResult",
    "AuditShard",
    "CHANGES",
    "CausalResult",
    "Comparison",
    "Elicitation",
    "FineTune",
    "LengthControl",
    "PowerPlan",
    "RecognitionResult",
    "StudyPlan",
    "StudyView",
    "TemperatureControl",
    "TrainingAudit",
    "audit",
    "budget_grid",
    "compare",
    "elicit",
    "finetune_on_demonstrations",
    "grade_questions",
    "length_control",
    "pass_at_k",
    "pass_at_k_curve",
    "plan",
    "propensity_bins",
    "require_audited_with",
    "rerun",
    "rerun_child",
    "rerun_name",
    "rescore",
    "run_training_audit",
    "temperature_control",
]
