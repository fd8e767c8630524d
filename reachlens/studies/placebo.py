"""Placebo demonstrations for training-based elicitation (issue 57, item 6): what else than correct worked
solutions unlocks a model.

A fine-tune on a few correct demonstrations unlocks a password-locked model (Greenblatt et al., arXiv
2405.19550); but if demonstrations that teach nothing right unlock it too, the uplift measures the lock's
fragility, not the skill the demonstrations show. Each placebo is a demonstration set made from the *same* drawn
train questions as the gold run (the elicitation split, :mod:`reachlens.studies.elicitation_split`), only the
targets changed:

* ``shuffled``: the worked solutions shuffled among the questions, a permutation with no fixed point (Sattolo's
  cycle, seeded), so no question keeps its own target; needs at least 2 demonstrations;
* ``wrong_values``: the right format and start, wrong values: the worked solution's first step kept, every number
  after it moved by a seeded nonzero offset (the same number moved alike throughout, so the answer after ``####``
  is the chain's last, changed, value and never the gold);
* ``weak``: a weaker model's own greedy outputs on the same prompts (``weak_model``: its deployed text under the
  run's protocol, k = 1);
* ``answer_only``: the gold answer without its worked steps (`` #### 197`` for a solution in that form).

The inference is the interaction organism x placebo against the matched never-locked twin (the model's uplift
minus the twin's under the same placebo), not any placebo's uplift alone: :func:`control_role` says whether the
control is that twin or an unmatched reference.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reachlens.errors import ReachlensError
from reachlens.models.loading import model_identity, resolve_spec
from reachlens.protocol import Protocol
from reachlens.tasks.base import Question, Task
from reachlens.tasks.fewshot import demonstration_target

__all__ = ["PLACEBOS", "Placebo", "answer_only_target", "control_role", "cyclic_derangement", "make_placebo",
           "wrong_values_target"]

PLACEBOS = {
    "shuffled": "the worked solutions shuffled among the questions (no question keeps its own)",
    "wrong_values": "the right format and first step, every number after it changed (a wrong answer)",
    "weak": "the weak model's own greedy outputs on the same prompts",
    "answer_only": "the gold answer without its worked steps",
}
"""Each placebo's name and what its demonstrations' targets are."""


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256("\x1f".join(map(str, ("placebo", *parts))).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


def cyclic_derangement(n: int, seed: int) -> list[int]:
    """A seeded permutation of ``range(n)`` with no fixed point, one cycle through all (Sattolo's algorithm; not
    uniform over derangements, unlike :func:`reachlens.studies.lucky_null.derangement`, which the null needs)."""
    if n < 2:
        raise ReachlensError(f"placebo 'shuffled' needs at least 2 demonstrations to shuffle, got {n}; use demos >= 2")
    perm, rng = list(range(n)), _rng("shuffled", seed, n)
    for i in range(n - 1, 0, -1):
        j = rng.randrange(i)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def _solution(q: Question, kind: str) -> str:
    if not q.solution:
        raise ReachlensError(f"placebo {kind!r} needs worked solutions; question {q.question_id!r} has none "
                             "(use a task with solutions: arith, arith_hard, gsm8k)")
    return demonstration_target(q)


def wrong_values_target(q: Question, seed: int) -> str:
    """The worked solution with its first step kept and every number after it moved by a seeded nonzero offset of
    1-9 (the same number alike; never below 0, so each changed number differs from the gold's)."""
    text = _solution(q, "wrong_values")
    cut = min(i for i in (text.find(";"), text.find("####"), text.find("\n"), len(text)) if i >= 0)
    rng, moved = _rng("wrong_values", seed, q.question_id), {}

    def move(m: re.Match) -> str:
        if m.group() not in moved:
            old, step = int(m.group()), rng.randint(1, 9)
            moved[m.group()] = str(old - step if old - step >= 0 and rng.random() < 0.5 else old + step)
        return moved[m.group()]

    return text[:cut] + re.sub(r"\d+", move, text[cut:])


def answer_only_target(q: Question) -> str:
    """The gold answer alone, in the solution's answer form (`` #### 197`` after a ``####`` solution)."""
    text = _solution(q, "answer_only")
    return f" #### {q.gold}" if "####" in text else f" {q.gold}"


@dataclass(frozen=True)
class Placebo:
    """A placebo of :data:`PLACEBOS` and what it is made from (the weak model's outputs for ``weak``)."""

    kind: str
    seed: int = 0
    weak_model: str | None = None
    weak_texts: Mapping[str, str] = field(default_factory=dict, repr=False)
    """``weak``: the weak model's greedy text of each drawn question, by question id."""

    def __post_init__(self) -> None:
        if self.kind not in PLACEBOS:
            raise ReachlensError(f"placebo {self.kind!r} is not one of {', '.join(PLACEBOS)}")
        if (self.kind == "weak") != (self.weak_model is not None):
            raise ReachlensError("placebo 'weak' needs a weak model (--weak-model) and no other placebo takes one; "
                                 f"got placebo {self.kind!r} with weak model {self.weak_model!r}")

    def demonstrations(self, demos: Sequence[Question]) -> tuple[Question, ...]:
        """``demos`` with the placebo's targets as their solutions (the fine-tune trains on those)."""
        if self.kind == "shuffled":
            perm = cyclic_derangement(len(demos), self.seed)
            targets = [demonstration_target(demos[j]) for j in perm]
        elif self.kind == "wrong_values":
            targets = [wrong_values_target(q, self.seed) for q in demos]
        elif self.kind == "answer_only":
            targets = [answer_only_target(q) for q in demos]
        else:
            targets = [self.weak_texts[q.question_id] for q in demos]
        return tuple(dataclasses.replace(q, solution=t if t[:1].isspace() else " " + t) for q, t in zip(demos, targets))

    def record(self) -> dict[str, Any]:
        """The run record's entry: the kind and seed, and the weak model's identity (a resume with another is refused)."""
        source = None if self.weak_model is None else dataclasses.asdict(model_identity(self.weak_model))
        return {"kind": self.kind, "seed": self.seed, "what": PLACEBOS[self.kind], "weak_model": source}


def make_placebo(kind: str | None, *, seed: int, weak_model: str | None, protocol: Protocol, pool: Task,
                 picked: Sequence[Question]) -> Placebo | None:
    """The placebo of a run (None: the gold demonstrations); ``weak`` decodes the weak model's greedy outputs on
    ``picked`` under ``protocol`` (k = 1, this process)."""
    if kind is None:
        if weak_model is not None:
            raise ReachlensError(f"weak model {weak_model!r} is only for placebo 'weak'; add --placebo weak")
        return None
    if kind != "weak" or weak_model is None:
        return Placebo(kind, seed, weak_model)
    from reachlens.execution import ExecConfig
    from reachlens.studies.audit_job import audit

    if not resolve_spec(weak_model)[1]:
        raise ReachlensError(f"weak model {weak_model!r} is not a local checkpoint folder (zoo:NAME or a path)")
    greedy = audit(weak_model, pool.only([q.question_id for q in picked]), dataclasses.replace(protocol, k=1),
                   exec_config=ExecConfig())
    return Placebo(kind, seed, weak_model, dict(zip(greedy.questions["question_id"], greedy.questions["deployed_text"])))


def control_role(spec: str) -> str:
    """``matched twin`` when the control's card says it is a never-locked twin (``"twin": true``), else
    ``unmatched reference`` (``zoo:base``: another model in all but its architecture)."""
    folder, local = resolve_spec(spec)
    card = Path(folder) / "training.json" if local else None
    twin = card is not None and card.is_file() and json.loads(card.read_text()).get("twin") is True
    return "matched twin" if twin else "unmatched reference"
