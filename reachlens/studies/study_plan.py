"""The plan of a training study: which checkpoints, which pairs, one protocol, which controls.

A :class:`StudyPlan` is what :func:`~reachlens.studies.training_audit.run_training_audit` runs and what a
training study's run record holds (its protocol, and the rest as its options). It is checked when made:
every pair and trajectory point names a checkpoint of the plan, and every control's setting exceeds the
protocol's own (a larger budget, a longer decode, temperatures above 0). A plan read back from a run record is
checked field by field first (:meth:`StudyPlan.from_dict`): a hand-edited or damaged one is one line.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from reachlens.errors import ReachlensError
from reachlens.protocol import Protocol
from reachlens.studies.compare import TRUNCATION_MARGIN

__all__ = ["StudyPlan"]


@dataclass(frozen=True)
class StudyPlan:
    """What a training audit runs."""

    models: dict[str, str]
    """Checkpoint name -> model spec (``zoo:base``, a folder, a hub name)."""
    pairs: tuple[tuple[str, str], ...]
    """(parent, descendant) names to compare."""
    protocol: Protocol
    """The shared protocol (budget K); the budget control extends it to ``extended_k``."""
    n: int | None = None
    """First n questions of the task (all when None)."""
    data: str | None = None
    """Data file for file-based tasks."""
    extended_k: int | None = None
    """Budget of the budget control (typically 2K); None skips it."""
    native_formats: dict[str, str] = field(default_factory=dict)
    """Descendant name -> its native prompt format, for the prompt-format control (skipped when empty)."""
    control_temperatures: tuple[float, ...] = ()
    """Temperatures of the temperature control (each pair's left questions re-probed); () skips it."""
    length_max_new_tokens: int | None = None
    """Decode length of the length control, run for the pairs whose truncation shares differ by more
    than ``truncation_margin``; None skips it."""
    truncation_margin: float = TRUNCATION_MARGIN
    """Truncation parity: the largest gap in the shares of outputs cut at ``max_new_tokens`` left unflagged."""
    trajectory: dict[str, int] = field(default_factory=dict)
    """Checkpoint name -> optimizer step, for the checkpoints of one training run (its parent at step 0):
    the trajectory table and figure (empty: none). Every name must be among ``models``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "control_temperatures", tuple(float(t) for t in self.control_temperatures))
        if any(not t > 0 for t in self.control_temperatures):
            raise ReachlensError(f"control_temperatures={self.control_temperatures!r} must all be > 0")
        if self.length_max_new_tokens is not None and self.length_max_new_tokens <= self.protocol.max_new_tokens:
            raise ReachlensError(f"length_max_new_tokens={self.length_max_new_tokens!r} must exceed the protocol's "
                                 f"max_new_tokens={self.protocol.max_new_tokens}")
        for a, b in self.pairs:
            for name in (a, b):
                if name not in self.models:
                    raise ReachlensError(f"pair ({a!r}, {b!r}) names {name!r}, which is not among the models "
                                     f"{sorted(self.models)}")
        if self.extended_k is not None and self.extended_k <= self.protocol.k:
            raise ReachlensError(f"extended_k={self.extended_k!r} must exceed the protocol's k={self.protocol.k}")
        object.__setattr__(self, "trajectory", dict(self.trajectory))
        for name, step in self.trajectory.items():
            if name not in self.models:
                raise ReachlensError(f"trajectory names {name!r}, which is not among the models {sorted(self.models)}")
            if not isinstance(step, int) or isinstance(step, bool) or step < 0:
                raise ReachlensError(f"trajectory step of {name!r} is {step!r}; steps are integers >= 0")
        if len(set(self.trajectory.values())) < len(self.trajectory):
            raise ReachlensError(f"trajectory={self.trajectory!r} gives two checkpoints the same step")

    @property
    def model_order(self) -> list[str]:
        """Every checkpoint in reading order: those of the pairs as the pairs name them, then the trajectory's
        by step, then any other as ``models`` gives them. Tables, figures and a reloaded study follow it (a
        run record's JSON keeps no key order)."""
        order: list[str] = []
        for name in [*(n for pair in self.pairs for n in pair),
                     *sorted(self.trajectory, key=self.trajectory.__getitem__), *self.models]:
            if name not in order:
                order.append(name)
        return order

    @property
    def paired_models(self) -> list[str]:
        """The checkpoints of the pairs, in :attr:`model_order` (all of them in a study without pairs): those the
        budget control extends and the pass@k chart draws (a trajectory-only checkpoint has its own figure)."""
        paired = {n for pair in self.pairs for n in pair}
        return [n for n in self.model_order if n in paired or not self.pairs]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["protocol"] = self.protocol.to_dict()
        d["pairs"] = [list(p) for p in self.pairs]
        d["control_temperatures"] = list(self.control_temperatures)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StudyPlan:
        """The plan of :meth:`to_dict` (a training study's run record holds it: its protocol, and the rest
        as its options); a field missing or of the wrong type is one line naming it."""
        _check_plan(d)
        d = dict(d)
        d["protocol"] = Protocol.from_dict(d["protocol"])
        d["pairs"] = tuple(tuple(p) for p in d["pairs"])
        d["control_temperatures"] = tuple(d.get("control_temperatures", ()))
        d["trajectory"] = {name: int(step) for name, step in d.get("trajectory", {}).items()}
        return cls(**d)


_NUMBER = (int, float)
_PLAN_TYPES: dict[str, tuple[tuple[type, ...], tuple[type, ...] | None]] = {
    # field: (its types, the types of its items or values; None: not a container)
    "models": ((dict,), (str,)), "pairs": ((list, tuple), (list, tuple)), "n": ((int, type(None)), None),
    "data": ((str, type(None)), None), "extended_k": ((int, type(None)), None), "native_formats": ((dict,), (str,)),
    "control_temperatures": ((list, tuple), _NUMBER), "length_max_new_tokens": ((int, type(None)), None),
    "truncation_margin": (_NUMBER, None), "trajectory": ((dict,), (int,)),
}
_REQUIRED = ("models", "pairs", "protocol")


def _check_plan(d: Any) -> None:
    """Refuse a stored plan whose fields are missing, unknown or of the wrong type, naming the first."""
    def bad(key: str, value: Any, want: str) -> ReachlensError:
        return ReachlensError(f"the study plan's {key} is {value!r}, not {want}; the study's run.json was damaged or "
                              "edited by hand: restore it from a copy")

    if not isinstance(d, dict):
        raise bad("record", d, "a mapping of its fields")
    for key in _REQUIRED:
        if key not in d:
            raise ReachlensError(f"the study plan lacks {key!r}; the study's run.json was damaged or edited by hand: "
                                 "restore it from a copy")
    unknown = sorted(set(d) - set(_PLAN_TYPES) - {"protocol"})
    if unknown:
        raise ReachlensError(f"the study plan has unknown fields {unknown}; known: {sorted(_PLAN_TYPES)}")
    for key, (types, items) in _PLAN_TYPES.items():
        value = d.get(key)
        if key not in d:
            continue
        if not isinstance(value, types) or isinstance(value, bool):
            raise bad(key, value, " or ".join("null" if t is type(None) else t.__name__ for t in types))
        inner = value.values() if isinstance(value, dict) else value if items is not None else ()
        for x in inner:
            if not isinstance(x, items) or isinstance(x, bool):
                raise bad(f"{key} item", x, " or ".join(t.__name__ for t in items))
    for pair in d["pairs"]:
        if len(pair) != 2 or not all(isinstance(x, str) for x in pair):
            raise bad("pair", pair, "two checkpoint names")
