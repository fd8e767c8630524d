"""Shared by the zoo tests: the zoo's scripts and card audits set one torch thread; each test leaves the session's
thread count as it found it."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
