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

**Arms.** A row may carry an *arm* (:attr:`reachlens.engine.Row.arm`: any hashable key naming an
intervention; None is the plain model). Rows of different arms never share a batch entry, so every
entry runs exactly one arm, and a hook built for some arms acts on those entries only:
:meth:`BatchRows.arm_index` (or :func:`arm_index` from inside a hook) gives, per entry, which of the
hook's arms it runs, as one index tensor per forward (no loop over rows). Such a hook is marked
:func:`per_arm` with the arms it serves: it is a function of each entry's own activation and arm, so
prefix sharing stays on under it, and :func:`~reachlens.engine.generate` refuses a row whose arm no
attached hook serves (a typo'd arm would otherwise run the plain model). The factories of
:mod:`reachlens.interventions` build such hooks (``arm=KEY``)::

    rows = [Row(q, tag=(qid, None), arm=arm) for arm in (None, "L3 mlp", "L4 mlp")]
    hooks = zero_ablation(model, 3, "mlp", arm="L3 mlp") + zero_ablation(model, 4, "mlp", arm="L4 mlp")
    with model.hooks(fwd_hooks=hooks):
        outs = generate(model, prompts, rows, protocol)   # three arms, one batch

Below the first block a per-arm hook of an arm sits in, that arm's entries compute what the plain model's do, so
the prefill runs them from there up only (:func:`plain_below`); a hook that is not per-arm, which may read every
entry, stops that at its block: from there every entry runs, and every hook sees every entry.

**Routes.** Rows on different layer routes (``Row.route``) decode in one batch too; a block then runs
on the entries whose route runs it at that step, and its hooks see those entries only: inside such a
block :func:`current_rows` describes them (:meth:`BatchRows.restrict`), so ``entries``, ``tags`` and
:func:`arm_index` stay aligned with the hook's tensor.

One module: the marks a hook carries (:func:`row_agnostic`, :func:`per_arm`) and what the engine tells it while a
forward runs (:class:`BatchRows`, :func:`current_rows`, :func:`arm_index`, :func:`arm_entries`) are the two sides of
one contract, which the engine reads as a whole (:func:`user_hooks`, :func:`plain_below`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

import numpy as np
import torch
from jaxtyping import Bool, Int
from torch import Tensor

from reachlens.engine.host_reads import to_device, to_host
from reachlens.errors import ReachlensError

__all__ = [
    "BatchRows", "FwdHook", "HookFn", "arm_entries", "arm_index", "arms_served", "current_rows", "keyed_arms",
    "per_arm", "plain_below", "row_agnostic", "user_hooks",
]

F = TypeVar("F", bound=Callable)

HookFn = Callable[..., Any]
"""A TransformerLens hook function ``fn(tensor, *, hook) -> tensor | None``."""
FwdHook = tuple[str, HookFn]
"""One entry of ``model.hooks(fwd_hooks=[...])``: a hook name and its function."""

_ROW_AGNOSTIC = "__reachlens_row_agnostic__"
_HF_CAPTURE = "transformers.utils.output_capturing"
"""Where HuggingFace's own output-capturing hooks are defined (not a user's hooks)."""
_ARMS = "__reachlens_arms__"


def row_agnostic(fn: F) -> F:
    """Mark a hook function as treating every batch row alike (a function of each row's own
    activation only), so prefix sharing cannot change what it does. Returns ``fn``.

    >>> @row_agnostic
    ... def zero(x, hook):
    ...     return torch.zeros_like(x)
    """
    setattr(fn, _ROW_AGNOSTIC, True)
    return fn


def per_arm(arms: Sequence[Hashable]) -> Callable[[F], F]:
    """Mark a hook function as acting only on the batch entries of ``arms`` (read with
    :func:`arm_index`), each from its own activation: safe under prefix sharing (rows of different
    arms never share an entry), and the arms it serves are known to :func:`arms_served`.

    >>> @per_arm(["L3 mlp"])
    ... def zero(x, *, hook):
    ...     idx = arm_index(("L3 mlp",), x.device)
    ...     return None if idx is None else x.masked_fill((idx >= 0).view(-1, 1, 1), 0)
    """
    served = tuple(arms)

    def mark(fn: F) -> F:
        setattr(fn, _ROW_AGNOSTIC, True)
        setattr(fn, _ARMS, served)
        return fn

    return mark


def _unwrap(fn):
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def _is_row_agnostic(fn) -> bool:
    return bool(getattr(_unwrap(fn), _ROW_AGNOSTIC, False))


def arms_served(model) -> dict[Hashable, list[str]]:
    """Every arm some attached :func:`per_arm` hook serves, with the hook points that serve it."""
    from transformer_lens.hook_points import HookPoint

    out: dict[Hashable, list[str]] = {}
    for name, module in model.named_modules():
        if not isinstance(module, HookPoint):
            continue
        for handle in module.fwd_hooks:
            for arm in getattr(_unwrap(getattr(handle, "user_hook", None)), _ARMS, ()):
                out.setdefault(arm, []).append(module.name or name)
    return out


def _hook_layer(name: str, n_layers: int) -> int:
    """The block a hook point named ``name`` belongs to: ``blocks.L.*`` is L, the final norm and the head come after
    every block (``n_layers``), anything else (the embedding) before the first (0)."""
    head, _, rest = name.partition(".")
    if head == "blocks":
        index = rest.partition(".")[0]
        return int(index) if index.isdigit() else 0
    return n_layers if head in ("ln_final", "unembed") else 0


def _other_hook_layer(model) -> int:
    """The first block carrying a hook that is not :func:`per_arm` (a plain or row-agnostic hook, which may read
    every entry's activation), ``len(model.blocks)`` when none does; the bridge's and HuggingFace's own wiring
    (see :func:`user_hooks`) is not counted."""
    from transformer_lens.hook_points import HookPoint

    for layer, block in enumerate(model.blocks):
        modules = list(block.modules())
        ours = {h.id for m in modules for h in getattr(m, "_capture_hook_handles", None) or ()}
        for module in modules:
            ids = [*module._forward_hooks, *module._forward_pre_hooks, *module._backward_hooks]
            if not ids:
                continue
            ours.update(i for i, fn in module._forward_hooks.items() if getattr(fn, "__module__", None) == _HF_CAPTURE)
            if isinstance(module, HookPoint):
                ours.update(h.hook.id for h in module.fwd_hooks
                            if getattr(_unwrap(getattr(h, "user_hook", None)), _ARMS, None) is not None)
            if any(i not in ours for i in ids):
                return layer
    return len(model.blocks)


def plain_below(model, arms: Sequence[Hashable]) -> tuple[int, ...]:
    """Per arm of ``arms``, the layer below which its entries compute exactly what the plain model's do: the first
    block where an attached :func:`per_arm` hook serving it sits, and no later than the first block carrying any
    other hook (one that may read every entry, so every entry must run there); ``len(model.blocks)`` where nothing
    differs in any block (the plain arm None, or an arm hooked only at the final norm or head).

    The engine's prefill runs an arm's entries only from that layer up, taking the plain entry's activations and
    keys below it (:class:`~reachlens.engine.stack.SharedBelow`).

    >>> plain_below(model, [None, "L3 mlp"])  # doctest: +SKIP
    (4, 3)
    """
    from transformer_lens.hook_points import HookPoint

    n = len(model.blocks)
    cap = _other_hook_layer(model)
    first: dict[Hashable, int] = {}
    for name, module in model.named_modules():
        if not isinstance(module, HookPoint):
            continue
        for handle in module.fwd_hooks:
            for arm in getattr(_unwrap(getattr(handle, "user_hook", None)), _ARMS, ()):
                first[arm] = min(first.get(arm, n), _hook_layer(module.name or name, n))
    return tuple(min(first.get(a, n), cap) for a in arms)


def user_hooks(model) -> list[str]:
    """Names of the modules of ``model`` carrying a hook not marked :func:`row_agnostic`.

    Counts TransformerLens hooks (``model.hooks``, ``add_hook``) and plain PyTorch forward,
    forward-pre and backward hooks on any submodule; not the bridge's own wiring (the capture
    hooks a ``BlockBridge`` installs on its first forward) nor HuggingFace's (the output-capturing
    hooks ``transformers`` installs the first time a forward is asked for hidden states or
    attentions, e.g. by ``run_with_cache``, which record nothing otherwise).
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
        for table in (module._forward_hooks, module._forward_pre_hooks):
            ours.update(i for i, fn in table.items() if getattr(fn, "__module__", None) == _HF_CAPTURE)
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
    arms: tuple[Hashable, ...] = (None,)
    """The distinct arms (``Row.arm``) of the call's rows, in order of first appearance."""
    arm_of_row: Int[Tensor, "rows"] | None = None
    """For each row of the chunk, the index of its arm in :attr:`arms` (None: every row runs ``arms[0]``)."""
    prompt_mask: Bool[Tensor, "entries pos"] | None = None
    """In the prefill: True at each entry's prompt tokens, False at its left padding (None while decoding)."""
    luts: dict = field(default_factory=dict, repr=False)
    """Per hook's arm tuple (by id), its lookup table over :attr:`arms` (shared by a chunk's forwards)."""
    row_host: np.ndarray | None = field(default=None, repr=False)
    """:attr:`row_of_entry` on the host (None: read from it once, when asked): what the entries and arms of this
    forward are found from, so that a hook's question reads nothing back from the device."""
    arm_host: np.ndarray | None = field(default=None, repr=False)
    """:attr:`arm_of_row` on the host (None: read from it once, when asked)."""
    _index: dict = field(default_factory=dict, repr=False)

    @cached_property
    def _rows_host(self) -> np.ndarray:
        return to_host(self.row_of_entry) if self.row_host is None else self.row_host

    @cached_property
    def _arm_of_entry_host(self) -> np.ndarray:
        rows = self._rows_host
        out = np.full(self.n_entries, -1, dtype=np.int64)
        live = rows >= 0
        if self.arm_of_row is None:
            out[rows[live]] = 0
        else:
            arm = to_host(self.arm_of_row) if self.arm_host is None else self.arm_host
            out[rows[live]] = arm[live]
        return out

    @cached_property
    def entries(self) -> tuple[tuple[int, ...], ...]:
        """Per batch entry, the indices into ``generate``'s ``rows`` of the live rows it stands for."""
        out: list[list[int]] = [[] for _ in range(self.n_entries)]
        for local, entry in enumerate(self._rows_host.tolist()):
            if entry >= 0:
                out[entry].append(self.chunk[local])
        return tuple(tuple(e) for e in out)

    @cached_property
    def arm_of_entry(self) -> Int[Tensor, "entries"]:
        """Per batch entry, the index in :attr:`arms` of the arm it runs (-1: a free slot); on the CPU."""
        return torch.from_numpy(self._arm_of_entry_host)

    def arm_index(self, keys: tuple[Hashable, ...], device: torch.device | str = "cpu") -> Int[Tensor, "entries"] | None:
        """Per batch entry, the position in ``keys`` of the arm it runs (-1: none of ``keys``), on
        ``device``; None when no entry of this forward runs any of ``keys``. Once per forward and
        ``keys`` tuple (a hook passes the same tuple object every time); on an accelerator one copy
        of :attr:`arm_of_entry` per forward serves every hook, and nothing waits on the device."""
        device = torch.device(device)
        key = (id(keys), device)
        found = self._index.get(key)
        if found is None:
            if not any(self._lut(keys, None)[a] >= 0 for a in self._arms_present):  # no tensor work for an absent arm
                found = (None,)
            elif device.type == "cpu":
                found = (self._lut(keys, device)[self.arm_of_entry],)
            else:
                arm = self._index.get(("arm_of_entry", device))
                if arm is None:
                    arm = self._index[("arm_of_entry", device)] = to_device(self._arm_of_entry_host, device)
                found = (self._lut(keys, device)[arm],)
            self._index[key] = found
        return found[0]

    def arm_entries(self, keys: tuple[Hashable, ...], device: torch.device | str = "cpu") -> Int[Tensor, "n"] | None:
        """The batch entries that run one of ``keys``, ascending, on ``device``; None when no entry of this forward
        does. Found on the CPU (no wait on an accelerator), once per forward and ``keys`` tuple: what a hook that
        writes its arms' rows only (``tensor.index_fill(0, entries, 0)``) indexes with."""
        device = torch.device(device)
        key = ("entries", id(keys), device)
        found = self._index.get(key)
        if found is None:
            lut = self._lut(keys, None)
            parts = [entries for a, entries in self._entries_of_arm.items() if lut[a] >= 0]
            entries = None if not parts else parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))
            if entries is not None:
                entries = torch.from_numpy(entries) if device.type == "cpu" else to_device(entries, device)
            found = self._index[key] = (entries,)
        return found[0]

    @cached_property
    def _entries_of_arm(self) -> dict[int, np.ndarray]:
        """Per arm some entry of this forward runs (its index in :attr:`arms`), those entries, ascending (host)."""
        arm = self._arm_of_entry_host
        order = np.argsort(arm, kind="stable")
        counts = np.bincount(arm + 1, minlength=len(self.arms) + 1).tolist()
        bounds = np.cumsum([0, *counts])
        return {a - 1: order[bounds[a]:bounds[a + 1]] for a in range(1, len(counts)) if counts[a]}

    def restrict(self, entries: Int[Tensor, "sub"] | np.ndarray) -> BatchRows:
        """The same forward seen by a block called on some of its entries only (rows on different routes, see
        :class:`~reachlens.engine.stack.RowRoutes`): entry ``i`` of the result is entry ``entries[i]`` here."""
        host = to_host(entries)  # a host array as the engine passes it; a tensor is read once
        where = np.full(self.n_entries + 1, -1, dtype=np.int64)  # the last -1: a finished row's entry
        where[host] = np.arange(host.size)
        rows = where[self._rows_host]
        mask = None if self.prompt_mask is None else self.prompt_mask[to_device(host, self.prompt_mask.device)]
        return BatchRows(torch.from_numpy(rows), self.chunk, self.tags, int(host.size), self.step, self.arms,
                         self.arm_of_row, mask, self.luts, row_host=rows, arm_host=self.arm_host)

    @cached_property
    def _arms_present(self) -> frozenset[int]:
        """The indices in :attr:`arms` of the arms some entry of this forward runs."""
        return frozenset(self._arm_of_entry_host.tolist()) - {-1}

    def _lut(self, keys: tuple[Hashable, ...], device: torch.device | None) -> Int[Tensor, "arms_plus_1"] | list[int]:
        """Per arm of the call, its position in ``keys`` (-1: absent), then a -1 that a free slot's -1 reads: a
        tensor on ``device``, or a list (``device`` None)."""
        lut = self.luts.get((id(keys), device))
        if lut is None or lut[0] is not keys:
            where = {k: i for i, k in enumerate(keys)}
            table = [where.get(a, -1) for a in self.arms] + [-1]
            lut = self.luts[(id(keys), device)] = (keys, table if device is None else torch.tensor(table, device=device))
        return lut[1]


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


