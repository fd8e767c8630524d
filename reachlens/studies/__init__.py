"""Studies: each a run (:class:`reachlens.store.Run`) built from the runner: the audit (realized vs reachable),
re-scoring, the comparison of two audits, the controls, the training study, training-based elicitation, recognition and the causal sweeps."""

from reachlens.runner import grade_questions
from reachlens.studies.auditing import AuditResult, audit
from reachlens.studies.causal import CausalResult
from reachlens.studies.compare import Comparison, compare, propensity_bins
from reachlens.studies.controls import LengthControl, TemperatureControl, length_control, temperature_control
from reachlens.studies.elicitation import Elicitation, elicit
from reachlens.studies.finetune import FineTune, finetune_on_demonstrations
from reachlens.studies.metrics import budget_grid, pass_at_k, pass_at_k_curve
from reachlens.studies.recognition import RecognitionResult
from reachlens.studies.rescore import rescore
from reachlens.studies.study_plan import StudyPlan
from reachlens.studies.study_view import StudyView
from reachlens.studies.training_audit import TrainingAudit, run_training_audit

__all__ = [
    "AuditResult",
    "CausalResult",
    "Comparison",
    "Elicitation",
    "FineTune",
    "LengthControl",
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
    "propensity_bins",
    "rescore",
    "run_training_audit",
    "temperature_control",
]
