"""The decode loop's memory settings: glibc keeps freed blocks (once per process), the collector pauses and resumes."""

from __future__ import annotations

import gc
import platform

import pytest

from reachlens.engine import memory


def test_keep_freed_memory_sets_glibc_once(monkeypatch):
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt is glibc's")
    monkeypatch.setattr(memory, "_state", {})
    calls = []
    real = memory._set_mallopt
    monkeypatch.setattr(memory, "_set_mallopt", lambda: calls.append(1) or real())
    assert memory.keep_freed_memory() is True
    assert memory.keep_freed_memory() is True
    assert calls == [1]


def test_keep_freed_memory_opt_out(monkeypatch):
    monkeypatch.setattr(memory, "_state", {})
    monkeypatch.setenv("REACHLENS_KEEP_FREED_MEMORY", "0")
    assert memory.keep_freed_memory() is False


@pytest.mark.parametrize("enabled", [True, False])
def test_no_gc_pauses_and_restores(enabled):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with pytest.raises(RuntimeError):
            with memory.no_gc():
                assert not gc.isenabled()
                raise RuntimeError("inside")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
