"""The sample tree of one decoding chunk: which batch slot each sample is decoded in.

K samples of a prompt start as one prefix (the prompt). Samples whose tokens so far agree have the
same next-token distribution, so the decoder runs one batch entry per *distinct prefix*: a **node**
of the tree. A node lives in a **slot** (a row of the batch and of the KV cache); the **rows** (the
samples) it stands for each draw their own token from its distribution. :meth:`SampleTree.advance`
takes every live row's token for this step and says what the decoder must do before the next
forward:

* **finished**: rows that emitted EOS or completed a stop string (they leave their node);
* **forks**: a node whose rows drew different tokens has several children. Its first child (by
  token id) continues in the node's slot; each other child is a fork, whose slot is a copy of the
  parent's: ``(src, dst)`` pairs for the cache. A fork takes a free slot (one whose node finished
  or had no child) if there is one, else a new slot appended to the batch (``grown``);
* **compaction**: when a slot is free after the forks, the slots in use at the end of the batch move
  into the free ones (``compaction[i]`` is the old slot of new slot ``i``; a slot below the new batch
  size keeps its place), so a forward never computes a free slot and the cache copies only the moved
  rows;
* **inputs**: the token each slot feeds to the next forward (``pad_id`` in a free slot).

With ``merge=False`` (one batch entry per live sample, nothing shared after the prompt) every row is a node of its
own: rows of a prompt start in the prompt's slot, each but the first forks from it at the first step (a copy of the
prompt's cache row, or none where the cache reads the prompt in place), and from then on a slot holds one row;
finished rows' slots are still compacted away, so a forward computes live samples only.

With ``share=False`` (one row per sample: what a hook sees when it is not row-agnostic, see
:mod:`reachlens.engine.hooks`) each row starts in a slot of its own, so no node ever forks, and
no compaction runs: row ``i`` keeps slot ``i`` to the end (a finished row's slot is fed padding).

The tree is bookkeeping on the host and needs no model: the decoding loop in
:mod:`reachlens.engine.generate` owns the logits, the cache and the device tensors, and applies what
each step returns. It also keeps every row's tokens, log-probabilities and finish reason. Its state is numpy
arrays (the ``*_host`` attributes), which no host read touches: the one read of a decoding step is the copy of its
new tokens that :meth:`SampleTree.advance` is given (see :mod:`reachlens.engine.host_reads`); its tensors
(:attr:`SampleTree.live`, :attr:`SampleTree.slot_of_row`, a :class:`TreeStep`'s) are views of those arrays.

>>> tree = SampleTree(torch.zeros(3, dtype=torch.long), n_slots=1, max_new_tokens=4, stopper=checker)  # doctest: +SKIP
>>> step = tree.advance(torch.tensor([7, 7, 9]))  # doctest: +SKIP
>>> step.forks, step.inputs  # doctest: +SKIP
((tensor([0]), tensor([1])), tensor([7, 9]))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from reachlens.engine.host_reads import to_host

__all__ = ["FinishReason", "SampleTree", "StopCheck", "TreeStep"]

FinishReason = Literal["eos", "stop", "length"]


@runtime_checkable
class StopCheck(Protocol):
    """What the tree asks of a stop checker (:class:`~reachlens.engine.stopping.StopChecker`)."""

    def check(
        self, chosen: np.ndarray, history: np.ndarray, rows: np.ndarray, step: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(hit EOS, hit a stop string) per child, ``history[rows[b], :step + 1]`` being its tokens: numpy arrays on
        the host (int64; the answers bool)."""
        ...


@dataclass(frozen=True)
class TreeStep:
    """What one :meth:`SampleTree.advance` asks of the decoder, in this order: copy the forks'
    cache rows, compact, then forward ``inputs``. Host arrays (the ``*_host`` fields), each also a tensor view."""

    finished_host: np.ndarray
    """Rows that finished at this step (EOS or a stop string)."""
    fork_src_host: np.ndarray
    """Slots whose cache rows are copied ..."""
    fork_dst_host: np.ndarray
    """... into these slots (free ones first, then new ones at the end of the batch)."""
    grown: int
    """Slots appended to the batch by the forks (the batch had ``n_slots - grown`` before them)."""
    compaction_host: np.ndarray | None
    """After the forks: new slot ``i`` is old slot ``compaction[i]`` (None: no compaction)."""
    inputs_host: np.ndarray | None
    """The token each slot feeds to the next forward (None: decoding is over)."""

    @property
    def done(self) -> bool:
        return self.inputs_host is None

    @property
    def finished(self) -> Int[Tensor, "f"]:
        return torch.from_numpy(self.finished_host)

    @property
    def fork_src(self) -> Int[Tensor, "forks"]:
        return torch.from_numpy(self.fork_src_host)

    @property
    def fork_dst(self) -> Int[Tensor, "forks"]:
        return torch.from_numpy(self.fork_dst_host)

    @property
    def compaction(self) -> Int[Tensor, "kept"] | None:
        return None if self.compaction_host is None else torch.from_numpy(self.compaction_host)

    @property
    def inputs(self) -> Int[Tensor, "slots"] | None:
        return None if self.inputs_host is None else torch.from_numpy(self.inputs_host)


