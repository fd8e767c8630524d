"""One progress line per running audit, with its ETA, for jobs that run several audits (``reachlens demo``).

On a terminal each running audit has a live tqdm line (questions done, rate, elapsed, ETA); a finished
audit leaves one line saying how long it took. Where the output is not a terminal (a log file, a pipe)
nothing is redrawn: each audit prints a plain progress line at most every ``every`` seconds, with its
ETA, and its closing line. Messages (``write``) are printed between the lines without breaking them.

While the board listens (:func:`reachlens.engine.progress.listening`), one more line follows every decode of the
study, in this process or its workers, step by step: the tokens decoded, the rows finished, the rate and the time
the started decodes have left (live on a terminal; a plain ``decoding:`` line every ``every`` seconds elsewhere).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from time import perf_counter
from typing import Any

from reachlens.engine.progress import DecodeCount
from reachlens.engine.progress import clock_text as _clock

__all__ = ["DECODING", "ProgressBoard"]

DECODING = "decoding"
"""The label of the board's line of the decodes' steps."""


class ProgressBoard:
    """Progress of named audits: ``update(label, done, total)`` as questions finish, ``write(text)`` for logs."""

    def __init__(self, *, stream: Any = None, every: float = 30.0, clock: Callable[[], float] | None = None) -> None:
        """``stream``: a text stream for the progress lines (default stderr); ``every``: seconds between plain lines;
        ``clock``: the seconds the lines measure (default ``time.perf_counter``, read as the board is made)."""
        self.stream = stream or sys.stderr
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = every
        self.clock = clock or perf_counter
        self.count = DecodeCount(self.clock, then=self._show_decoding)
        self.decode, self.step = self.count.decode, self.count.step  # a listener of the engine's decodes
        self._decoding: tuple[float, float] | None = None  # (started, last shown) of the decodes' line
        self._started: dict[str, float] = {}
        self._last_print: dict[str, float] = {}
        self._bars: dict[str, Any] = {}
        self._slots: dict[str, int] = {}

    def _show_decoding(self) -> None:
        now = self.clock()
        started, shown = self._decoding or (now, now)
        self._decoding = (started, shown)
        if now - shown < (0.5 if self.live else self.every):
            return
        self._decoding = (started, now)
        text = ", ".join([*self.count.describe(), f"{_clock(now - started)} elapsed"])
        if self.live:
            if DECODING not in self._bars:
                self._bars[DECODING] = self._bar(DECODING, None, bar_format="{desc}: {postfix}")
            self._bars[DECODING].set_postfix_str(text)
        else:
            self._print(f"{DECODING}: {text}")

    def _bar(self, label: str, total: int | None, **options: Any) -> Any:
        from tqdm import tqdm

        used = set(self._slots.values())
        slot = self._slots[label] = next(i for i in range(len(used) + 1) if i not in used)
        return tqdm(total=total, desc=label, unit="q", position=slot, leave=False, file=self.stream,
                    dynamic_ncols=True, **options)

    def update(self, label: str, done: int, total: int) -> None:
        now = self.clock()
        if label not in self._started:
            self._started[label] = now
            self._last_print[label] = now
            if self.live:
                self._bars[label] = self._bar(label, total)
        if self.live:
            bar = self._bars[label]
            bar.update(done - bar.n)
        elif 0 < done < total and now - self._last_print[label] >= self.every:
            self._last_print[label] = now
            elapsed = now - self._started[label]
            eta = _clock(elapsed / done * (total - done))
            self._print(f"{label}: {done}/{total} questions, {_clock(elapsed)} elapsed, ETA {eta}")
        if done >= total:
            bar = self._bars.pop(label, None)
            self._slots.pop(label, None)
            if bar is not None:
                bar.close()
            elapsed = now - self._started.pop(label)
            self._print(f"{label}: {total}/{total} questions in {_clock(elapsed)}")

    def write(self, text: str) -> None:
        """Print a message (to stdout) above the live lines."""
        self._print(text, sys.stdout)

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()
        self._slots.clear()
        self._started.clear()

    def _print(self, text: str, stream: Any = None) -> None:
        stream = stream or self.stream
        if self.live:  # a closed bar below the first leaves the cursor at the end of its blanked line
            text = "\r" + text
        if self._bars:
            from tqdm import tqdm

            tqdm.write(text, file=stream)
        else:
            print(text, file=stream, flush=True)
