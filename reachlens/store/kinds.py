"""The registry of kinds of run: kind name -> the :class:`~reachlens.store.Run` class that reads and writes it.

Each kind registers its class where the class is defined (``@register_kind`` on a class whose ``kind`` names
it); :mod:`reachlens` imports every module that defines one, so the registry is complete whenever any part of
reachlens is imported. See :mod:`reachlens.store.run` for how to add a kind.
"""

from __future__ import annotations

from typing import Any

from reachlens._registry import Registry

__all__ = ["RUN_KINDS", "register_kind"]

RUN_KINDS: Registry[Any] = Registry("kind of run")
"""Kind name -> its :class:`~reachlens.store.Run` class."""


def register_kind(cls: Any) -> Any:
    """Class decorator: register ``cls`` (a :class:`~reachlens.store.Run` with a ``kind``) as its kind's class."""
    RUN_KINDS.register(cls.kind, cls)
    return cls
