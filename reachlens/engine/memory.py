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

**Limits.** :func:`machine_memory` is what this process may use (the least of the machine's memory, its cgroups'
limits and ``ulimit -v``); :func:`check_rows` refuses, before any is built, completions held together that cannot fit
in half of it, and :func:`check_budget` applies it to an audit's budget and batch bound; :func:`check_decode` refuses a
decode batch whose logits passes and KV cache cannot fit (:func:`decode_row_bytes`), which grows with the vocabulary
and the model's depth, not with the completions.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import platform
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from reachlens.errors import ReachlensError
from reachlens.protocol import Protocol

__all__ = ["ROW_BYTES", "ROW_BYTES_PER_TOKEN", "VOCAB_PASSES", "check_budget", "check_decode", "check_rows",
           "decode_row_bytes", "gib", "keep_freed_memory", "machine_memory", "no_gc"]

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


ROW_BYTES = 1024
"""Memory one completion holds while its batch is decoded and graded, before its tokens: its row, its
``Completion``, its grade and its row of the sample table (about 1 KiB, measured with ``tracemalloc``)."""
ROW_BYTES_PER_TOKEN = 64
"""Memory per generated token of a completion: its id and log-probability as Python objects and its
text (about 64 bytes, measured with ``tracemalloc``)."""


def machine_memory(*, proc: Path = Path("/proc/self"), cgroups: Path = Path("/sys/fs/cgroup")) -> int:
    """Bytes of memory this process may use: the smallest of the machine's physical memory, the limit of its
    own cgroup and of every cgroup above it (v2 ``memory.max``; v1 ``memory.limit_in_bytes``, nested ones
    included) and the address space its ``RLIMIT_AS`` (``ulimit -v``) leaves it beyond what it maps already.

    >>> machine_memory() > 0
    True
    """
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return min([total, *_cgroup_limits(proc, cgroups), *_address_space_left(proc)])


def _cgroup_limits(proc: Path, cgroups: Path) -> list[int]:
    """The memory limits of this process's cgroup and its ancestors, v2 and v1 (``/proc/self/cgroup``'s paths
    under ``cgroups``); none where there is no limit or nothing can be read."""
    try:
        lines = (proc / "cgroup").read_text().splitlines()
    except OSError:
        return []
    limits = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # v2: one unified hierarchy
            folder, name = cgroups, "memory.max"
        elif "memory" in controllers.split(","):  # v1: the memory controller's own hierarchy
            folder, name = cgroups / "memory", "memory.limit_in_bytes"
        else:
            continue
        parts = [q for q in path.split("/") if q not in ("", ".", "..")]
        for depth in range(len(parts) + 1):  # the root, then each cgroup down to this process's own
            try:
                value = (folder.joinpath(*parts[:depth]) / name).read_text().strip()
            except OSError:
                continue
            if value.isdigit():
                limits.append(int(value))
    return limits


