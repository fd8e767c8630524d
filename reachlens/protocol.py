"""The protocol: the frozen description of how every question of an audit is probed.

O_K is protocol-bound: the reachable ceiling means something only for one set of questions, one
prompt format, one temperature, one budget K, one grader and one decode length. Two audits are
comparable only when their protocols are equal (the model aside); :meth:`Protocol.diff` names the
fields that differ, and every comparison in reachlens refuses unmatched protocols with that list.

Deployment is always greedy with the same prompt format, decode length and stop strings as the
samples: ``realized`` is the default deployment, ``reachable`` the K-sample probe.

It is the one decode spec of reachlens: the engine decodes by it (:func:`reachlens.engine.generate`
reads its length, temperature, top-p and stop strings), the audit probes by it, and the studies that
decode the deployment alone (routing, recognition) use its greedy case (:meth:`Protocol.greedy`:
``k=1``, ``temperature=0``) with their own options beside it. A run directory records it in
``run.json`` (:mod:`reachlens.store.run_dir`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import types
import typing
from dataclasses import dataclass
from typing import Any

from reachlens.errors import ReachlensError

__all__ = ["BACKENDS", "CHAT", "MIN_TEMPERATURE", "SEED_RANGE", "Protocol", "ProtocolMismatch", "chat_inner"]

BACKENDS = ("engine", "vllm")
"""Who draws the completions: reachlens' own engine (TransformerLens hooks live) or vLLM (no hooks)."""
MIN_TEMPERATURE = 1e-200
"""The smallest sampling temperature. The sampler divides float32 logits (``|l| <= 3.4e38``) by T in
float64 (largest value ``1.8e308``), so every ``l / T`` is finite for T above ``3.4e38 / 1.8e308 =
1.9e-270``; 1e-200 leaves room for the softmax's own subtraction of the largest logit. Below it ``l / T``
overflows, the distribution is NaN and every sample is the last token of the vocabulary."""
SEED_RANGE = (-(2**63), 2**63)
"""Seeds are 64-bit integers, as every random generator takes them."""


class ProtocolMismatch(ReachlensError):
    """Two results were made under different protocols (or models) and cannot be compared or merged."""

    def __init__(self, differences: dict[str, tuple[Any, Any]], what: str = "protocols differ", fix: str = "") -> None:
        self.differences = differences
        detail = "; ".join(f"{k}: {a!r} != {b!r}" for k, (a, b) in differences.items())
        super().__init__(f"{what} in {', '.join(differences)} ({detail})" + (f"; {fix}" if fix else ""))


CHAT = "chat"
"""The prompt format that renders a question with the model's chat template (``chat`` or ``chat:NAME``)."""


def chat_inner(prompt_format: str) -> str | None:
    """The task format a chat format wraps (``""``: the task's default), or None for a plain format.

    >>> chat_inner("chat"), chat_inner("chat:qa"), chat_inner("qa")
    ('', 'qa', None)
    """
    if prompt_format == CHAT:
        return ""
    if prompt_format.startswith(CHAT + ":"):
        return prompt_format[len(CHAT) + 1:]
    return None

MAX_STOP_CHARS = 1000
"""The longest stop string (a stop string is a marker such as ``"\\n\\nQuestion:"``; its table is built per
token of the vocabulary, so its length is bounded)."""
MAX_STOPS = 100
"""The most stop strings a protocol holds."""


def _check_stop(stop: tuple[str, ...]) -> None:
    """Refuse an empty stop string, a longer one than :data:`MAX_STOP_CHARS`, or more than :data:`MAX_STOPS`."""
    if any(not s for s in stop):
        raise ReachlensError(f"stop={stop!r} contains an empty string")
    longest = max(stop, key=len, default="")
    if len(longest) > MAX_STOP_CHARS:
        raise ReachlensError(f"a stop string of {len(longest):,} characters ({longest[:20]!r}...) is longer than "
                             f"{MAX_STOP_CHARS:,}; stop at a shorter marker")
    if len(stop) > MAX_STOPS:
        raise ReachlensError(f"{len(stop):,} stop strings are more than {MAX_STOPS}; give fewer")


