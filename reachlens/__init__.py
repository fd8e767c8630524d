"""reachlens: tell apart what a model can reach from what it emits.

``realized``: the default deployment (greedy, one sample, the standard prompt) is correct.
``reachable``: a fixed probe of K samples yields at least one correct answer.

>>> import reachlens
>>> model = reachlens.load_model("zoo:base")  # doctest: +SKIP
>>> result = reachlens.audit(model, reachlens.load_task("arith", n=50), reachlens.Protocol("arith", k=16))  # doctest: +SKIP
>>> result.D, result.O_K  # doctest: +SKIP
"""

from reachlens.errors import ReachlensError
from reachlens.models import load_model
from reachlens.protocol import Protocol, ProtocolMismatch
from reachlens.store import RunDir, RunRecord, read_run
from reachlens.studies import AuditResult, audit, pass_at_k, rescore
from reachlens.tasks import Question, Task, load_task

__all__ = [
    "AuditResult",
    "Protocol",
    "ProtocolMismatch",
    "ReachlensError",
    "Question",
    "RunDir",
    "RunRecord",
    "Task",
    "audit",
    "load_model",
    "load_task",
    "pass_at_k",
    "read_run",
    "rescore",
]

__version__ = "0.1.0"
