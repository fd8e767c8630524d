"""A small name -> object registry shared by every plug-in family.

Registering a name twice raises; a failed lookup raises :class:`LookupError` naming the key and
listing the known ones (the convention of inspect_ai's ``_util/registry.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from reachlens.errors import ReachlensError, UnknownNameError

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Names to objects for one plug-in family (graders, tasks, strategies, ...).

    >>> r = Registry[int]("number")
    >>> r.register("one", 1)
    1
    >>> r["one"]
    1
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str, item: T) -> T:
        if name in self._items:
            raise ReachlensError(f"{self.kind} {name!r} is already registered; pick another name")
        self._items[name] = item
        return item

    def decorator(self, name: str) -> Callable[[T], T]:
        """``@registry.decorator("name")`` registers the decorated object under ``name``."""

        def wrap(item: T) -> T:
            return self.register(name, item)

        return wrap

    def __getitem__(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "(none)"
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def names(self) -> list[str]:
        return sorted(self._items)
