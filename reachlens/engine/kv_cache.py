"""A preallocated KV cache with one slot per *route step*, not per layer index.

HuggingFace's ``DynamicCache`` keys its tensors by ``layer_idx`` and grows them with ``torch.cat``
on every decoding step (which re-copies the whole cache: about 16% of a batch-200 decode step on
a 2-core CPU). :class:`SlotKVCache` instead

* preallocates ``[batch, kv_heads, max_len, head_dim]`` per slot and writes each step in place,
  returning a view of the filled part;
* keys its slots by the position of a layer in the *route* being executed. A route that repeats a
  layer (``0,1,1,2``) gets two independent slots for layer 1; a layer-indexed cache would make the
  second pass overwrite the first's keys (the collision in PoLar's and Dr.LLM's caches).

The attention modules of HuggingFace and of TransformerLens' bridge both call
``cache.update(k, v, layer_idx)``. The executor announces the route step it is about to run with
:meth:`SlotKVCache.enter`, and ``update`` checks that the calling layer is the one the route names
at that step, so a cache can never be silently written by the wrong layer.

Numerics: the stored keys are bit-identical to what the layer produced; reading a view of a
preallocated buffer gives the same attention as reading a concatenated tensor.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Bool, Int
from torch import Tensor

__all__ = ["SlotKVCache"]


class SlotKVCache:
    """KV cache for one batch, laid out by route step.

    Args:
        route: the layer index executed at each step (``range(n_layers)`` for the normal model).
        max_len: the most positions the cache will ever hold (prompt plus new tokens).

    >>> cache = SlotKVCache(route=(0, 1, 1), max_len=16)
    >>> cache.n_slots
    3
    """

    def __init__(self, route: Sequence[int], max_len: int) -> None:
        self.route = tuple(int(i) for i in route)
        self.max_len = int(max_len)
        self.length = 0
        """Positions already committed (the next write lands at ``length``)."""
        self._slot: int | None = None
        self._pending = 0
        self._keys: list[Tensor | None] = [None] * len(self.route)
        self._values: list[Tensor | None] = [None] * len(self.route)

    @property
    def n_slots(self) -> int:
        return len(self.route)

    @property
    def batch_size(self) -> int | None:
        k = self._keys[0]
        return None if k is None else k.shape[0]

    # --- the protocol the attention modules use -------------------------------------------------
    def enter(self, slot: int) -> None:
        """Announce that route step ``slot`` runs next."""
        self._slot = slot

    def update(
        self, key_states: Tensor, value_states: Tensor, layer_idx: int, cache_kwargs: object = None
    ) -> tuple[Tensor, Tensor]:
        """Write this step's keys and values for the current slot; return everything cached so far."""
        slot = self._slot
        if slot is None:
            raise RuntimeError("SlotKVCache.update called outside a route step; call enter(slot) first")
        if self.route[slot] != layer_idx:
            raise RuntimeError(
                f"route step {slot} should run layer {self.route[slot]}, but layer {layer_idx} wrote "
                f"to the cache; the executor and the cache disagree about the route {self.route}"
            )
        n_new = key_states.shape[-2]
        end = self.length + n_new
        if end > self.max_len:
            raise RuntimeError(f"KV cache overflow: {end} positions > max_len={self.max_len}")
        if self._keys[slot] is None:
            b, h, _, d = key_states.shape
            self._keys[slot] = key_states.new_empty((b, h, self.max_len, d))
            self._values[slot] = value_states.new_empty((b, value_states.shape[1], self.max_len, value_states.shape[-1]))
        k_buf, v_buf = self._keys[slot], self._values[slot]
        assert k_buf is not None and v_buf is not None
        k_buf[:, :, self.length : end] = key_states
        v_buf[:, :, self.length : end] = value_states
        self._pending = n_new
        return k_buf[:, :, :end], v_buf[:, :, :end]

    def commit(self) -> None:
        """After a whole forward over the route: the new positions become part of the cache."""
        self.length += self._pending
        self._pending = 0
        self._slot = None

    # --- what HuggingFace code may ask a cache ------------------------------------------------
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    # --- batch surgery ---------------------------------------------------------------------------
    def select_rows(self, index: Int[Tensor, "new_batch"]) -> None:
        """Keep (and repeat) rows: row ``i`` of the result is old row ``index[i]``.

        Used once after a shared prefill to fan a prompt's cache out to its samples, and to drop
        finished rows mid-generation. Only the filled part of each buffer is copied.
        """
        for store in (self._keys, self._values):
            for s, buf in enumerate(store):
                if buf is None:
                    continue
                new = buf.new_empty((index.shape[0], *buf.shape[1:]))
                new[:, :, : self.length] = buf[:, :, : self.length].index_select(0, index)
                store[s] = new

    def key_padding(self, valid: Bool[Tensor, "batch pos"]) -> Bool[Tensor, "batch pos"]:
        """Convenience: ``valid`` cut to the committed length (for building masks)."""
        return valid[:, : self.length]
