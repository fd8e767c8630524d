"""A preallocated KV cache with one slot per *route step*, and a shared-prefix mode for K samples.

One module (about 490 lines) because the slot cache, its shared-prefix mode and the row selection that fans
a prompt out act on one set of tensors.

HuggingFace's ``DynamicCache`` keys its tensors by ``layer_idx`` and grows them with ``torch.cat``
on every decoding step (which re-copies the whole cache: about 16% of a batch-200 decode step on
a 2-core CPU). :class:`SlotKVCache` instead

* preallocates ``[batch, kv_heads, max_len, head_dim]`` per slot and writes each step in place;
* keys its slots by the position of a layer in the *route* being executed. A route that repeats a
  layer (``0,1,1,2``) gets two independent slots for layer 1; a layer-indexed cache would make the
  second pass overwrite the first's keys (the collision in PoLar's and Dr.LLM's caches);
* after a prompt is prefilled once, :meth:`SlotKVCache.share` fans it out to its rows (K samples
  and the greedy row) *without copying it*: the prompt's keys are stored once per prompt and each
  row stores only what it generated. At K=200 a copied prompt cache makes every decoding step
  re-read 200 copies of the prompt's keys, which makes attention memory-bound; the shared layout
  lets the fused attention path (:mod:`reachlens.engine.fast_attention`) score all rows of a prompt
  against its keys in one matrix product ("cascade" attention);
* when every row continues its own prompt and none will fork (greedy rows, one per prompt and arm) there is
  nothing to share, and each row's prompt keys open its own buffer instead, so its attention reads one buffer, not two parts;
* lets a decoder branch rows in place: :meth:`SlotKVCache.copy_rows` copies the generated part of
  some rows into others (free slots, or new ones beyond the current batch, the buffers keeping spare
  capacity), which is how the sampler forks a shared sample prefix when its rows draw different
  tokens without re-copying every other row.

The attention modules of HuggingFace and of TransformerLens' bridge call
``cache.update(k, v, layer_idx)`` and receive every cached key; a family's own forward (the engine's
generic path) also sizes its masks with :meth:`SlotKVCache.get_mask_sizes`. A slot of a
sliding-window layer (Gemma 2/3, Mistral) keeps every position but hands attention only the last
``window - 1`` of them and the new ones, as HuggingFace's sliding cache layers do, with mask sizes
to match, so a sliding layer's attention costs its window, not the whole sequence. The executor announces the route
step it is about to run with :meth:`SlotKVCache.enter`, and ``update`` checks that the calling layer
is the one the route names at that step, so a cache is never silently written by the wrong layer.
In shared mode ``update`` still returns the full per-row keys (gathered), so any attention
implementation, hooked or not, stays correct; only the fused path reads the parts separately.

Numerics: stored keys are bit-identical to what the layer produced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from reachlens.engine.host_reads import to_device, to_host

__all__ = ["SlotKVCache", "SharedPrefix"]

_GROW = 16
"""Positions by which a shared-mode buffer of generated keys and values grows: a product over up to 15 padded
positions costs less than a batched product over a slice of a longer buffer (one small product per row on a
CPU), or than re-laying the buffer at every step."""


@dataclass
class SharedPrefix:
    """How rows map onto the prompts whose keys they share."""

    group: Int[Tensor, "batch"]
    """Prompt index of each row."""
    length: int
    """Positions in the shared prompt part (padded width)."""
    n_groups: int
    width: int
    """Most rows of any one prompt (the padded group size used by grouped matrix products)."""
    flat: Int[Tensor, "batch"]
    """``group * width + rank within group``: where a row sits in the padded grouped layout."""
    order: Int[Tensor, "batch"]
    """Rows sorted by group (stable)."""
    counts: tuple[int, ...]
    """Rows per group."""
    identity: bool = False
    """Row ``i`` continues prompt ``i`` and there are as many rows as prompts (``group`` is
    ``arange``): a row's prompt part is read in place, with no gather."""

    host: np.ndarray | None = None
    """:attr:`group` on the host (what every later layout is computed from, so none reads the device)."""

    @classmethod
    def build(cls, group: Tensor | np.ndarray, length: int, n_groups: int,
              device: torch.device | str | None = None) -> SharedPrefix:
        """The layout of rows continuing prompts ``group`` (a host array, or a tensor read once), on ``device``
        (default: the tensor's, else the CPU)."""
        device = (group.device if isinstance(group, Tensor) else "cpu") if device is None else device
        host = to_host(group)
        counts = np.bincount(host, minlength=n_groups)
        width = int(counts.max()) if host.size else 1
        order = np.argsort(host, kind="stable")
        rank = np.empty_like(host)
        rank[order] = np.arange(host.size) - (np.cumsum(counts) - counts)[host[order]]
        identity = host.size == n_groups and bool((host == np.arange(n_groups)).all())
        return cls(to_device(host, device), length, n_groups, width, to_device(host * width + rank, device),
                   to_device(order, device), tuple(counts.tolist()), identity, host)

    @property
    def padding_ratio(self) -> float:
        """Rows of the padded grouped layout per real row (1.0: groups of equal size)."""
        return self.n_groups * self.width / max(1, int(self.group.shape[0]))


