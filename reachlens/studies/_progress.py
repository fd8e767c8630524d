"""One progress line per running audit, with its ETA, for jobs that run several audits (``reachlens demo``).

On a terminal each running audit has a live tqdm line (questions done, rate, elapsed, ETA); a finished
audit leaves one line saying how long it took. Where the output is not a terminal (a log file, a pipe)
nothing is redrawn: each audit prints a plain progress line at most every ``every`` seconds, with its
ETA, and its closing line. Messages (``write``) are printed between the lines without breaking them.
"""

from __future__ import annotations

import sys
import time
from typing import Any

__all__ = ["ProgressBoard"]


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


class ProgressBoard:
    """Progress of named audits: ``update(label, done, total)`` as questions finish, ``write(text)`` for logs."""

    def __init__(self, *, stream: Any = None, every: float = 30.0) -> None:
        """``stream``: a text stream for the progress lines (default stderr); ``every``: seconds between plain lines."""
        self.stream = stream or sys.stderr
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = every
        self._started: dict[str, float] = {}
        self._last_print: dict[str, float] = {}
        self._bars: dict[str, Any] = {}
        self._slots: dict[str, int] = {}

    def update(self, label: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if label not in self._started:
            self._started[label] = now
            self._last_print[label] = now
            if self.live:
                from tqdm import tqdm

                used = set(self._slots.values())
                slot = self._slots[label] = next(i for i in range(len(used) + 1) if i not in used)
                self._bars[label] = tqdm(total=total, desc=label, unit="q", position=slot, leave=False,
                                         file=self.stream, dynamic_ncols=True)
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
