"""Probe families and their spec strings: ``NAME[:key=value[:key=value...]]``.

A *probe* turns a question into a bank of candidate deployments under a stated budget; it is part of
every reachability claim (``O_K`` is reachable *under a probe*). Each family is a frozen dataclass whose
fields are its keys, registered in :data:`PROBES` by name. A spec string builds one:

>>> parse_probe("sampling:k=8:temperature=0.7").label
'sampling:k=8:temperature=0.7'
>>> parse_probe("graft:kind=zero,noise:layer=3").budget
2

Values: integers, numbers (ASCII digits: ``k=١٢`` is refused, not read as 12), names, ``true``/``false``,
and comma-separated lists where a key takes several (``kind=zero,noise``, ``alphas=-4,4``). The base class owns what
every family shares (:meth:`Probe.__post_init__`, which no family overrides): a ``seed`` is one of 64 bits, as the
protocol's, and ``None`` means the run's (:meth:`Probe.run_seed`, the one seed rule); a ``k`` is at least 1. A family
adds its own checks in :meth:`Probe.validate`. A bad key or value is one line naming it and the keys the family knows
(:class:`~reachlens.errors.ReachlensError`). A budget is arithmetic (:attr:`Probe.budget` builds no candidate), so
a run bounds its rows before anything is made (:class:`~reachlens.probes.ProbeJob`).

Every probe is answer-blind (nothing it does reads the gold answer) and deterministic given (seed,
question, candidate index). A probe's ``label`` is its canonical spec (its family and every key that
differs from the default, in field order): the name it carries in every table. Activation probes
(``intervention = True``: grafts, embedding noise, steering) change the model's computation; their
reach is reported apart from the decoding probes' (sampling, routes), never pooled into an unnamed
"reachable".
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from typing import Any, ClassVar

from reachlens._registry import Registry
from reachlens.errors import ReachlensError
from reachlens.protocol import SEED_RANGE

__all__ = ["PROBES", "Probe", "families_help", "keys_of", "parse_probe", "register_probe"]


class Probe:
    """The base of every probe family (a mixin: each family is a frozen dataclass of its keys).

    A family decodes through its own methods: a decoding family is a unit of its run itself (``slices``, ``decode``,
    ``expected``: :class:`~reachlens.probes.decode.Decoder`); an activation family derives from
    :class:`~reachlens.probes.activation.ArmProbe` (``candidates``, ``hooks``). Register it with
    :func:`register_probe`."""

    family: ClassVar[str]
    """The family's name (the spec's NAME)."""
    intervention: ClassVar[bool]
    """True for an activation probe (it changes the model's computation): reported apart, always labelled."""
    example: ClassVar[str]
    """A spec of the family that parses (``reachlens probe --help`` shows it; the tests build the family from it)."""
    seed: int | None
    """Every family's key: the seed of what it draws (None: the run's, :meth:`run_seed`)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__post_init__" in vars(cls):
            raise TypeError(f"probe family {cls.__name__} overrides __post_init__; put its checks in validate() "
                            "(the base class's __post_init__ checks the seed and k of every family, then calls it)")

    @property
    def budget(self) -> int:
        """Candidates per question."""
        raise NotImplementedError

    @property
    def label(self) -> str:
        """The canonical spec: the family and every key that differs from its default, in field order."""
        parts = [self.family]
        for f in keys_of(type(self)):
            value = getattr(self, f.name)
            if f.default is dataclasses.MISSING or value != f.default:
                parts.append(f"{f.name}={_format(value)}")
        return ":".join(parts)

    def __post_init__(self) -> None:
        """What every family checks, before its own :meth:`validate`: a seed of 64 bits, as the protocol's
        (:data:`~reachlens.protocol.SEED_RANGE`), and a ``k`` of at least 1 where the family has one."""
        seed = getattr(self, "seed", None)
        if seed is not None and not SEED_RANGE[0] <= seed < SEED_RANGE[1]:
            raise ReachlensError(f"{self.family} seed={seed!r} is beyond 64 bits; use a seed from -2**63 to 2**63 - 1")
        k = getattr(self, "k", 1)
        if k < 1:
            raise ReachlensError(f"{self.family} k={k!r} must be >= 1")
        self.validate()

    def validate(self) -> None:
        """The family's own checks of its keys (one line naming the bad value and the fix). None, by default."""

    def run_seed(self, protocol: Any) -> int:
        """The seed this probe draws with under ``protocol``: its own, else the run's (``protocol.seed``)."""
        return protocol.seed if self.seed is None else self.seed

    def arms(self) -> list[str]:
        """The names of the arms this probe's candidates carry in the bank (what a union's ``arm:NAME`` names): a
        decoding probe's candidates carry its label."""
        return [self.label]

    def read_inputs(self) -> tuple[Probe, dict[str, str]]:
        """Read what this probe takes from outside its spec (a file), once per run, in the run's driver: the probe
        holding what it read (what travels to the workers) and the identity of what it read, ``{path: SHA-256}``,
        recorded in the run's identity (a resume with another file is refused). Nothing, by default."""
        return self, {}

    def check_task(self, task, protocol) -> None:
        """Refuse, before any model loads or any directory is written, what this probe cannot do on ``task`` under
        ``protocol`` (the run's driver calls it once). Nothing, by default."""

    def check(self, model, protocol) -> None:
        """Refuse, before anything runs, what this probe cannot do on ``model`` under ``protocol``."""


PROBES: Registry[type] = Registry("probe family")
"""Family name -> its :class:`Probe` class."""


def register_probe(cls: type) -> type:
    """Class decorator: register a :class:`Probe` dataclass under its ``family``."""
    PROBES.register(cls.family, cls)
    return cls


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(_format(v) for v in value)
    return str(value)


def keys_of(cls: type) -> list[dataclasses.Field]:
    """The keys of a family's spec: its dataclass fields a spec sets (not what it holds once its inputs are read)."""
    return [f for f in dataclasses.fields(cls) if f.init]


_INTEGER = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _int(text: str) -> int:
    if not _INTEGER.fullmatch(text):  # int() takes any script's digits, '_' and spaces: a spec is ASCII
        raise ValueError(text)
    return int(text)


def _float(text: str) -> float:
    if not _NUMBER.fullmatch(text):
        raise ValueError(text)
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise ValueError(text)


def _optional(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    return lambda text: None if text.lower() == "none" else parse(text)


def _listed(parse: Callable[[str], Any]) -> Callable[[str], tuple]:
    def items(text: str) -> tuple:
        values = tuple(parse(x.strip()) for x in text.split(","))
        if not values or any(x == "" for x in text.split(",")):
            raise ValueError(text)
        return values

    return items


_PARSERS: dict[str, tuple[Callable[[str], Any], str, str]] = {
    "int": (_int, "an integer (digits 0-9)", "INT"),
    "float": (_float, "a finite number (digits 0-9, e.g. 0.5 or 1e-3)", "NUM"),
    "str": (str, "a name", "NAME"),
    "bool": (_bool, "true or false", "true|false"),
    "int | None": (_optional(_int), "an integer (digits 0-9) or none", "INT|none"),
    "tuple[int, ...]": (_listed(_int), "a comma-separated list of integers (digits 0-9)", "INT,..."),
    "tuple[str, ...]": (_listed(str), "a comma-separated list of names", "NAME,..."),
    "tuple[float, ...]": (_listed(_float), "a comma-separated list of numbers (digits 0-9)", "NUM,..."),
}
"""A key's type (as its field states it) -> how a spec's text is read, what it must be (for a refusal), and how
``reachlens probe --help`` shows it."""


def parse_probe(spec: str) -> Probe:
    """The probe a spec string names: ``NAME[:key=value[:key=value...]]``.

    Raises:
        ReachlensError: an unknown family, key or a value of the wrong type, a missing required key, a
            key given twice (one line naming it and how to fix it).

    >>> parse_probe("embedding_noise:ratio=0.2:k=3").label
    'embedding_noise:ratio=0.2:k=3'
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ReachlensError(f"probe spec {spec!r} is empty; write NAME[:key=value...], e.g. 'sampling:k=6'")
    name, *pairs = spec.strip().split(":")
    if name not in PROBES:
        raise ReachlensError(f"unknown probe family {name!r} in {spec!r}; known: {', '.join(PROBES.names())}")
    cls = PROBES[name]
    fields = {f.name: f for f in keys_of(cls)}
    values: dict[str, Any] = {}
    for pair in pairs:
        key, eq, text = pair.partition("=")
        if not eq or not key:
            raise ReachlensError(f"probe {spec!r}: {pair!r} is not key=value; write {name}:key=value[:key=value...]")
        if key not in fields:
            raise ReachlensError(f"probe {spec!r}: unknown key {key!r} for {name}; known: {', '.join(fields)}")
        if key in values:
            raise ReachlensError(f"probe {spec!r}: key {key!r} is given twice; give it once")
        parse, what, _ = _PARSERS[str(fields[key].type)]
        try:
            values[key] = parse(text)
        except ValueError:
            raise ReachlensError(f"probe {spec!r}: {key}={text!r} must be {what}") from None
    missing = [k for k, f in fields.items() if f.default is dataclasses.MISSING and k not in values]
    if missing:
        raise ReachlensError(f"probe {spec!r}: {name} needs {', '.join(f'{k}=...' for k in missing)}")
    return cls(**values)


def families_help() -> str:
    """Every registered family in words, for ``reachlens probe --help``: its name, what it is, an example spec and
    each key with its default and help (from the dataclass fields' metadata, as :func:`parse_probe` reads them)."""
    lines = ["probe families (a spec: NAME[:key=value[:key=value...]]; lists comma-separated; a bad key names the "
             "keys its family knows):"]
    for name in PROBES.names():
        cls = PROBES[name]
        summary = re.sub(r" \(``[^`]*``\)", "", (cls.__doc__ or "").strip().splitlines()[0]).replace("``", "").rstrip(".")
        kind = "an intervention" if cls.intervention else "a decoding probe"
        lines.append(f"  {name}: {summary} ({kind})")
        lines.append(f"      e.g. {cls.example}")
        for f in keys_of(cls):
            default = ("required" if f.default is dataclasses.MISSING
                       else f"default {'none' if f.default is None else _format(f.default)}")
            lines.append(f"      {f.name}={_PARSERS[str(f.type)][2]}  {f.metadata.get('help', '')} ({default})")
    return "\n".join(lines)
