"""Counting host reads: the operations that make the host wait for a tensor's values.

On an accelerator every such operation is a host-device synchronisation: the host stops queueing work until the
device has computed the value it asks for. On the CPU they cost little and go unnoticed, so the engine counts
them there, where a test can run: :class:`HostReads` is a ``TorchDispatchMode`` that counts

* the data-dependent operators, whose output or result the host must read (``nonzero``, ``unique``, ``item`` /
  ``bool(tensor)`` / ``int(tensor)`` (``_local_scalar_dense``), ``masked_select``, ``bincount``,
  ``repeat_interleave`` by a tensor, ``equal``, indexing with a boolean mask);
* a copy from an accelerator to the CPU (``.cpu()``, ``.to("cpu")``);
* ``Tensor.tolist`` and ``Tensor.numpy``, which read the data without dispatching an operator.

A conversion counts once (a ``tolist`` of a CUDA tensor is one read, not a copy and a read). Host bookkeeping
that must not count is done on Python lists or numpy arrays, which the mode does not see: a tensor is for the
device's work, a list for the host's.

>>> with HostReads() as reads:  # doctest: +SKIP
...     generate(model, prompts, rows, protocol)
>>> reads.total, reads.by_op.most_common(3)  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import traceback
from pathlib import Path

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["HostReads", "to_device", "to_host"]

_aten = torch.ops.aten
_DATA_DEPENDENT = frozenset({
    _aten.nonzero.default, _aten.nonzero.out, _aten.nonzero_numpy.default, _aten._local_scalar_dense.default,
    _aten._unique.default, _aten._unique2.default, _aten.unique_dim.default, _aten.unique_consecutive.default,
    _aten.masked_select.default, _aten.bincount.default, _aten.repeat_interleave.Tensor,
    _aten.repeat_interleave.self_Tensor, _aten.equal.default, _aten.is_nonzero.default,
})
_MASKED = frozenset({_aten.index.Tensor, _aten.index_put.default, _aten.index_put_.default,
                     _aten._index_put_impl_.default})
_COPIES = frozenset({_aten._to_copy.default, _aten.copy_.default})
_HERE = Path(__file__).resolve()
_TORCH = Path(torch.__file__).resolve().parent


def _bool_index(args) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())


def _to_host(func, args, kwargs) -> bool:
    """A copy whose source is on an accelerator and whose result is on the CPU."""
    src = args[1] if func is _aten.copy_.default else args[0]
    if not isinstance(src, torch.Tensor) or src.device.type == "cpu":
        return False
    if func is _aten.copy_.default:
        return args[0].device.type == "cpu"
    device = kwargs.get("device")
    return device is not None and torch.device(device).type == "cpu"


class HostReads(TorchDispatchMode):
    """Counts host reads while active (see the module's docstring): :attr:`total`, :attr:`by_op` (operator name ->
    count) and :attr:`by_line` (the first source line outside torch and this module -> count)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_op: collections.Counter[str] = collections.Counter()
        self.by_line: collections.Counter[str] = collections.Counter()
        self._inside = 0
        self._saved: dict[str, object] = {}

    @property
    def total(self) -> int:
        return sum(self.by_op.values())

    def _count(self, name: str) -> None:
        self.by_op[name] += 1
        for frame in reversed(traceback.extract_stack()[:-2]):
            path = Path(frame.filename).resolve()
            if path != _HERE and _TORCH not in path.parents:
                self.by_line[f"{path.parent.name}/{path.name}:{frame.lineno}"] += 1
                break

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self._inside:
            if func in _DATA_DEPENDENT:
                self._count(func.overloadpacket.__name__)
            elif func in _MASKED and _bool_index(args):
                self._count(f"{func.overloadpacket.__name__}[bool]")
            elif func in _COPIES and _to_host(func, args, kwargs):
                self._count("to_host")
        return func(*args, **kwargs)

    def _patched(self, name: str):
        original = getattr(torch.Tensor, name)

        def read(tensor, *args, **kwargs):
            if not self._inside:
                self._count(name)
            self._inside += 1
            try:
                return original(tensor, *args, **kwargs)
            finally:
                self._inside -= 1

        self._saved[name] = original
        return read

    def __enter__(self):
        for name in ("tolist", "numpy"):
            setattr(torch.Tensor, name, self._patched(name))
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            for name, original in self._saved.items():
                setattr(torch.Tensor, name, original)
            self._saved.clear()


def to_host(x, dtype=np.int64) -> np.ndarray:
    """``x`` as a numpy array on the host: an array or a sequence as it is, a tensor read (one host read; the engine
    hands the host its arrays, so this reads only what a caller gave as a tensor)."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy().astype(dtype, copy=False)
    return np.asarray(x, dtype=dtype)


def to_device(x, device: torch.device | str, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """A host array (or sequence) as a tensor on ``device``, with no host read: on an accelerator the copy is queued
    from pinned memory (``non_blocking``), so the host does not wait for it."""
    t = torch.tensor(np.asarray(x), dtype=dtype)  # a copy: the host may change its array afterwards
    device = torch.device(device)
    if device.type == "cpu":
        return t
    return t.pin_memory().to(device, non_blocking=True) if torch.cuda.is_available() else t.to(device)
