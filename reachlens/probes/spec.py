"""Probe families and their spec strings: ``NAME[:key=value[:key=value...]]``.

A *probe* turns a question into a bank of candidate deployments under a stated budget; it is part of
every reachability claim (``O_K`` is reachable *under a probe*). Each family is a frozen dataclass whose
fields are its keys, registered in :data:`PROBES` by name. A spec string builds one:

>>> parse_probe("sampling:k=8:temperature=0.7").label
'sampling:k=8:temperature=0.7'
>>> parse_probe("graft:kind=zero,noise:layer=3").budget
2

Values: integers, numbers, names, ``true``/``false``, and comma-separated lists where a key takes
several (``kind=zero,noise``, ``alphas=-4,4``). A bad key or value is one line naming it and the keys
the family knows (:class:`~reachlens.errors.ReachlensError`).

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
from collections.abc import Callable
from typing import Any, ClassVar

from reachlens._registry import Registry
from reachlens.errors import ReachlensError

__all__ = ["PROBES", "Probe", "parse_probe", "register_probe"]


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

    @property
    def budget(self) -> int:
        """Candidates per question."""
        raise NotImplementedError

    @property
    def label(self) -> str:
        """The canonical spec: the family and every key that differs from its default, in field order."""
        parts = [self.family]
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.default is dataclasses.MISSING or value != f.default:
                parts.append(f"{f.name}={_format(value)}")
        return ":".join(parts)

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


def _int(text: str) -> int:
    return int(text)


def _float(text: str) -> float:
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


_PARSERS: dict[str, tuple[Callable[[str], Any], str]] = {
    "int": (_int, "an integer"),
    "float": (_float, "a finite number"),
    "str": (str, "a name"),
    "bool": (_bool, "true or false"),
    "int | None": (_optional(_int), "an integer (or none)"),
    "tuple[int, ...]": (_listed(_int), "a comma-separated list of integers"),
    "tuple[str, ...]": (_listed(str), "a comma-separated list of names"),
    "tuple[float, ...]": (_listed(_float), "a comma-separated list of numbers"),
}


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
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for pair in pairs:
        key, eq, text = pair.partition("=")
        if not eq or not key:
            raise ReachlensError(f"probe {spec!r}: {pair!r} is not key=value; write {name}:key=value[:key=value...]")
        if key not in fields:
            raise ReachlensError(f"probe {spec!r}: unknown key {key!r} for {name}; known: {', '.join(fields)}")
        if key in values:
            raise ReachlensError(f"probe {spec!r}: key {key!r} is given twice; give it once")
        parse, what = _PARSERS[str(fields[key].type)]
        try:
            values[key] = parse(text)
        except ValueError:
            raise ReachlensError(f"probe {spec!r}: {key}={text!r} must be {what}") from None
    missing = [k for k, f in fields.items() if f.default is dataclasses.MISSING and k not in values]
    if missing:
        raise ReachlensError(f"probe {spec!r}: {name} needs {', '.join(f'{k}=...' for k in missing)}")
    return cls(**values)