@dataclass(frozen=True)
class Protocol:
    """How a question is probed: the deployment (greedy) and the K-sample reachability probe."""

    task: str
    """Task name (``arith``, ``gsm8k``, ...): the question set is part of the protocol."""
    split: str = "test"
    """Which split of the task."""
    k: int = 64
    """Budget: samples per question for the reachability probe."""
    temperature: float = 0.8
    """Sampling temperature of the probe (deployment is greedy)."""
    top_p: float = 1.0
    """Nucleus mass of the probe; 1.0 keeps the whole distribution."""
    max_new_tokens: int = 256
    """Decode length for deployment and samples alike."""
    prompt_format: str = "default"
    """Name of the task's prompt format; ``default`` is the task's own default; ``chat`` (``chat:NAME``)
    renders the default format's (NAME's) text as a user turn of the model's chat template."""
    seed: int = 0
    """Seed of the sample stream: sample j of question q depends on (seed, q, j) only."""
    stop: tuple[str, ...] | None = None
    """Stop strings; None means the task's own (``("\\n",)`` for arith)."""
    grader: str | None = None
    """Grader name; None means the task's own."""
    backend: str = "engine"
    """Who draws the completions (:data:`BACKENDS`). Part of the run's identity: two backends honour the
    same per-sample seeds with different random streams, so their samples differ (a comparison across
    backends is a control, ``compare(..., allow=("backend",))``)."""
    system: str | None = None
    """The system turn of a chat prompt format (``prompt_format="chat"``); None keeps the chat template's
    own default. Only with a chat format."""
    chat_template: str | None = None
    """``sha256:...`` of the chat template a chat format renders with (:mod:`reachlens.tasks.chat`), filled
    in when the protocol meets the model (:func:`~reachlens.tasks.chat.bind_chat`): audits under
    different templates are comparable only when allowed (``allow=("chat_template",)``). None for a plain
    format."""

    def __post_init__(self) -> None:
        if isinstance(self.stop, list):
            object.__setattr__(self, "stop", tuple(self.stop))
        _check_types(type(self), {f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
        if self.k < 1:
            raise ReachlensError(f"k={self.k!r} must be an integer >= 1 (the number of samples per question)")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ReachlensError(f"temperature={self.temperature!r} must be a finite number >= 0")
        if 0 < self.temperature < MIN_TEMPERATURE:
            raise ReachlensError(
                f"temperature={self.temperature!r} is below the smallest sampling temperature, which is "
                f"{MIN_TEMPERATURE!r} (below it logits / temperature overflows); use temperature=0 with k=1 for "
                "greedy decoding"
            )
        if not SEED_RANGE[0] <= self.seed < SEED_RANGE[1]:
            raise ReachlensError(f"seed={self.seed!r} must be an integer of 64 bits (-2**63 to 2**63 - 1)")
        if self.temperature == 0 and self.k > 1:
            raise ReachlensError(
                f"temperature=0 with k={self.k}: greedy samples are all identical; use temperature > 0 or k=1"
            )
        if not 0 < self.top_p <= 1:
            raise ReachlensError(f"top_p={self.top_p!r} must lie in (0, 1]")
        if self.max_new_tokens < 1:
            raise ReachlensError(f"max_new_tokens={self.max_new_tokens!r} must be an integer >= 1")
        if self.stop is not None:
            _check_stop(self.stop)
        if self.backend not in BACKENDS:
            raise ReachlensError(f"backend={self.backend!r} is not a backend; use one of {', '.join(BACKENDS)}")
        if (self.system is not None or self.chat_template is not None) and chat_inner(self.prompt_format) is None:
            what = "system" if self.system is not None else "chat_template"
            raise ReachlensError(f"{what}= goes with a chat prompt format, not prompt_format={self.prompt_format!r}; "
                                 "use prompt_format='chat'")

    # --- identity --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Every field, as JSON holds it (``stop`` a list): what ``run.json`` records and :attr:`hash` digests."""
        d = dataclasses.asdict(self)
        d["stop"] = None if self.stop is None else list(self.stop)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Protocol:
        if not isinstance(d, dict):
            raise ReachlensError(f"a protocol is a mapping of its fields, not {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ReachlensError(f"unknown protocol fields {sorted(unknown)}; known: {sorted(known)}")
        d = dict(d)
        if isinstance(d.get("stop"), list):
            d["stop"] = tuple(d["stop"])
        _check_types(cls, d)  # before the constructor: a hand-edited record is one line, whatever it holds
        return cls(**d)

    @property
    def hash(self) -> str:
        """A stable 16-hex-digit hash of every field (canonical JSON, SHA-256)."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def diff(self, other: Protocol, ignore: tuple[str, ...] = ()) -> dict[str, tuple[Any, Any]]:
        """Fields whose values differ, as ``{field: (self's, other's)}``."""
        a, b = self.to_dict(), other.to_dict()
        return {k: (a[k], b[k]) for k in a if k not in ignore and a[k] != b[k]}

    def require_match(self, other: Protocol, ignore: tuple[str, ...] = ()) -> None:
        """Raise :class:`ProtocolMismatch` naming every differing field."""
        d = self.diff(other, ignore)
        if d:
            raise ProtocolMismatch(d)

    @classmethod
    def greedy(cls, task: str, *, max_new_tokens: int = 96, **fields: Any) -> Protocol:
        """The deployment alone: one greedy decode per question (``k=1``, ``temperature=0``).

        The protocol of the studies that decode only the deployment (routing, where each route is
        decoded greedily, and recognition's generation side).

        >>> Protocol.greedy("arith", max_new_tokens=32).is_greedy
        True
        """
        return cls(task, k=1, temperature=0.0, max_new_tokens=max_new_tokens, **fields)

    @classmethod
    def deployment(cls, task, **fields: Any) -> Protocol:
        """The greedy deployment of ``task`` (a :class:`~reachlens.tasks.Task`): :meth:`greedy` with the task's own
        decode length (256 when it names none), unless ``fields`` say otherwise. The default of every study that
        decodes the deployment alone (a probe run, routing, recognition's generation side).

        >>> Protocol.deployment(load_task("arith", n=1)).max_new_tokens  # doctest: +SKIP
        96
        """
        fields.setdefault("max_new_tokens", task.max_new_tokens or 256)
        return cls.greedy(task.name.split(":")[0], **fields)

    @property
    def is_greedy(self) -> bool:
        """Whether this protocol decodes the deployment alone (``k=1`` at ``temperature=0``)."""
        return self.k == 1 and self.temperature == 0

    def with_k(self, k: int) -> Protocol:
        """The same protocol with budget ``k`` (the budget control's K vs 2K)."""
        return dataclasses.replace(self, k=k)

    # --- resolution against a task ---------------------------------------------------------------
    def resolved(self, task) -> Protocol:
        """Fill ``default`` / None fields from ``task`` so that the stored protocol is explicit."""
        # a generic loader names its task after the file ("jsonl:questions"); its protocol says "jsonl"
        if task.name != self.task and not task.name.startswith(f"{self.task}:"):
            raise ReachlensError(f"protocol is for task {self.task!r} but the task given is {task.name!r}")
        inner = chat_inner(self.prompt_format)
        fmt = self.prompt_format if inner is None else inner or "default"
        fmt = task.default_format if fmt == "default" else fmt
        task.format(fmt)  # raises LookupError naming the known formats
        return dataclasses.replace(
            self,
            prompt_format=fmt if inner is None else f"{CHAT}:{fmt}",
            stop=tuple(task.stop) if self.stop is None else self.stop,
            grader=task.grader if self.grader is None else self.grader,
        )


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _type_problem(value: Any, hint: Any) -> str | None:
    """What ``value`` should be when it does not match the annotation ``hint`` (None when it does, or
    when ``hint`` is not one of the plain types a protocol field has)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        problems = [_type_problem(value, arg) for arg in args]
        return None if None in problems else " or ".join(p for p in problems if p)
    if hint is type(None):
        return None if value is None else "null"
    if hint is bool:
        return None if isinstance(value, bool) else "true or false"
    if hint is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if hint is float:
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "a number"
    if hint is str:
        return None if isinstance(value, str) else "a string"
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        if isinstance(value, tuple) and all(_type_problem(v, args[0]) is None for v in value):
            return None
        return f"a list of {(_type_problem(object(), args[0]) or 'values').removeprefix('a ')}s"
    return None


def _check_types(cls: type, fields: dict[str, Any]) -> None:
    """Raise a one-line :class:`ReachlensError` naming the first field of ``fields`` whose value does not
    have the type ``cls`` declares for it (a protocol read from a hand-edited record, or built in Python)."""
    hints = _field_types(cls)
    for name, value in fields.items():
        problem = _type_problem(value, hints[name]) if name in hints else None
        if problem:
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            raise ReachlensError(f"{name}={shown} must be {problem}; fix the protocol's {name!r} field")
