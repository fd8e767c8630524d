r"""The math grader: LaTeX final answers checked for equivalence with math-verify, under a timeout.

The answer is the last ``\boxed{...}``, else ``#### X``, else "the answer is X"
(:func:`~reachlens.grading.extract.extract_math_answer`); a plain number is first cleaned of
currency, thousands separators and trailing words (``$1,234`` -> ``1234``). Both sides are then
parsed with ``math_verify.parse`` and compared with ``math_verify.verify`` (sympy equivalence with
float rounding to 6 places; tuples, sets, intervals, percentages, degrees and ``\text`` units).
Caveat: an answer that does not parse as LaTeX falls back to math-verify's string comparison.

No model text is executed as code. What we found in math-verify 0.9 / latex2sympy2_extended 1.11:

* math-verify's default extraction includes ``ExprExtractionConfig``, which sends plain-text
  expressions to ``sympy.parse_expr``, i.e. Python's ``eval`` (its regex only admits digits and
  ``+-*/^()×÷.``, but we do not lean on that). We pass ``LatexExtractionConfig`` alone.
* The LaTeX path parses with an ANTLR grammar and builds sympy objects directly, except that each
  number token goes through ``sympy.Number(token)``, which also reaches ``eval``, on code such as
  ``Integer (19 )`` built from the grammar's digit token: no model-chosen names or calls.
  ``tests/grading`` spies on ``sympy.parsing.sympy_parser.eval_expr`` to pin exactly that.

Timeouts. math-verify's own ``parsing_timeout``/``timeout_seconds`` use ``signal.alarm``: whole
seconds, main thread only (elsewhere they raise ``ValueError``), and they swallow a timeout into an
empty parse or ``False``, which cannot be told from a wrong answer. So we switch them off and put
one deadline (``timeout_s``) on the whole extract-parse-and-compare:

* ``isolation="auto"`` (default): in the main thread on POSIX, a ``setitimer`` alarm that raises
  (and re-raises every 0.1 s, in case some library swallows the first); the previous SIGALRM
  handler and timer are restored afterwards. In any other thread, or without SIGALRM, the work
  goes to the worker process.
* ``isolation="process"``: always the worker process, ``python -P _math_verify_core.py``, which
  loads math-verify and sympy only. The hard bound: a computation stuck in one C call ignores
  Python signals, but an overrunning worker is killed (and restarted, about a second, on the next
  call). There is one worker per Python process, so concurrent callers queue for it and may wait
  longer than ``timeout_s`` in all. The worker dies with the process that started it (Linux's
  ``PR_SET_PDEATHSIG``, elsewhere a thread that watches its parent), even one killed with
  ``kill -9`` mid-comparison, and runs under an address-space limit (``RLIMIT_AS``,
  ``_WORKER_MEMORY_LIMIT``) so a huge power cannot eat the machine. In the worker, extraction runs
  here first and the comparison gets what is left of the deadline.

math-verify's ``verify`` is called with ``raise_on_error=True``: left to itself it turns a crash
inside the comparison into ``False``, a wrong answer. A timeout, a parser crash, a memory error or
a dead worker gives ``Grade(answer, correct=False, scored=False)``. An answer holding a digit run
longer than :data:`~reachlens.grading.extract.MAX_DIGITS` is not handed to math-verify (sympy spends
seconds inside one C call on such a number, past any alarm): it is correct only when it is the same
number as the gold (exactly, as the numeric grader compares) or the same string.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import functools
import json
import logging
import math
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from reachlens.errors import ReachlensError
from reachlens.grading._math_verify_core import Timeout as _Timeout
from reachlens.grading._math_verify_core import _math_verify
from reachlens.grading._math_verify_core import alarm as _alarm
from reachlens.grading._math_verify_core import verify_latex
from reachlens.grading.base import GRADERS, Grade, unscored
from reachlens.grading.extract import (
    MAX_DIGITS, AnswerCut, extract_math_answer, extract_numeric_answer, number_key, parse_number,
)

__all__ = ["MathGrader", "normalize_math_answer"]

logger = logging.getLogger(__name__)

_WORKER_START_TIMEOUT_S = 120.0
"""Seconds a fresh worker may take to import sympy and math-verify before we give up on it."""
_WORKER_GRACE_S = 0.25
"""Seconds past the deadline the worker has to report its own timeout before it is killed (it keeps
its imports warm that way; only a computation stuck in one C call costs a restart)."""
_WORKER_MEMORY_LIMIT = 1 << 30
"""Bytes of address space the worker may use (``RLIMIT_AS``); past it a comparison fails with
``MemoryError`` and the row is unscored."""
_CORE_PATH = str(Path(__file__).with_name("_math_verify_core.py"))
_LONG_DIGITS = re.compile(rf"\d{{{MAX_DIGITS + 1}}}")
_NUMBER_THEN_WORDS_RE = re.compile(r"^(\S+)\s+[A-Za-z][A-Za-z .]*$")


def normalize_math_answer(answer: str) -> str:
    r"""Clean a plain-number answer (currency, thousands separators, trailing words); keep LaTeX.

    >>> normalize_math_answer("$1,234"), normalize_math_answer("18 dollars")
    ('1234', '18')
    >>> normalize_math_answer(r"\frac{1}{2}")
    '\\frac{1}{2}'
    """
    answer = answer.strip()
    words = _NUMBER_THEN_WORDS_RE.match(answer)
    if words and parse_number(words.group(1)) is not None:
        answer = words.group(1)
    if "%" not in answer and parse_number(answer) is not None:
        return extract_numeric_answer(answer) or answer
    return answer


def _pump(stream: Iterable[str], lines: queue.Queue[str | None]) -> None:
    """Move the worker's reply lines into ``lines``; None marks their end (or a read error)."""
    try:
        for line in stream:
            lines.put(line)
    except (OSError, ValueError):  # the pipe was closed under us by stop()
        pass
    finally:
        lines.put(None)


