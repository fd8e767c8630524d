"""A fixture of the progress tests: engine steps that take time on the progress line's clock (imported by each test
file that uses it; a conftest.py here would shadow the suite's own ``conftest`` module)."""

from __future__ import annotations

import pytest

STEP_SECONDS = 10.0
"""Seconds each engine step takes on the progress line's clock under :func:`slow_steps`."""


@pytest.fixture
def slow_steps(monkeypatch):
    """Each engine step takes STEP_SECONDS on the progress line's clock, so a tiny model's run looks like a real
    checkpoint's to the progress line (a plain line every 30 s of that work where the output is no terminal)."""
    import importlib

    from reachlens.cli import _progress

    generate = importlib.import_module("reachlens.engine.generate")
    now = [0.0]
    real = generate.decode_step

    def step(tokens, finished, unused):
        now[0] += STEP_SECONDS
        real(tokens, finished, unused)

    monkeypatch.setattr(generate, "decode_step", step)
    monkeypatch.setattr(_progress, "monotonic", lambda: now[0])
    return now