class SlotKVCache:
    """KV cache for one batch, laid out by route step.

    Args:
        route: the layer index executed at each step (``range(n_layers)`` for the normal model).
        max_len: the most positions the cache will ever hold (prompt plus new tokens).
        windows: per slot, the sliding window of its layer (None: full attention).
        grow: plain-mode buffers hold the positions written so far, rounded up to :data:`_GROW`, and grow as they
            are written (a cache that :meth:`share` turns into one buffer per row right after the prefill keeps its
            buffers, with no copy and no ``max_len``-sized allocation); False: ``max_len`` positions at once.

    >>> cache = SlotKVCache(route=(0, 1, 1), max_len=16)
    >>> cache.n_slots
    3
    """

    def __init__(self, route: Sequence[int | frozenset[int]], max_len: int, *,
                 windows: Sequence[int | None] | None = None, grow: bool = False) -> None:
        self.route: tuple[int | frozenset[int], ...] = tuple(i if isinstance(i, frozenset) else int(i) for i in route)
        """The layer run at each route step, or the set of layers run there when rows are on different routes
        (:class:`~reachlens.engine.stack.RowRoutes`; each block call then enters the rows that run it)."""
        self.max_len = int(max_len)
        self.grow = grow
        self.windows: tuple[int | None, ...] = tuple(windows) if windows is not None else (None,) * len(self.route)
        """Per slot, the sliding window of the layer it holds (None: full attention). A sliding slot
        keeps every position but hands attention only the last ``window - 1`` cached ones (what
        HuggingFace's sliding cache layers keep), sized to match the family's sliding mask."""
        if len(self.windows) != len(self.route):
            raise ValueError(f"{len(self.windows)} windows for a route of {len(self.route)} steps")
        self.length = 0
        """Positions already committed (the next write lands at ``length``)."""
        self.shared: SharedPrefix | None = None
        self.batch: int | None = None
        """Rows in use (the buffers may hold more, see :meth:`copy_rows`); None until the first write."""
        self._slot: int | None = None
        self._layer: int | None = None
        self._rows: Tensor | None = None
        self._rows_host: np.ndarray | None = None
        self._row_shared: tuple[Tensor, SharedPrefix] | None = None
        self._pending = 0
        # per slot: full [batch, h, max_len, d] (plain mode) or the row-own part (shared mode)
        self._keys: list[Tensor | None] = [None] * len(self.route)
        self._values: list[Tensor | None] = [None] * len(self.route)
        # shared mode: the prompts' part, [n_groups, h, prefix_len, d] per slot
        self._prefix_keys: list[Tensor | None] = [None] * len(self.route)
        self._prefix_values: list[Tensor | None] = [None] * len(self.route)

    @property
    def n_slots(self) -> int:
        return len(self.route)

    def enter(self, slot: int, *, layer: int | None = None, rows: Int[Tensor, "sub"] | None = None,
              rows_host: np.ndarray | None = None) -> None:
        """Announce that route step ``slot`` runs next: ``layer`` (the route's layer at that step when None) on the
        batch rows ``rows`` (None: every row; ``rows_host``: the same on the host, else read from ``rows`` once
        if the shared layout needs them)."""
        self._slot, self._layer, self._rows, self._rows_host = slot, layer, rows, rows_host

    def _check(self, layer_idx: int) -> int:
        slot = self._slot
        if slot is None:
            raise RuntimeError("SlotKVCache.update called outside a route step; call enter(slot) first")
        at_step = self.route[slot]
        expected = at_step if self._layer is None else self._layer
        if layer_idx != expected or layer_idx not in (at_step if isinstance(at_step, frozenset) else (at_step,)):
            raise RuntimeError(
                f"route step {slot} should run layer {expected}, but layer {layer_idx} wrote "
                f"to the cache; the executor and the cache disagree about the route {self.route}"
            )
        return slot

    @property
    def row_shared(self) -> SharedPrefix | None:
        """:attr:`shared` for the rows the current block runs on (the whole of it when every row runs)."""
        rows = self._rows
        if self.shared is None or rows is None:
            return self.shared
        if self._row_shared is None or self._row_shared[0] is not rows:
            self._row_shared = (rows, SharedPrefix.build(self.shared.host[to_host(rows) if self._rows_host is None else
                                                                           self._rows_host], self.shared.length,
                                                         self.shared.n_groups, rows.device))
        return self._row_shared[1]

    def append(self, key_states: Tensor, value_states: Tensor, layer_idx: int) -> int:
        """Write this step's keys and values for the current slot; return the slot."""
        slot = self._check(layer_idx)
        n_new = key_states.shape[-2]
        if self.length + n_new > self.max_len:
            raise RuntimeError(f"KV cache overflow: {self.length + n_new} positions > max_len={self.max_len}")
        b = key_states.shape[0]
        if self.batch is None:
            self.batch = b
        expected = self.batch if self._rows is None else int(self._rows.shape[0])
        if b != expected:
            raise RuntimeError(f"a forward over {b} rows wrote to a cache of {expected} rows")
        if self.shared is not None:
            self._append_own(slot, key_states, value_states)
        else:
            need = self.length + n_new
            for store, new in ((self._keys, key_states), (self._values, value_states)):
                buf = store[slot]
                if buf is None or need > buf.shape[2]:
                    room = min(self.max_len, -(-need // _GROW) * _GROW) if self.grow else self.max_len
                    grown = new.new_empty((self.batch if buf is None else buf.shape[0], new.shape[1], room,
                                           new.shape[-1]))
                    if buf is not None:
                        grown[:, :, : self.length] = buf[:, :, : self.length]
                    store[slot] = grown
            k_buf, v_buf = self._keys[slot], self._values[slot]
            assert k_buf is not None and v_buf is not None
            rows = slice(None, b) if self._rows is None else self._rows
            k_buf[rows, :, self.length : self.length + n_new] = key_states
            v_buf[rows, :, self.length : self.length + n_new] = value_states
        self._pending = n_new
        return slot

    def _append_own(self, slot: int, key_states: Tensor, value_states: Tensor) -> None:
        """Shared mode: a row's generated keys and values live in buffers grown :data:`_GROW` positions at a time
        (zeros beyond what was written), so that both products of
        :func:`~reachlens.engine.fast_attention.cascade_attention` read whole contiguous buffers: a batched
        product over a strided batch (a slice of a longer buffer) runs one small product per row."""
        assert self.shared is not None and self.batch is not None
        b, n_new = self.batch, key_states.shape[-2]
        start = self.length - self.shared.length
        for store, new in ((self._keys, key_states), (self._values, value_states)):
            buf = store[slot]
            if buf is None or start + n_new > buf.shape[2]:
                room = min(self.max_len - self.shared.length, -(-(start + n_new) // _GROW) * _GROW)
                # the batch's b rows (spare rows a compaction left go; a fork past them grows the buffer again):
                # what was written (a slot of rows on different routes may have gone unwritten for some steps,
                # while no row's route ran it: those positions are zeros, and no row reads them), then zeros
                keep = 0 if buf is None else min(start, buf.shape[2])
                zeros = new.new_zeros((b, new.shape[1], room - keep, new.shape[-1]))
                store[slot] = buf = zeros if buf is None or not keep else torch.cat((buf[:b, :, :keep], zeros), dim=2)
            buf[slice(None, b) if self._rows is None else self._rows, :, start : start + n_new] = new

    def copy_pending(self, slot: int, src: Int[Tensor, "n"], dst: Int[Tensor, "n"]) -> None:
        """Plain mode, within a forward: the positions this forward wrote to ``slot`` for rows ``src`` become rows
        ``dst``'s too (rows that did not run the slot's layer, equal to ``src`` below it:
        :class:`~reachlens.engine.stack.SharedBelow`)."""
        if self.shared is not None:
            raise RuntimeError("copy_pending is for the prefill, before the cache is shared")
        positions = slice(self.length, self.length + self._pending)
        for store in (self._keys, self._values):
            buf = store[slot]
            assert buf is not None
            buf[dst, :, positions] = buf[src, :, positions]

    def _written(self) -> int:
        """Row-own positions written so far, this forward's included (every position in plain mode)."""
        return self.length + self._pending - (self.shared.length if self.shared else 0)

    def own(self, slot: int) -> tuple[Tensor, Tensor]:
        """The row-own keys and values of ``slot`` up to the current write (all of them in plain mode)."""
        end, start = self._written(), self._offset(slot + 1)
        k, v = self._keys[slot], self._values[slot]
        assert k is not None and v is not None
        rows = slice(None, self.batch) if self._rows is None else self._rows
        return k[rows, :, start:end], v[rows, :, start:end]

    def own_padded(self, slot: int) -> tuple[Tensor, Tensor, int]:
        """Shared mode: the row-own key and value buffers of ``slot`` (``[batch, h, room, d]`` each, contiguous,
        zeros beyond what was written) and how many of their positions are written (``own <= room``)."""
        k, v = self._keys[slot], self._values[slot]
        assert self.shared is not None and k is not None and v is not None
        if self._rows is not None:
            return k.index_select(0, self._rows), v.index_select(0, self._rows), self._written()
        return k[: self.batch], v[: self.batch], self._written()

    def _offset(self, mask_index: int) -> int:
        """First cached position a sliding slot still attends to (0 for full attention)."""
        window = self.windows[mask_index - 1] if mask_index > 0 else None
        return 0 if window is None else max(self.length - window + 1, 0)

    def prefix(self, slot: int) -> tuple[Tensor, Tensor]:
        """The shared prompt keys and values of ``slot``, ``[n_groups, h, prefix_len, d]``."""
        k, v = self._prefix_keys[slot], self._prefix_values[slot]
        assert k is not None and v is not None
        return k, v

    def update(
        self, key_states: Tensor, value_states: Tensor, layer_idx: int, cache_kwargs: object = None
    ) -> tuple[Tensor, Tensor]:
        """HuggingFace's cache protocol: write, then return every cached key and value per row."""
        slot = self.append(key_states, value_states, layer_idx)
        k, v = self.own(slot)
        if self.shared is None:
            return k, v
        pk, pv = self.prefix(slot)
        g = self.row_shared.group
        return torch.cat([pk.index_select(0, g), k], dim=2), torch.cat([pv.index_select(0, g), v], dim=2)

    def commit(self) -> None:
        """After a whole forward over the route: the new positions become part of the cache."""
        self.length += self._pending
        self._pending = 0
        self._slot = self._layer = self._rows = self._row_shared = None

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    # What a family's own forward asks of its cache when it builds its attention masks. HuggingFace
    # sizes the full-attention mask with mask index 0 (for a cache that is not its own ``Cache``
    # class) and the sliding mask with ``is_sliding.index(True)``, so the mask index space here is
    # 0 = full attention, slot + 1 = that slot.
    @property
    def is_sliding(self) -> list[bool]:
        """Per mask index (0: full attention, ``slot + 1``: that slot): whether it is a sliding window."""
        return [False] + [w is not None for w in self.windows]

    def get_query_offset(self, layer_idx: int = 0) -> int:
        return self.length

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        """(key length, key offset) of the attention mask of mask index ``layer_idx`` for ``query_length``
        new positions: the whole cache for full attention, the last ``window - 1`` cached positions and
        the new ones for a sliding window (the keys :meth:`update` returns for that slot)."""
        offset = self._offset(layer_idx)
        return self.length - offset + query_length, offset

    # --- batch surgery ---------------------------------------------------------------------------
    def _device(self) -> torch.device:
        """Where the buffers live."""
        bufs = [b for store in (self._keys, self._values, self._prefix_keys, self._prefix_values) for b in store
                if b is not None]
        return bufs[0].device if bufs else torch.device("cpu")

    def share(self, group: Int[Tensor, "batch"] | np.ndarray, *, forks: bool = True) -> None:
        """Fan the prefilled prompts out to rows without copying: row ``i`` continues prompt ``group[i]``.

        ``forks=False`` promises that no row will be copied into another (:meth:`copy_rows`: greedy rows never fork).
        Then, when every row continues its own prompt (``group`` is ``arange``: greedy rows, one per prompt and arm),
        there is nothing to share: each row's prompt keys become the start of its own buffer (grown :data:`_GROW` positions
        at a time, as generated keys are), so attention reads one buffer per row, one product for the scores and one
        for the values, instead of a prompt part and an own part."""
        if self.shared is not None:
            raise RuntimeError("the cache is already shared")
        if any(w is not None for w in self.windows):
            raise RuntimeError("a cache with sliding-window slots cannot share its prompt part")
        filled = [s for s in range(self.n_slots) if self._keys[s] is not None and self._values[s] is not None]
        device = group.device if isinstance(group, Tensor) else self._device()
        group = to_host(group)  # the rows' layout is host bookkeeping (a tensor is read once)
        n_groups = self.batch if filled and self.batch is not None else int(group.max()) + 1
        alone = not forks and group.size == n_groups and bool((group == np.arange(n_groups)).all())
        room = min(self.max_len, -(-self.length // _GROW) * _GROW)
        for s in filled:
            k, v = self._keys[s][:n_groups], self._values[s][:n_groups]  # a compaction in place leaves spare rows
            if alone:  # the prompt part opens the row's own buffer; the prompts' part is empty
                for store, prefix, buf in ((self._keys, self._prefix_keys, k), (self._values, self._prefix_values, v)):
                    if buf.shape[2] == room and buf.is_contiguous():  # a growing cache's buffer is already one
                        own = buf
                        own[:, :, self.length :] = 0
                    else:
                        own = buf.new_zeros((n_groups, buf.shape[1], room, buf.shape[-1]))
                        own[:, :, : self.length] = buf[:, :, : self.length]
                    store[s], prefix[s] = own, buf.new_empty((n_groups, buf.shape[1], 0, buf.shape[-1]))
                continue
            self._prefix_keys[s] = k[:, :, : self.length].contiguous()
            self._prefix_values[s] = v[:, :, : self.length].contiguous()
            self._keys[s] = self._values[s] = None
        self.shared = SharedPrefix.build(group, 0 if alone else self.length, n_groups, device)
        self.batch = int(group.shape[0])

    def select_rows(self, index: Int[Tensor, "new_batch"] | np.ndarray) -> None:
        """Keep (and repeat) rows: row ``i`` of the result is old row ``index[i]``.

        When the batch does not grow (a compaction: :class:`~reachlens.engine.sample_tree.SampleTree` fills free
        rows from the end of the batch), only the rows that move are copied, in place (each moved row's source is
        read before any is written; the buffers keep their capacity). Otherwise, in plain mode this copies the filled
        part of each buffer; in shared mode only the rows' own generated part is copied and the prompts' keys stay
        where they are.
        """
        filled = self.length - (self.shared.length if self.shared else 0)
        device = index.device if isinstance(index, Tensor) else self._device()
        host = to_host(index)  # which rows move is found on the host (a tensor is read once)
        index = to_device(host, device)
        n = int(host.shape[0])
        in_place = self.batch is not None and n <= self.batch
        if in_place:
            moved_host = np.flatnonzero(host != np.arange(n))
            moved, src = to_device(moved_host, device), to_device(host[moved_host], device)
        for store in (self._keys, self._values):
            for s, buf in enumerate(store):
                if buf is None:
                    continue
                # shared mode: whole rows (exactly as long as written for keys, finite beyond it for values)
                width = buf.shape[2] if self.shared is not None else filled
                if in_place:
                    if moved_host.size:
                        part = buf if width == buf.shape[2] else buf[:, :, :width]
                        part.index_copy_(0, moved, part.index_select(0, src))
                    continue
                if self.shared is not None:
                    store[s] = buf.index_select(0, index)
                    continue
                new = buf.new_empty((n, *buf.shape[1:]))
                new[:, :, :filled] = buf[:, :, :filled].index_select(0, index)
                store[s] = new
        if self.shared is not None:
            group, n_groups = self.shared.host[host], self.shared.n_groups
            if group.size and int(np.bincount(group).max()) == 1:
                # one row per prompt (greedy rows, one per prompt and arm): the prompts' parts follow the
                # rows, copied once here, so that every later step reads them in place (no gather)
                for store in (self._prefix_keys, self._prefix_values):
                    for s, buf in enumerate(store):
                        if buf is not None:
                            store[s] = buf.index_select(0, to_device(group, buf.device))
                group, n_groups = np.arange(group.size), group.size
            self.shared = SharedPrefix.build(group, self.shared.length, n_groups, device)
        self.batch = n

    def copy_rows(self, src: Int[Tensor, "n"] | np.ndarray, dst: Int[Tensor, "n"] | np.ndarray) -> None:
        """Row ``dst[i]`` becomes a copy of row ``src[i]`` (generated part; in shared mode the prompt
        stays shared). A ``dst`` at or beyond :attr:`batch` grows the batch to ``max(dst) + 1``; the
        buffers grow by doubling, so forking a few rows never re-copies the others. ``src`` and ``dst``
        must not overlap."""
        if tuple(src.shape) != tuple(dst.shape):
            raise ValueError(f"src {tuple(src.shape)} and dst {tuple(dst.shape)} differ in shape")
        device = dst.device if isinstance(dst, Tensor) else self._device()
        src_host, dst_host = to_host(src), to_host(dst)  # host bookkeeping (a tensor is read once)
        if dst_host.size == 0:
            return
        if self.batch is None:
            raise RuntimeError("copy_rows on an empty cache")
        new_batch = max(self.batch, int(dst_host.max()) + 1)
        filled = self.length - (self.shared.length if self.shared else 0)
        src, dst = to_device(src_host, device), to_device(dst_host, device)
        for store in (self._keys, self._values):
            for s, buf in enumerate(store):
                if buf is None:
                    continue
                # shared mode: whole rows (the buffers stay finite beyond what was written)
                width = buf.shape[2] if self.shared is not None else filled
                if buf.shape[0] < new_batch:
                    grown = buf.new_empty((max(new_batch, 2 * buf.shape[0]), *buf.shape[1:]))
                    grown[: self.batch, :, :width] = buf[: self.batch, :, :width]
                    store[s] = buf = grown
                buf[dst, :, :width] = buf[src, :, :width]
        if self.shared is not None:
            group = self.shared.host
            if new_batch > group.shape[0]:
                group = np.concatenate([group, np.zeros(new_batch - group.shape[0], dtype=group.dtype)])
            group = group.copy()
            group[dst_host] = group[src_host]
            self.shared = SharedPrefix.build(group, self.shared.length, self.shared.n_groups, device)
        self.batch = new_batch


def grouped_matmul(
    x: Float[Tensor, "batch h m k"], mats: Float[Tensor, "groups h k n"], shared: SharedPrefix
) -> Float[Tensor, "batch h m n"]:
    """``x[b] @ mats[group[b]]`` for every row, as one batched product per group (no gather of ``mats``).

    Groups of similar size are padded to one batched product; very unequal groups (a confident
    prompt with one live prefix beside a diverse one with hundreds) run one product per group over
    its rows only, so the padding never multiplies the work.
    """
    b, h, m, k = x.shape
    if shared.identity:  # row i continues prompt i: its matrix is read in place
        return torch.matmul(x, mats)
    if shared.width == 1:  # one row per group at most (one greedy row per prompt, or per (prompt, arm))
        # each row's own matrix, gathered in the operand's memory layout (a transposed view stays
        # one), so every product runs the same kernel as the per-group paths below
        if mats.mT.is_contiguous():
            return torch.matmul(x, mats.mT.index_select(0, shared.group).mT)
        return torch.matmul(x, mats.index_select(0, shared.group))
    if shared.n_groups == 1:
        y = torch.matmul(x.permute(1, 0, 2, 3).reshape(h, b * m, k), mats[0])
        return y.view(h, b, m, -1).permute(1, 0, 2, 3)
    if shared.padding_ratio > 1.5:
        xs = x.index_select(0, shared.order).permute(1, 0, 2, 3)  # [h, b, m, k], rows by group
        parts = []
        for g, part in enumerate(torch.split(xs, shared.counts, dim=1)):
            if part.shape[1]:
                hp, bp = part.shape[:2]
                parts.append(torch.matmul(part.reshape(hp, bp * m, k), mats[g]).view(hp, bp, m, -1))
        y = torch.cat(parts, dim=1).permute(1, 0, 2, 3)
        out = torch.empty_like(y)
        out[shared.order] = y
        return out
    g, w = shared.n_groups, shared.width
    padded = x.new_zeros((g * w, h, m, k))
    padded[shared.flat] = x
    padded = padded.view(g, w, h, m, k).permute(0, 2, 1, 3, 4).reshape(g, h, w * m, k)
    y = torch.matmul(padded, mats)  # [g, h, w*m, n]
    n = y.shape[-1]
    y = y.view(g, h, w, m, n).permute(0, 2, 1, 3, 4).reshape(g * w, h, m, n)
    return y.index_select(0, shared.flat)
