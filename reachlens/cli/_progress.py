"""The progress line of a command that decodes: what is done of the run (questions, evaluations) and, moving with
every step of the engine (:mod:`reachlens.engine.progress`), the tokens decoded and rows finished, the rate over the
last seconds and how long the decode in flight has left at that rate (at most: rows that stop early shorten it),
and, once a unit finished in this process, the run's ETA at the rate units finish (a resumed run's earlier units
apart).

On a terminal the line is redrawn in place (at most every ``redraw`` seconds, after ``delay``: a refusal before
anything runs draws nothing); anywhere else (a log, a pipe) a plain line is printed every ``every`` seconds of
work (none for a run shorter than that). A run that ends leaves one closing line.

>>> with RunProgress("audit zoo:base", "q") as bar:  # doctest: +SKIP
...     audit(..., progress=bar.done)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from time import monotonic
from typing import Any

from reachlens.engine.progress import DecodeCount, clock_text, listening
from reachlens.escape import visible

__all__ = ["EVERY", "RunProgress", "Tally"]

EVERY = 30.0
"""Seconds between the plain progress lines written where the output is not a terminal."""
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
        self._first: tuple[float, int] | None = None  # (when, units) the run first reported: a resumed run's start
        self.count = DecodeCount(self.clock, then=self._tick)
        self.decode, self.step = self.count.decode, self.count.step  # a listener of the engine's decodes
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
        if kind is None and (self.count.rows or self.units[0]):  # one closing line (a refusal: none, or the line as it was)
            self.stream.write(("\r" + self.line() + "\033[K\n") if self.live else self.line() + "\n")
        elif self._drawn and self.live:
            self.stream.write("\n")
        self.stream.flush()

    def done(self, done: int, total: int | None = None) -> None:
        """The run finished ``done`` of its ``total`` units (questions, evaluations)."""
        self.units = (int(done), total if total is None else int(total))
        if self._first is None:
            self._first = (self.clock(), self.units[0])
        self._tick(force=self.live)

    def write(self, text: str) -> None:
        """Print ``text`` (a message of the run, on stdout) above the line, which is drawn again below it."""
        if self._drawn and self.live:
            self.stream.write("\r\033[K")
            self.stream.flush()
        print(visible(text, newlines=True), flush=True)
        if self._drawn and self.live:
            self._tick(force=True)

    def line(self) -> str:
        """The progress as one line."""
        done, total = self.units
        # a run that reports no units (a sweep: one decode) shows its tokens alone
        parts = [] if self.units == (0, None) else [f"{done}/{total if total is not None else '?'} {self.unit}"]
        parts += self.count.describe()
        parts.append(f"{clock_text(self.clock() - self._start)} elapsed")
        if self._first is not None and total is not None and 0 < done < total and done > self._first[1]:
            when, before = self._first  # the rate of the units finished in this process, not a resumed run's
            parts.append(f"ETA {clock_text((self.clock() - when) / (done - before) * (total - done))}")
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
