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

from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from time import monotonic
from typing import Protocol, runtime_checkable

__all__ = ["WINDOW", "DecodeCount", "DecodeListener", "clock_text", "decode_started", "decode_step", "listening"]

WINDOW = 20.0
"""Seconds of decoding a :class:`DecodeCount`'s rate is measured over."""


@runtime_checkable
class DecodeListener(Protocol):
    """What a listener is told: a decode of ``rows`` rows of at most ``max_new_tokens`` tokens each starts; a step
    decoded ``tokens`` tokens (one per live row), finished ``finished`` rows and freed ``unused`` tokens of their
    budget (rows that stopped before ``max_new_tokens``)."""

    def decode(self, rows: int, max_new_tokens: int) -> None: ...

    def step(self, tokens: int, finished: int, unused: int) -> None: ...


def clock_text(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` from an hour) of ``seconds``."""
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


class DecodeCount:
    """A listener that counts: tokens decoded, rows started and finished, the budget the started rows have left
    (``left``) and the rate over the last :data:`WINDOW` seconds of ``clock``."""

    def __init__(self, clock: Callable[[], float] | None = None, then: Callable[[], None] | None = None) -> None:
        """``then``: called after each event is counted (a progress line that redraws)."""
        self.clock, self.then = clock or monotonic, then or (lambda: None)
        self.tokens = self.rows = self.finished = self.left = 0
        self._recent: deque[tuple[float, int]] = deque()

    def decode(self, rows: int, max_new_tokens: int) -> None:
        self.rows += rows
        self.left += rows * max_new_tokens
        self.then()

    def step(self, tokens: int, finished: int, unused: int) -> None:
        self.tokens += tokens
        self.finished += finished
        self.left = max(0, self.left - tokens - unused)
        self._recent.append((self.clock(), self.tokens))
        self.then()

    def rate(self) -> float:
        """Tokens a second over the last :data:`WINDOW` seconds of decoding (0 before two steps)."""
        now = self.clock()
        while len(self._recent) > 2 and now - self._recent[0][0] > WINDOW:
            self._recent.popleft()
        if len(self._recent) < 2 or self._recent[-1][0] <= self._recent[0][0]:
            return 0.0
        return (self._recent[-1][1] - self._recent[0][1]) / (self._recent[-1][0] - self._recent[0][0])

    def describe(self) -> list[str]:
        """The count as parts of a line (none before any decode started): tokens and rows, the rate and the time
        the started decodes have left at that rate (at most: rows that stop early shorten it)."""
        if not self.rows:
            return []
        rate = self.rate()
        parts = [f"{self.tokens:,} tokens, {self.finished:,}/{self.rows:,} rows done"]
        if rate > 0:
            parts.append(f"{rate:,.0f} tok/s, decode left <= {clock_text(self.left / rate)}")
        return parts


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