def _running(keys: tuple[Hashable, ...]) -> BatchRows:
    """The batch rows of the running forward, for a per-arm hook serving ``keys``.

    Raises:
        ReachlensError: outside :func:`reachlens.engine.generate` (a per-arm hook acts on rows'
            arms, which only a generate call has).
    """
    rows = _CURRENT.get()
    if rows is None:
        raise ReachlensError(f"a hook for arms {list(keys)!r} ran outside reachlens.engine.generate; per-arm hooks act "
                             "on the rows' arms (Row.arm) of a generate call; build the hook without arm= to act on "
                             "every row of any forward")
    return rows


def arm_index(keys: tuple[Hashable, ...], device: torch.device | str = "cpu") -> Int[Tensor, "entries"] | None:
    """:meth:`BatchRows.arm_index` of the running forward (call it from inside a per-arm hook).

    Raises:
        ReachlensError: outside :func:`reachlens.engine.generate`.
    """
    return _running(keys).arm_index(keys, device)


def arm_entries(keys: tuple[Hashable, ...], device: torch.device | str = "cpu") -> Int[Tensor, "n"] | None:
    """:meth:`BatchRows.arm_entries` of the running forward (call it from inside a per-arm hook).

    Raises:
        ReachlensError: outside :func:`reachlens.engine.generate`.
    """
    return _running(keys).arm_entries(keys, device)


