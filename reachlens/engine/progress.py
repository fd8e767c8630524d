"""The decode's progress as it happens: each :func:`~reachlens.engine.generate` call says when it starts and, after
every step, how many tokens it decoded and how many rows finished, to whoever listens in this process (the CLI's
progress line, :mod:`reachlens.cli._progress`). A job's own progress counts finished questions, which a batch
holding every question reports only at its end; this moves with every token.

Nothing listens by default (a step costs one empty loop). A decode in another process (a worker of a process pool
or a Ray actor) reports to listeners there: its job's progress still reaches the caller slice by slice.

>>> with listening(listener):  # doctest: +SKIP
...     generate(model, prompts, rows, protocol)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

__all__ = ["DecodeListener", "decode_started", "decode_step", "listening"]


@runtime_checkable
class DecodeListener(Protocol):
    """What a listener is told: a decode of ``rows`` rows of at most ``max_new_tokens`` tokens each starts; a step
    decoded ``tokens`` tokens (one per live row), finished ``finished`` rows and freed ``unused`` tokens of their
    budget (rows that stopped before ``max_new_tokens``)."""

    def decode(self, rows: int, max_new_tokens: int) -> None: ...

    def step(self, tokens: int, finished: int, unused: int) -> None: ...


_LISTENERS: list[DecodeListener] = []


@contextmanager
def listening(listener: DecodeListener) -> Iterator[DecodeListener]:
    """Tell ``listener`` of every decode in this process while the block runs."""
    _LISTENERS.append(listener)
    try:
        yield listener
    finally:
        _LISTENERS.remove(listener)


def decode_started(rows: int, max_new_tokens: int) -> None:
    """A :func:`~reachlens.engine.generate` call starts (called by the engine)."""
    for listener in _LISTENERS:
        listener.decode(rows, max_new_tokens)


def decode_step(tokens: int, finished: int, unused: int) -> None:
    """A decoding step ended (called by the engine)."""
    for listener in _LISTENERS:
        listener.step(tokens, finished, unused)