def _address_space_left(proc: Path) -> list[int]:
    """The address space ``RLIMIT_AS`` leaves beyond what this process maps now (none when unlimited)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return []
    try:
        mapped = int((proc / "statm").read_text().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        mapped = 0
    return [max(soft - mapped, 0)]


def gib(n: int) -> str:
    """``n`` bytes in GiB, one decimal (``"7.6 GiB"``)."""
    return f"{n / (1 << 30):.1f} GiB"


def check_budget(protocol: Protocol, max_batch_rows: int) -> None:
    """Refuse a budget whose completions cannot fit in memory, before any is built.

    A slice of the audit (:func:`~reachlens.runner.batch_slices`) holds ``max(K + 1, max_batch_rows)`` completions at
    most until it is graded (:func:`check_rows`). The message names the largest ``k`` (or ``max_batch_rows``) that
    fits. The decode itself runs ``max_batch_rows`` rows at a time, whatever K is.
    """
    if isinstance(max_batch_rows, bool) or not isinstance(max_batch_rows, int) or max_batch_rows < 1:
        raise ReachlensError(f"max_batch_rows={max_batch_rows!r} must be an integer >= 1")
    check_rows(protocol.k + 1, protocol.max_new_tokens, f"k={protocol.k}: one question's",
               lambda fit: f"use k <= {max(fit - 1, 0)}, or a shorter max_new_tokens")
    check_rows(max_batch_rows, protocol.max_new_tokens, f"max_batch_rows={max_batch_rows}: a batch of",
               lambda fit: f"use max_batch_rows <= {fit}")


def check_rows(rows: int, max_new_tokens: int, what: str, fix: Callable[[int], str]) -> None:
    """Refuse ``rows`` completions held together until they are graded when they cannot fit in memory, before any
    is built: each holds about :data:`ROW_BYTES` + :data:`ROW_BYTES_PER_TOKEN` per token of ``max_new_tokens``, and
    together they must stay under half of :func:`machine_memory` (the model, its cache and the finished tables need
    the rest). ``what`` names the rows in the message, ``fix(fit)`` says how to fit (``fit``: the most that do).

    >>> check_rows(10, 16, "ten rows:", lambda fit: f"use at most {fit}")
    """
    per_row = ROW_BYTES + ROW_BYTES_PER_TOKEN * max_new_tokens
    memory = machine_memory()
    fit = memory // 2 // per_row
    if rows > fit:
        raise ReachlensError(
            f"{what} {rows:,} completions need about {gib(rows * per_row)} in memory until they are graded "
            f"({ROW_BYTES} bytes + {ROW_BYTES_PER_TOKEN} per token of max_new_tokens={max_new_tokens} each), more "
            f"than half of the {gib(memory)} this process may use (the least of the machine's memory, its cgroup's "
            f"limit and ulimit -v); {fix(fit)}")


VOCAB_PASSES = 8
"""Vocabulary-sized float32 buffers one decoding row holds at a step: the logits, the sampler's passes (softmax,
cumulative sums, the inverse-CDF draw) and the log-probabilities. Measured on SmolLM2-135M-Instruct (vocabulary
49,152): 512 rows x 4 new tokens peaked 601 MB above 64 rows, 1.34 MB a row, 6.8 such buffers; rounded up."""


def decode_row_bytes(model, length: int) -> int:
    """Bytes one row of a decode batch holds at its widest: :data:`VOCAB_PASSES` float32 vectors over the vocabulary
    and its KV cache at ``length`` positions (keys and values of every layer, in the model's dtype)."""
    cfg = model.cfg
    n_kv = getattr(cfg, "n_key_value_heads", None) or cfg.n_heads
    elem = torch.empty((), dtype=getattr(cfg, "dtype", None) or torch.float32).element_size()
    return VOCAB_PASSES * 4 * int(cfg.d_vocab) + 2 * int(cfg.n_layers) * int(n_kv) * int(cfg.d_head) * elem * length


def check_decode(model, rows: int, length: int, max_batch_rows: int) -> None:
    """Refuse, before the prefill, a decode batch of ``min(rows, max_batch_rows)`` rows of up to ``length`` positions
    whose logits passes and KV cache (:func:`decode_row_bytes`) cannot fit in half of :func:`machine_memory`. A
    262,144-entry vocabulary (Gemma 3) makes each row's passes 8 MB, and its cache grows with every layer: the bound
    on completions (:func:`check_rows`) does not see either. The message names the ``max_batch_rows`` that fits."""
    batch = min(rows, max_batch_rows)
    per_row = decode_row_bytes(model, length)
    memory = machine_memory()
    fit = max(memory // 2 // per_row, 0)
    if batch > fit:
        raise ReachlensError(
            f"max_batch_rows={max_batch_rows}: a decode batch of {batch:,} rows needs about {gib(batch * per_row)} "
            f"({per_row / (1 << 20):.1f} MiB a row: {VOCAB_PASSES} float32 passes over d_vocab={model.cfg.d_vocab:,} and "
            f"the KV cache of {length} positions), more than half of the {gib(memory)} this process may use; use "
            f"max_batch_rows <= {fit} (--max-batch-rows {fit}), or a shorter max_new_tokens")
