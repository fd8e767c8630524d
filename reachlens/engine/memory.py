"""The process's memory during a decode: freed blocks kept for reuse, and no cyclic garbage collection mid-loop.

**What the allocator does.** torch's CPU allocator keeps no cache of its own: every tensor's storage is a
``posix_memalign`` (64-byte aligned) from the C library and is ``free``d when its last reference goes. glibc's
malloc serves a request of at least its *mmap threshold* (128 KiB at start, raised to the size of any mmapped
block freed since, up to 32 MiB) with a fresh anonymous ``mmap``, and unmaps it when it is freed; smaller requests
come from the heap, whose free top goes back to the kernel whenever it exceeds the *trim threshold* (twice the
mmap threshold). Either way the next tensor of that size lands on pages the kernel has to fault in and zero, 4 KiB
at a time. A decoding loop allocates and frees tensors of the same few sizes at every step (activations, the
logits, the sampler's passes over the vocabulary, the KV cache's grown and compacted buffers, which reach tens of
MB), so without this a long decode spends a good part of its CPU time in the kernel handing pages back and forth
(measured in ``benchmarks/README.md``, "The demo").

:func:`keep_freed_memory` tells glibc to serve every request from its heap (``M_MMAP_MAX`` = 0) and never trim it
(``M_TRIM_THRESHOLD`` at its largest): a freed block stays in the process and the next allocation reuses it without
a system call or a page fault. The cost: the process keeps its high-water mark of memory until it exits (freed
memory is reused by this process, not returned). It acts once per process, from the first
:func:`~reachlens.engine.generate`; only where the C library is glibc (elsewhere nothing changes);
``REACHLENS_KEEP_FREED_MEMORY=0`` in the environment leaves the allocator as it is.

**Garbage collection.** Python's cyclic collector runs a full pass over every object of the process (the loaded
libraries' included) every so many allocations; a decode step allocates hundreds of small objects, so full passes
came mid-decode (measured in ``benchmarks/README.md``). :func:`no_gc` pauses the collector
for the length of a decode loop (whose objects are freed by reference counting) and restores it after.

Numerics: neither changes what is computed; only where memory comes from and when the collector runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import platform
from collections.abc import Iterator

__all__ = ["keep_freed_memory", "no_gc"]

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's malloc.h
_INT_MAX = 2**31 - 1
_state: dict[str, bool] = {}


def keep_freed_memory() -> bool:
    """Make glibc's malloc keep freed memory for reuse (once per process); return whether it does.

    False where the C library is not glibc or ``REACHLENS_KEEP_FREED_MEMORY=0``.

    >>> keep_freed_memory()  # doctest: +SKIP
    True
    """
    if "kept" not in _state:
        _state["kept"] = _set_mallopt()
    return _state["kept"]


def _set_mallopt() -> bool:
    if os.environ.get("REACHLENS_KEEP_FREED_MEMORY", "1") == "0" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _INT_MAX))


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Within the block, Python's cyclic garbage collector does not run (restored after, if it was on)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
