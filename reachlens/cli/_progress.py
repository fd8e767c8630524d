"""The progress line of a command that decodes: what is done of the run (questions, evaluations) and, moving with
every step of the engine (:mod:`reachlens.engine.progress`), the tokens decoded and rows finished, the rate over the
last seconds and how long the decode in flight has left at that rate (at most: rows that stop early shorten it).

On a terminal the line is redrawn in place (at most every ``redraw`` seconds, after ``delay``: a refusal before
anything runs draws nothing); anywhere else (a log, a pipe) a plain line is printed every ``every`` seconds of
work (none for a run shorter than that). A run that ends leaves one closing line.

>>> with RunProgress("audit zoo:base", "q") as bar:  # doctest: +SKIP
...     audit(..., progress=bar.done)
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from time import monotonic
from typing import Any

from reachlens.engine.progress import listening
from reachlens.escape import visible

__all__ = ["EVERY", "RunProgress", "Tally"]

EVERY = 30.0
"""Seconds between the plain progress lines written where the output is not a terminal."""
WINDOW = 20.0
"""Seconds of decoding the rate is measured over."""


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


class RunProgress:
    """The progress line of one run: ``done(done, total)`` as the run reports finished units, the engine's steps
    as it decodes (while the ``with`` block runs)."""

    def __init__(self, label: str, unit: str = "q", *, stream: Any = None, every: float | int = EVERY,
                 redraw: float | int = 0.5, delay: float | int = 0.5, clock: Callable[[], float] | None = None) -> None:
        self.label, self.unit = visible(label), unit
        self.stream = stream or sys.stderr
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every, self.redraw, self.delay, self.clock = every, redraw, delay, clock or monotonic
        self.units = (0, None)
        self.tokens = self.rows = self.finished = self.left = 0
        self._recent: deque[tuple[float, int]] = deque()
        self._start = self._shown = 0.0
        self._drawn = False
        self._listening = None

    def __enter__(self) -> RunProgress:
        self._start = self._shown = self.clock()
        self._listening = listening(self)
        self._listening.__enter__()
        return self

    def __exit__(self, kind, *exc) -> None:
        self._listening.__exit__(kind, *exc)
        if kind is None and (self.rows or self.units[0]):  # one closing line (a refusal: none, or the line as it was)
            self.stream.write(("\r" + self.line() + "\033[K\n") if self.live else self.line() + "\n")
        elif self._drawn and self.live:
            self.stream.write("\n")
        self.stream.flush()

    def done(self, done: int, total: int | None = None) -> None:
        """The run finished ``done`` of its ``total`` units (questions, evaluations)."""
        self.units = (int(done), total if total is None else int(total))
        self._tick(force=self.live)

    def write(self, text: str) -> None:
        """Print ``text`` (a message of the run, on stdout) above the line, which is drawn again below it."""
        if self._drawn and self.live:
            self.stream.write("\r\033[K")
            self.stream.flush()
        print(visible(text, newlines=True), flush=True)
        if self._drawn and self.live:
            self._tick(force=True)

    def decode(self, rows: int, max_new_tokens: int) -> None:
        self.rows += rows
        self.left += rows * max_new_tokens
        self._tick()

    def step(self, tokens: int, finished: int, unused: int) -> None:
        self.tokens += tokens
        self.finished += finished
        self.left = max(0, self.left - tokens - unused)
        self._recent.append((self.clock(), self.tokens))
        self._tick()

    def rate(self) -> float:
        """Tokens a second over the last :data:`WINDOW` seconds of decoding (0 before two steps)."""
        now = self.clock()
        while len(self._recent) > 2 and now - self._recent[0][0] > WINDOW:
            self._recent.popleft()
        if len(self._recent) < 2 or self._recent[-1][0] <= self._recent[0][0]:
            return 0.0
        return (self._recent[-1][1] - self._recent[0][1]) / (self._recent[-1][0] - self._recent[0][0])

    def line(self) -> str:
        """The progress as one line."""
        done, total = self.units
        # a run that reports no units (a sweep: one decode) shows its tokens alone
        parts = [] if self.units == (0, None) else [f"{done}/{total if total is not None else '?'} {self.unit}"]
        if self.rows:
            rate = self.rate()
            parts.append(f"{self.tokens:,} tokens, {self.finished:,}/{self.rows:,} rows done")
            if rate > 0:
                parts.append(f"{rate:,.0f} tok/s, decode left <= {_clock(self.left / rate)}")
        parts.append(f"{_clock(self.clock() - self._start)} elapsed")
        return f"{self.label}: " + ", ".join(parts)

    def _tick(self, force: bool = False) -> None:
        now = self.clock()
        if now - self._start < self.delay and not self._drawn:
            return
        wait = self.redraw if self.live else self.every
        if not force and self._drawn and now - self._shown < wait:
            return
        if not self.live and not self._drawn and now - self._start < self.every:
            return
        self._shown, self._drawn = now, True
        if self.live:
            self.stream.write("\r" + self.line() + "\033[K")
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()


class Tally:
    """The units done over several jobs that report apart (``tally(key, done, total)``, as the reruns of a control
    report theirs), told to ``done(done, total)`` summed."""

    def __init__(self, done: Callable[[int, int | None], None]) -> None:
        self._done, self._jobs = done, {}

    def __call__(self, key: Any, done: int, total: int) -> None:
        self._jobs[key] = (int(done), int(total))
        self._done(sum(d for d, _ in self._jobs.values()), sum(t for _, t in self._jobs.values()))
