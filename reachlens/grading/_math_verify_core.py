"""math-verify called safely, in this process or as the grading worker process.

LaTeX extraction only (``LatexExtractionConfig``): math-verify's ``ExprExtractionConfig`` would send
plain-text expressions to ``sympy.parse_expr``, i.e. Python's ``eval``. math-verify's own signal
timeouts are switched off; the caller (:mod:`reachlens.grading.math_equiv`) imposes the deadline.

This module imports nothing from reachlens, so ``python -P _math_verify_core.py`` starts a worker
that loads only math-verify and sympy (not torch). The worker reads one JSON request per line on
stdin, ``{"answer": ..., "gold": ...}``, and writes one JSON reply per line on stdout:
``{"ready": true}`` once, then ``{"ok": <bool>}`` or ``{"error": "<Type>: <message>"}`` each.
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

__all__ = ["serve", "verify_latex"]


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
    return bool(_math_verify().verify(gold_parsed, _parse(answer), timeout_seconds=None))


def serve(requests: Iterable[str], replies: io.TextIOBase) -> None:
    """The worker loop: answer JSON-line requests until ``requests`` ends."""

    def reply(message: dict[str, Any]) -> None:
        replies.write(json.dumps(message) + "\n")  # ASCII: json escapes everything else
        replies.flush()

    _math_verify()
    reply({"ready": True})
    for line in requests:
        request = json.loads(line)
        try:
            reply({"ok": verify_latex(request["answer"], request["gold"])})
        except Exception as error:  # a parser crash: report it and keep serving
            reply({"error": f"{type(error).__name__}: {error}"})


if __name__ == "__main__":
    # Keep fd 1 for replies only: anything else that prints goes to stderr.
    _replies = io.TextIOWrapper(os.fdopen(os.dup(1), "wb"), encoding="ascii")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(io.TextIOWrapper(sys.stdin.buffer, encoding="ascii"), _replies)