class SampleTree:
    """The nodes of one chunk's sample tree, their slots, and every row's tokens so far.

    Args:
        slot_of_row: the slot each row starts in (its prompt's slot after the prefill; with
            ``share=False``, ``arange(rows)``).
        n_slots: slots of the prefill batch.
        max_new_tokens: the most tokens a row generates.
        stopper: finds children that hit EOS or a stop string (:class:`StopCheck`).
        share: whether rows share nodes; False keeps one slot per row and never compacts.
        merge: with ``share``, whether rows whose tokens agree stay one node; False: every row is its own node
            (forked from its prompt's slot at the first step), finished ones still compacted away.
        pad_id: the token fed to a free slot (and the filler of unwritten token positions).
    """

    def __init__(
        self,
        slot_of_row: Int[Tensor, "rows"] | np.ndarray,
        n_slots: int,
        max_new_tokens: int,
        stopper: StopCheck,
        *,
        share: bool = True,
        merge: bool = True,
        pad_id: int = 0,
    ) -> None:
        self.slot_host: np.ndarray = to_host(slot_of_row).copy()
        """Each row's slot in the next forward (-1 once the row finished)."""
        n = int(self.slot_host.shape[0])
        self.n_rows = n
        self.n_slots = int(n_slots)
        """Slots of the batch (free ones included)."""
        self.live_host: np.ndarray = np.arange(n, dtype=np.int64)
        """Rows still decoding, in row order."""
        self.max_new_tokens = int(max_new_tokens)
        self.stopper = stopper
        self.share = share
        self.merge = merge
        self.pad_id = int(pad_id)
        self.step = 0
        """Tokens generated so far (the step the next :meth:`advance` records)."""
        self.tokens_host = np.full((n, self.max_new_tokens), self.pad_id, dtype=np.int64)
        self.logprobs_host = np.zeros((n, self.max_new_tokens), dtype=np.float32)
        self.lengths_host = np.zeros(n, dtype=np.int64)
        self.reasons: list[FinishReason] = ["length"] * n
        if n and not 0 <= int(self.slot_host.min()) <= int(self.slot_host.max()) < n_slots:
            raise ValueError(f"slot_of_row {self.slot_host.tolist()} must lie in 0..{n_slots - 1}")

    @property
    def slot_of_row(self) -> Int[Tensor, "rows"]:
        """Each row's slot in the next forward (-1 once the row finished): a view of :attr:`slot_host`."""
        return torch.from_numpy(self.slot_host)

    @property
    def live(self) -> Int[Tensor, "live"]:
        """Rows still decoding, in row order: a view of :attr:`live_host`."""
        return torch.from_numpy(self.live_host)

    @property
    def tokens(self) -> Int[Tensor, "rows new"]:
        return torch.from_numpy(self.tokens_host)

    @property
    def done(self) -> bool:
        """Every row finished, or generated ``max_new_tokens``."""
        return self.step == self.max_new_tokens or self.live_host.size == 0

    def live_slots(self) -> Int[Tensor, "live"]:
        """The slot of each live row (aligned with :attr:`live`)."""
        return torch.from_numpy(self.slot_host[self.live_host])

    def members(self) -> tuple[tuple[int, ...], ...]:
        """Per slot, the live rows its node stands for (empty for a free slot)."""
        out: list[list[int]] = [[] for _ in range(self.n_slots)]
        for row, slot in zip(self.live_host.tolist(), self.slot_host[self.live_host].tolist()):
            out[slot].append(row)
        return tuple(tuple(m) for m in out)

    def advance(
        self, chosen: Int[Tensor, "live"] | np.ndarray, logprobs: Float[Tensor, "live"] | np.ndarray | None = None
    ) -> TreeStep:
        """Record each live row's token (aligned with :attr:`live`), finish rows, place the children. A tensor is
        read once (a numpy array, as the decoder passes, is not read again).

        Raises:
            RuntimeError: the tree is already :attr:`done`.
        """
        if self.done:
            raise RuntimeError("advance() on a finished sample tree")
        chosen = to_host(chosen)
        live, step = self.live_host, self.step
        self.tokens_host[live, step] = chosen
        if logprobs is not None:
            self.logprobs_host[live, step] = to_host(logprobs, np.float32)
        self.lengths_host[live] = step + 1
        self.step = step + 1

        parent, child_token, child_of_row, rep = self._children(chosen)
        eos, stop = (to_host(x, bool) for x in self.stopper.check(child_token, self.tokens_host, rep, step))
        ended = eos | stop
        finished = live[:0]
        if ended.any():
            row_ended = ended[child_of_row]
            finished = live[row_ended]
            for r, e in zip(finished.tolist(), eos[child_of_row[row_ended]].tolist()):
                self.reasons[r] = "eos" if e else "stop"
            live, child_of_row = live[~row_ended], child_of_row[~row_ended]
        self.live_host = live
        self.slot_host[finished] = -1
        if self.done:
            return TreeStep(finished, live[:0], live[:0], 0, None, None)
        return self._place(finished, parent, child_token, child_of_row, ended)

    def _children(self, chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """This step's children, sorted by parent slot (a node's children adjacent): each one's parent slot and token,
        each live row's child, and one row per child (whose history the stop check reads). A child is a distinct
        (node, token) when rows merge, else a live row."""
        live = self.live_host
        if not self.merge:  # a child per row, ordered by (parent slot, row)
            order = np.argsort(self.slot_host[live] * self.n_rows + live, kind="stable")
            child_of_row = np.empty_like(order)
            child_of_row[order] = np.arange(order.size)
            return self.slot_host[live][order], chosen[order], child_of_row, live[order]
        width = int(chosen.max()) + 1
        child_key, child_of_row = np.unique(self.slot_host[live] * width + chosen, return_inverse=True)
        child_of_row = child_of_row.reshape(-1)
        rep = np.full(child_key.shape[0], self.n_rows, dtype=np.int64)
        np.minimum.at(rep, child_of_row, live)
        return child_key // width, child_key % width, child_of_row, rep

    def _place(
        self, finished: np.ndarray, parent: np.ndarray, child_token: np.ndarray, child_of_row: np.ndarray,
        ended: np.ndarray,
    ) -> TreeStep:
        """Place the children that did not end: a node's first child continues in its slot, the others fork
        into free or new slots, then the last slots in use fill the free ones (compaction)."""
        live = self.live_host
        kept = np.flatnonzero(~ended)
        k_parent = parent[kept]
        first = np.ones(k_parent.shape[0], dtype=bool)
        first[1:] = k_parent[1:] != k_parent[:-1]
        slot = np.full(parent.shape[0], -1, dtype=np.int64)
        slot[kept[first]] = k_parent[first]
        occupied = np.zeros(self.n_slots, dtype=bool)
        occupied[k_parent[first]] = True
        free = np.flatnonzero(~occupied)
        forks = kept[~first]
        src = dst = live[:0]
        grown = 0
        if forks.size:
            grown = max(0, forks.size - free.size)
            dst = np.concatenate([free[: forks.size], np.arange(self.n_slots, self.n_slots + grown)])
            src = parent[forks]
            slot[forks] = dst
            self.n_slots += grown
        compaction = None
        n_kept = int(kept.size)
        if self.share and self.n_slots > n_kept:
            # every free slot is filled from the end of the batch: a slot in use below n_kept stays where it is, one
            # at or above it moves into a free one below (the cache copies the moved rows only)
            used = slot[kept]
            occupied = np.zeros(self.n_slots, dtype=bool)
            occupied[used] = True
            holes = np.flatnonzero(~occupied[:n_kept])
            movers = np.flatnonzero(occupied[n_kept:]) + n_kept
            compaction = np.arange(n_kept)
            compaction[holes] = movers
            new_slot = np.arange(self.n_slots)
            new_slot[movers] = holes
            slot[kept] = new_slot[used]
            self.n_slots = n_kept
        self.slot_host[live] = slot[child_of_row]
        inputs = np.full(self.n_slots, self.pad_id, dtype=np.int64)
        inputs[slot[kept]] = child_token[kept]
        return TreeStep(finished, src, dst, grown, compaction, inputs)

    def row_tokens(self, row: int) -> list[int]:
        """The tokens row ``row`` generated (EOS or the stop string's last token included)."""
        return self.tokens_host[row, : int(self.lengths_host[row])].tolist()

    def row_logprobs(self, row: int) -> list[float]:
        return self.logprobs_host[row, : int(self.lengths_host[row])].tolist()
