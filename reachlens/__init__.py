"""reachlens: tell apart what a model can reach from what it emits.

``realized``: the default deployment (greedy, one sample, the standard prompt) is correct.
``reachable``: a fixed probe of K samples yields at least one correct answer.

>>> import reachlens
>>> model = reachlens.load_model("zoo:base")  # doctest: +SKIP
>>> result = reachlens.audit(model, reachlens.load_task("arith", n=50), reachlens.Protocol("arith", k=16))  # doctest: +SKIP
>>> result.D, result.O_K  # doctest: +SKIP
>>> reachlens.compare("runs/base", "runs/grpo").summary()["delta_O_K"]  # doctest: +SKIP
>>> reachlens.plan("runs/base", effect=0.03).quantities  # doctest: +SKIP

Every study's result is a run (:class:`reachlens.store.Run`), saved with ``run.save(DIR)`` and read back with
:func:`read_run`. Importing reachlens imports every module that defines a kind of run (the studies, routing, probes),
so that :func:`read_run` knows them all.
"""

from reachlens import routing as _routing  # noqa: F401  (registers the routing kind of run)
from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig
from reachlens.models import load_model
from reachlens.probes import ProbeRun, probe
from reachlens.protocol import Protocol, ProtocolMismatch
from reachlens.store import Run, RunDir, RunRecord, list_runs, read_run
from reachlens.studies import AuditResult, Comparison, Elicitation, audit, compare, elicit, pass_at_k, plan, rerun, rescore
from reachlens.tasks import Question, Task, load_task
from reachlens.version import __version__

__all__ = [
    "AuditResult",
    "Comparison",
    "Elicitation",
    "ExecConfig",
    "ProbeRun",
    "Protocol",
    "ProtocolMismatch",
    "ReachlensError",
    "Question",
    "Run",
    "RunDir",
    "RunRecord",
    "Task",
    "__version__",
    "audit",
    "compare",
    "elicit",
    "list_runs",
    "load_model",
    "load_task",
    "pass_at_k",
    "plan",
    "probe",
    "read_run",
    "rerun",
    "rescore",
]