_SPAWNER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="reachlens-math-verify")
"""The one thread that starts worker processes (it lives until the interpreter exits)."""


class _Worker:
    """One shared worker process running ``_math_verify_core``, killed when a request overruns."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None
        self._replies: queue.Queue[str | None] = queue.Queue()
        self._atexit = False

    def stop(self) -> None:
        """Kill the worker process, if any (the next request starts a new one)."""
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait(timeout=10)
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    stream.close()

    def _reply(self, timeout_s: float) -> dict[str, Any]:
        """The next reply line; past ``timeout_s`` the worker is killed and ``_Timeout`` raised."""
        try:
            line = self._replies.get(timeout=timeout_s)
        except queue.Empty:
            self.stop()
            raise _Timeout from None
        if line is None:
            self.stop()
            raise RuntimeError("the math-verify worker process exited unexpectedly")
        return json.loads(line)

    def _start(self) -> None:
        # -P: do not put reachlens/grading on sys.path. The worker dies with this process
        # (PR_SET_PDEATHSIG, or a watch on its parent) and runs under RLIMIT_AS. The parent-death
        # signal fires when the *thread* that started the child ends, so the child is started from
        # one thread that lives as long as the process, never from a caller's short-lived thread.
        command = [sys.executable, "-P", _CORE_PATH, "--parent", str(os.getpid()),
                   "--memory-limit", str(_WORKER_MEMORY_LIMIT)]
        popen = functools.partial(
            subprocess.Popen, command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, encoding="ascii"
        )
        self._process = _SPAWNER.submit(popen).result()
        if not self._atexit:
            atexit.register(self.stop)
            self._atexit = True
        self._replies = queue.Queue()
        threading.Thread(
            target=_pump, args=(self._process.stdout, self._replies), daemon=True
        ).start()
        try:
            ready = self._reply(_WORKER_START_TIMEOUT_S)
        except _Timeout:
            raise RuntimeError(
                f"the math-verify worker did not start in {_WORKER_START_TIMEOUT_S} s"
            ) from None
        if ready != {"ready": True}:
            self.stop()
            raise RuntimeError(f"the math-verify worker sent {ready!r} instead of ready")

    def verify(self, answer: str, gold: str, timeout_s: float) -> bool:
        """``verify_latex`` in the worker. Raises ``_Timeout``, or RuntimeError if it failed.

        The worker keeps the deadline itself (an alarm, as in this process) and answers
        ``{"timeout": true}``; a worker silent ``_WORKER_GRACE_S`` past it is stuck in C and killed.
        """
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self.stop()
                self._start()
            assert self._process is not None and self._process.stdin is not None
            request = {"answer": answer, "gold": gold, "timeout_s": timeout_s}
            try:
                self._process.stdin.write(json.dumps(request) + "\n")
                self._process.stdin.flush()
            except OSError as error:
                self.stop()
                raise RuntimeError(f"the math-verify worker is gone: {error!r}") from error
            reply = self._reply(timeout_s + _WORKER_GRACE_S)
        if reply.get("timeout"):
            raise _Timeout
        if "error" in reply:
            raise RuntimeError(f"math-verify failed in the worker: {reply['error']}")
        return bool(reply["ok"])


_WORKER = _Worker()


@dataclass(frozen=True)
class MathGrader:
    r"""LaTeX answer equivalence with math-verify, bounded by ``timeout_s``.

    >>> MathGrader().grade(r"So $x = \boxed{\dfrac{1}{2}}$.", "0.5")
    Grade(answer='\\dfrac{1}{2}', correct=True, scored=True)
    >>> MathGrader().grade("The answer is 10080.", r"10,\!080").correct
    True
    """

    timeout_s: float | int = 5.0
    """Seconds allowed to parse and compare one answer; past it the row is unscored. (``| int``
    because runtime type checkers such as beartype do not apply PEP 484's int-for-float rule.)"""
    isolation: Literal["auto", "process"] = "auto"
    """``auto``: an in-process alarm in the main thread, a worker process elsewhere;
    ``process``: always the worker process (a hard bound, about a millisecond more per call)."""
    name: str = field(default="math", init=False)
    """The registry name."""

    def __post_init__(self) -> None:
        number = isinstance(self.timeout_s, int | float) and not isinstance(self.timeout_s, bool)
        if not (number and 0 < self.timeout_s < math.inf):
            raise ReachlensError(f"timeout_s {self.timeout_s!r} must be a positive number of seconds")
        if self.isolation not in ("auto", "process"):
            raise ReachlensError(f"isolation {self.isolation!r} must be 'auto' or 'process'")
        object.__setattr__(self, "timeout_s", float(self.timeout_s))

    def extract(self, text: str) -> str | None:
        r"""The final LaTeX answer in ``text``, normalized, or None.

        >>> MathGrader().extract(r"Area: $\boxed{12\pi}$. #### 3")
        '12\\pi'
        """
        answer = extract_math_answer(text)
        return None if answer is None else normalize_math_answer(answer)

    def grade(self, text: str, gold: str) -> Grade:
        r"""Grade ``text`` against the LaTeX gold answer ``gold``.

        Extraction and comparison run under one deadline, ``timeout_s``. Never raises on ``text``: a
        timeout, a parser crash inside math-verify, a dead worker or any other exception makes the
        completion unscored.

        >>> MathGrader().grade(r"\boxed{(3, \frac{\pi}{2})}", r"\left( 3, \frac{\pi}{2} \right)")
        Grade(answer='(3, \\frac{\\pi}{2})', correct=True, scored=True)
        """
        answer: list[str | None] = [None]
        try:
            in_main = threading.current_thread() is threading.main_thread()
            if self.isolation == "auto" and in_main and hasattr(signal, "setitimer"):
                _math_verify()  # the first call imports sympy: not part of any answer's deadline
                with _alarm(self.timeout_s):
                    return self._grade(text, gold, answer, None)
            return self._grade(text, gold, answer, time.monotonic() + self.timeout_s)
        except _Timeout:
            logger.info("math grading timed out after %s s on %r", self.timeout_s, str(answer[0])[:200])
            return Grade(answer=answer[0], correct=False, scored=False)
        except AnswerCut:  # the last box opens before the extraction bound: undecidable, not wrong
            return Grade(answer=None, correct=False, scored=False)
        except Exception as error:  # a parser crash or a dead worker: undecided, not wrong
            return unscored(self.name, text, error, answer[0])

    def _grade(self, text: str, gold: str, answer: list[str | None], deadline: float | None) -> Grade:
        """Extract and compare; ``deadline`` (monotonic seconds) when the worker compares, None under
        an alarm. ``answer[0]`` receives the extracted answer as soon as there is one."""
        answer[0] = self.extract(text)
        if answer[0] is None:
            return Grade(answer=None, correct=False)
        gold = normalize_math_answer(gold)
        if _LONG_DIGITS.search(answer[0]):
            # a digit run past MAX_DIGITS is no number for math-verify (sympy would spend seconds in
            # one C call on it): it equals the gold only as the same number or the same string
            key = number_key(answer[0])
            same = (key is not None and key == number_key(gold)) or answer[0].strip() == gold.strip()
            return Grade(answer=answer[0], correct=same)
        if deadline is None:
            correct = verify_latex(answer[0], gold)
        else:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Timeout
            correct = _WORKER.verify(answer[0], gold, remaining)
        return Grade(answer=answer[0], correct=correct)


GRADERS.register("math", MathGrader())
