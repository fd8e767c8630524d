"""Hooks and batch rows: which samples a batch row of the decoder stands for.

By default :func:`reachlens.engine.generate` shares work between samples: rows whose tokens so far
agree are decoded as *one* batch entry (a node of the sample tree), and a prompt is prefilled once
for all of its samples. A hook that treats every batch row alike (zeroing an MLP, adding a steering
vector) does not care. A hook that records or edits *per sample* does: under sharing, batch row
``i`` is a distinct prefix, not sample ``i``.

So the engine decides per call (``share_prefixes=None``, the default):

* no hook is attached, or only hooks marked :func:`row_agnostic` (reachlens' own interventions
  are): share;
* any other hook is attached anywhere in the model: **one batch row per sample**, in every forward
  from the prefill to the last step. Batch row ``i`` of a forward is row ``i`` of the decoding
  chunk throughout (a finished row keeps its place, fed padding), so what a hook records is
  aligned sample for sample.

``share_prefixes=True`` opts in to sharing with hooks attached. Such a hook then learns which
samples each batch row stands for from :func:`current_rows`, valid while the engine's forward
runs::

    def record(x, hook):
        rows = current_rows()
        for entry, members in enumerate(rows.entries):
            for r in members:
                seen[rows.tags[r]].append(x[entry, -1].clone())

    with model.hooks(fwd_hooks=[("blocks.0.hook_mlp_out", record)]):
        audit(model, task, protocol, share_prefixes=True)   # tags: (question_id, sample_idx)
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

from jaxtyping import Int
from torch import Tensor

__all__ = ["BatchRows", "FwdHook", "HookFn", "current_rows", "row_agnostic", "user_hooks"]

F = TypeVar("F", bound=Callable)

HookFn = Callable[..., Any]
"""A TransformerLens hook function ``fn(tensor, *, hook) -> tensor | None``."""
FwdHook = tuple[str, HookFn]
"""One entry of ``model.hooks(fwd_hooks=[...])``: a hook name and its function."""

_ROW_AGNOSTIC = "__reachlens_row_agnostic__"


def row_agnostic(fn: F) -> F:
    """Mark a hook function as treating every batch row alike (a function of each row's own
    activation only), so prefix sharing cannot change what it does. Returns ``fn``.

    >>> @row_agnostic
    ... def zero(x, hook):
    ...     return torch.zeros_like(x)
    """
    setattr(fn, _ROW_AGNOSTIC, True)
    return fn


def _is_row_agnostic(fn) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return bool(getattr(fn, _ROW_AGNOSTIC, False))


def user_hooks(model) -> list[str]:
    """Names of the modules of ``model`` carrying a hook not marked :func:`row_agnostic`.

    Counts TransformerLens hooks (``model.hooks``, ``add_hook``) and plain PyTorch forward,
    forward-pre and backward hooks on any submodule; not the bridge's own wiring (the capture
    hooks a ``BlockBridge`` installs on its first forward).
    """
    from transformer_lens.hook_points import HookPoint

    modules = list(model.named_modules())
    internal = {h.id for _, m in modules for h in getattr(m, "_capture_hook_handles", None) or ()}
    found = []
    for name, module in modules:
        ids = [*module._forward_hooks, *module._forward_pre_hooks, *module._backward_hooks]
        if not ids:
            continue
        ours = set(internal)
        if isinstance(module, HookPoint):
            for handle in list(module.fwd_hooks) + list(module.bwd_hooks):
                if _is_row_agnostic(getattr(handle, "user_hook", None)):
                    ours.add(handle.hook.id)
        if any(i not in ours for i in ids):
            hook_name = getattr(module, "name", None) if isinstance(module, HookPoint) else None
            found.append(hook_name or name.replace("_original_component.", ""))
    return found


@dataclass
class BatchRows:
    """Which rows of the running :func:`~reachlens.engine.generate` call each batch entry stands for."""

    row_of_entry: Int[Tensor, "rows"]
    """For each row of the call's chunk, its batch entry in this forward (-1: finished)."""
    chunk: tuple[int, ...]
    """The indices (into ``generate``'s ``rows``) of the chunk's rows."""
    tags: Sequence[Hashable]
    """``rows[i].tag`` for every row ``i`` of the call (the audit tags ``(question_id, sample_idx)``,
    ``sample_idx`` None for the greedy deployment)."""
    n_entries: int
    """Batch entries of this forward."""
    step: int
    """-1 for the prompt prefill, else the decoding step whose token this forward reads."""

    @cached_property
    def entries(self) -> tuple[tuple[int, ...], ...]:
        """Per batch entry, the indices into ``generate``'s ``rows`` of the live rows it stands for."""
        out: list[list[int]] = [[] for _ in range(self.n_entries)]
        for local, entry in enumerate(self.row_of_entry.tolist()):
            if entry >= 0:
                out[entry].append(self.chunk[local])
        return tuple(tuple(e) for e in out)


_CURRENT: contextvars.ContextVar[BatchRows | None] = contextvars.ContextVar("reachlens_batch_rows", default=None)


def current_rows() -> BatchRows:
    """The batch rows of the forward that is running now (call it from inside a hook).

    Raises:
        RuntimeError: outside a forward of :func:`reachlens.engine.generate`.
    """
    rows = _CURRENT.get()
    if rows is None:
        raise RuntimeError("current_rows() is only defined inside a hook, during reachlens.engine.generate")
    return rows


@contextlib.contextmanager
def _rows(rows: BatchRows) -> Iterator[None]:
    token = _CURRENT.set(rows)
    try:
        yield
    finally:
        _CURRENT.reset(token)