@contextlib.contextmanager
def restricted_rows(entries: Int[Tensor, "sub"] | np.ndarray) -> Iterator[None]:
    """Within the block, :func:`current_rows` (if a generate call set it) describes only ``entries`` of its forward:
    a block runs on those entries alone (:meth:`BatchRows.restrict`)."""
    rows = _CURRENT.get()
    if rows is None:
        yield
        return
    with _rows(rows.restrict(entries)):
        yield


@contextlib.contextmanager
def _rows(rows: BatchRows) -> Iterator[None]:
    token = _CURRENT.set(rows)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def keyed_arms(items, cls: type, *, caller: str, item: str, arm: str, itself: str) -> list[tuple[Any, Any]]:
    """``(arm key, intervention)`` pairs of an ``*_arms`` factory's argument: a sequence keys each intervention by
    itself, a mapping names the arm of each. Refused in one line: none given, an arm key None (the plain model's
    arm), a value not a ``cls``.

    >>> keyed_arms([g], Graft, caller="graft_arms", item="graft", arm="graft", itself="the Graft itself")  # doctest: +SKIP
    """
    keyed = list(items.items()) if isinstance(items, Mapping) else [(x, x) for x in items]
    if not keyed:
        raise ReachlensError(f"{caller} needs at least one {item}")
    if any(k is None for k, _ in keyed):
        raise ReachlensError(f"arm None is the plain model; key each {arm} arm by {itself} or a name")
    for k, x in keyed:
        if not isinstance(x, cls):
            article = "an" if cls.__name__[0] in "AEIOU" else "a"
            raise ReachlensError(f"arm {k!r}: {x!r} is not {article} {cls.__name__}")
    return keyed
