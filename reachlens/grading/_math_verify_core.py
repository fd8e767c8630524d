"""math-verify called safely, in this process or as the grading worker process.

LaTeX extraction only (``LatexExtractionConfig``): math-verify's ``ExprExtractionConfig`` would send
plain-text expressions to ``sympy.parse_expr``, i.e. Python's ``eval``. math-verify's own signal
timeouts are switched off; the caller (:mod:`reachlens.grading.math_equiv`) imposes the deadline.

This module imports nothing from reachlens, so ``python -P _math_verify_core.py`` starts a worker
that loads only math-verify and sympy (not torch). The worker reads one JSON request per line on
stdin, ``{"answer": ..., "gold": ...}``, and writes one JSON reply per line on stdout:
``{"ready": true}`` once, then ``{"ok": <bool>}`` or ``{"error": "<Type>: <message>"}`` each; a
request with ``"timeout_s"`` runs under that deadline (an alarm) and may get ``{"timeout": true}``.

``--parent PID`` makes the worker die with that process (``PR_SET_PDEATHSIG`` on Linux, a watching
thread elsewhere); ``--memory-limit BYTES`` caps its address space (``RLIMIT_AS``), so a runaway
comparison ends in ``MemoryError`` (reported as an error) instead of swapping the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any

__all__ = ["Timeout", "alarm", "serve", "verify_latex"]


class Timeout(BaseException):
    """The deadline passed (a BaseException, so ``except Exception`` in libraries lets it by)."""


@contextlib.contextmanager
def alarm(timeout_s: float) -> Iterator[None]:
    """Raise ``Timeout`` in the body once ``timeout_s`` has passed; main thread only (SIGALRM)."""
    armed = [True]

    def on_alarm(signum: int, frame: object) -> None:
        if armed[0]:
            raise Timeout

    previous_handler = signal.signal(signal.SIGALRM, on_alarm)
    previous_delay, previous_interval = 0.0, 0.0
    start = time.monotonic()
    try:
        previous_delay, previous_interval = signal.setitimer(
            signal.ITIMER_REAL, timeout_s, min(0.1, timeout_s)
        )
        yield
    finally:
        restored = False
        while not restored:  # the alarm may fire inside this block; retry until all is undone
            try:
                armed[0] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous_handler)
                if previous_delay > 0:  # somebody else's timer: let it fire when it was due
                    remaining = max(previous_delay - (time.monotonic() - start), 1e-3)
                    signal.setitimer(signal.ITIMER_REAL, remaining, previous_interval)
                restored = True
            except Timeout:
                pass


class _NoTimeoutWarning(logging.Filter):
    """Drops math-verify's "Timeout is disabled" warning: the caller imposes the timeout."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


@lru_cache(maxsize=1)
def _math_verify() -> Any:
    """Import math-verify on first use (sympy and the ANTLR parser take about a second)."""
    import math_verify

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(_NoTimeoutWarning())
    return math_verify


def _parse(latex: str) -> list[Any]:
    mv = _math_verify()
    return mv.parse(
        "\\boxed{" + latex + "}",
        extraction_config=[mv.LatexExtractionConfig()],  # LaTeX only: never sympy.parse_expr
        parsing_timeout=None,
        raise_on_error=True,
    )


@lru_cache(maxsize=4096)
def _parse_gold(gold: str) -> tuple[Any, ...]:
    parsed = _parse(gold)
    if not parsed:
        raise ValueError(f"math-verify found no answer in the gold {gold!r}")
    return tuple(parsed)


def verify_latex(answer: str, gold: str) -> bool:
    r"""Whether the LaTeX ``answer`` is equivalent to ``gold``. No timeout; raises on parser errors.

    >>> verify_latex(r"\frac{2}{4}", "0.5"), verify_latex("3", "4")
    (True, False)
    """
    gold_parsed = list(_parse_gold(gold))
    # raise_on_error: a crash inside the comparison is an error (unscored), not a wrong answer
    return bool(_math_verify().verify(gold_parsed, _parse(answer), timeout_seconds=None, raise_on_error=True))


def serve(requests: Iterable[str], replies: io.TextIOBase) -> None:
    """The worker loop: answer JSON-line requests until ``requests`` ends."""

    def reply(message: dict[str, Any]) -> None:
        replies.write(json.dumps(message) + "\n")  # ASCII: json escapes everything else
        replies.flush()

    _math_verify()
    reply({"ready": True})
    for line in requests:
        request = json.loads(line)
        timeout_s = request.get("timeout_s")
        try:
            with alarm(timeout_s) if timeout_s else contextlib.nullcontext():
                ok = verify_latex(request["answer"], request["gold"])
            reply({"ok": ok})
        except Timeout:  # the deadline passed: report it and keep serving, imports still warm
            reply({"timeout": True})
        except Exception as error:  # a parser crash, a MemoryError: report it and keep serving
            reply({"error": f"{type(error).__name__}: {error}"})


def _die_with(parent: int) -> None:
    """Exit when process ``parent`` does: the kernel's parent-death signal, else a watching thread."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        if libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl")
    except (OSError, AttributeError):  # not Linux: poll the parent instead

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=watch, daemon=True).start()
    if os.getppid() != parent:  # the parent died before the signal was set up
        os._exit(1)


def _limit_memory(limit: int) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


if __name__ == "__main__":
    _ap = argparse.ArgumentParser(description="the math-verify grading worker")
    _ap.add_argument("--parent", type=int, default=None, help="exit when this process exits")
    _ap.add_argument("--memory-limit", type=int, default=None, help="RLIMIT_AS in bytes")
    _opts = _ap.parse_args()
    if _opts.parent is not None:
        _die_with(_opts.parent)
    if _opts.memory_limit:
        _limit_memory(_opts.memory_limit)
    # Keep fd 1 for replies only: anything else that prints goes to stderr.
    _replies = io.TextIOWrapper(os.fdopen(os.dup(1), "wb"), encoding="ascii")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(io.TextIOWrapper(sys.stdin.buffer, encoding="ascii"), _replies)
