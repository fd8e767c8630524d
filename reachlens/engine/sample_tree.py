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

With ``share=False`` (one row per sample: what a hook sees when it is not row-agnostic, see
:mod:`reachlens.engine.hooks`) each row starts in a slot of its own, so no node ever forks, and
no compaction runs: row ``i`` keeps slot ``i`` to the end (a finished row's slot is fed padding).

The tree is bookkeeping on the CPU and needs no model: the decoding loop in
:mod:`reachlens.engine.generate` owns the logits, the cache and the device tensors, and applies what
each step returns. It also keeps every row's tokens, log-probabilities and finish reason.

>>> tree = SampleTree(torch.zeros(3, dtype=torch.long), n_slots=1, max_new_tokens=4, stopper=checker)  # doctest: +SKIP
>>> step = tree.advance(torch.tensor([7, 7, 9]))  # doctest: +SKIP
>>> step.forks, step.inputs  # doctest: +SKIP
((tensor([0]), tensor([1])), tensor([7, 9]))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

__all__ = ["FinishReason", "SampleTree", "StopCheck", "TreeStep"]

FinishReason = Literal["eos", "stop", "length"]


@runtime_checkable
class StopCheck(Protocol):
    """What the tree asks of a stop checker (:class:`~reachlens.engine.stopping.StopChecker`)."""

    def check(
        self, chosen: Int[Tensor, "batch"], history: Int[Tensor, "rows new"], rows: Int[Tensor, "batch"], step: int
    ) -> tuple[Bool[Tensor, "batch"], Bool[Tensor, "batch"]]:
        """(hit EOS, hit a stop string) per child, ``history[rows[b], :step + 1]`` being its tokens."""
        ...


@dataclass(frozen=True)
class TreeStep:
    """What one :meth:`SampleTree.advance` asks of the decoder, in this order: copy the forks'
    cache rows, compact, then forward ``inputs``."""

    finished: Int[Tensor, "f"]
    """Rows that finished at this step (EOS or a stop string)."""
    fork_src: Int[Tensor, "forks"]
    """Slots whose cache rows are copied ..."""
    fork_dst: Int[Tensor, "forks"]
    """... into these slots (free ones first, then new ones at the end of the batch)."""
    grown: int
    """Slots appended to the batch by the forks (the batch had ``n_slots - grown`` before them)."""
    compaction: Int[Tensor, "kept"] | None
    """After the forks: new slot ``i`` is old slot ``compaction[i]`` (None: no compaction)."""
    inputs: Int[Tensor, "slots"] | None
    """The token each slot feeds to the next forward (None: decoding is over)."""

    @property
    def done(self) -> bool:
        return self.inputs is None


class SampleTree:
    """The nodes of one chunk's sample tree, their slots, and every row's tokens so far.

    Args:
        slot_of_row: the slot each row starts in (its prompt's slot after the prefill; with
            ``share=False``, ``arange(rows)``).
        n_slots: slots of the prefill batch.
        max_new_tokens: the most tokens a row generates.
        stopper: finds children that hit EOS or a stop string (:class:`StopCheck`).
        share: whether rows share nodes; False keeps one slot per row and never compacts.
        pad_id: the token fed to a free slot (and the filler of unwritten token positions).
    """

    def __init__(
        self,
        slot_of_row: Int[Tensor, "rows"],
        n_slots: int,
        max_new_tokens: int,
        stopper: StopCheck,
        *,
        share: bool = True,
        pad_id: int = 0,
    ) -> None:
        n = int(slot_of_row.shape[0])
        self.n_rows = n
        self.slot_of_row: Int[Tensor, "rows"] = slot_of_row.detach().to("cpu", torch.long).clone()
        """Each row's slot in the next forward (-1 once the row finished)."""
        self.n_slots = int(n_slots)
        """Slots of the batch (free ones included)."""
        self.live: Int[Tensor, "live"] = torch.arange(n)
        """Rows still decoding, in row order."""
        self.max_new_tokens = int(max_new_tokens)
        self.stopper = stopper
        self.share = share
        self.pad_id = int(pad_id)
        self.step = 0
        """Tokens generated so far (the step the next :meth:`advance` records)."""
        self.tokens: Int[Tensor, "rows new"] = torch.full((n, self.max_new_tokens), self.pad_id, dtype=torch.long)
        self.logprobs: Float[Tensor, "rows new"] = torch.zeros((n, self.max_new_tokens), dtype=torch.float32)
        self.lengths: Int[Tensor, "rows"] = torch.zeros(n, dtype=torch.long)
        self.reasons: list[FinishReason] = ["length"] * n
        if self.slot_of_row.numel() and not 0 <= int(self.slot_of_row.min()) <= int(self.slot_of_row.max()) < n_slots:
            raise ValueError(f"slot_of_row {self.slot_of_row.tolist()} must lie in 0..{n_slots - 1}")

    @property
    def done(self) -> bool:
        """Every row finished, or generated ``max_new_tokens``."""
        return self.step == self.max_new_tokens or self.live.numel() == 0

    def live_slots(self) -> Int[Tensor, "live"]:
        """The slot of each live row (aligned with :attr:`live`)."""
        return self.slot_of_row[self.live]

    def members(self) -> tuple[tuple[int, ...], ...]:
        """Per slot, the live rows its node stands for (empty for a free slot)."""
        out: list[list[int]] = [[] for _ in range(self.n_slots)]
        for row, slot in zip(self.live.tolist(), self.live_slots().tolist()):
            out[slot].append(row)
        return tuple(tuple(m) for m in out)

    def advance(
        self, chosen: Int[Tensor, "live"], logprobs: Float[Tensor, "live"] | None = None
    ) -> TreeStep:
        """Record each live row's token (aligned with :attr:`live`), finish rows, place the children.

        Raises:
            RuntimeError: the tree is already :attr:`done`.
        """
        if self.done:
            raise RuntimeError("advance() on a finished sample tree")
        chosen = chosen.detach().to("cpu", torch.long)
        live, step = self.live, self.step
        self.tokens[live, step] = chosen
        if logprobs is not None:
            self.logprobs[live, step] = logprobs.detach().to("cpu", torch.float32)
        self.lengths[live] = step + 1
        self.step = step + 1

        # the children: one per distinct (node, token); sorted, so a node's children are adjacent
        width = int(chosen.max()) + 1
        child_key, child_of_row = torch.unique(self.slot_of_row[live] * width + chosen, return_inverse=True)
        parent, child_token = child_key // width, child_key % width
        rep = torch.full((child_key.shape[0],), self.n_rows, dtype=torch.long).scatter_reduce_(
            0, child_of_row, live, reduce="amin")  # one row per child, whose history the stop check reads
        eos, stop = self.stopper.check(child_token, self.tokens, rep, step)
        ended = eos | stop
        finished = live[:0]
        if bool(ended.any()):
            row_ended = ended[child_of_row]
            finished = live[row_ended]
            for r, e in zip(finished.tolist(), eos[child_of_row[row_ended]].tolist()):
                self.reasons[r] = "eos" if e else "stop"
            live, child_of_row = live[~row_ended], child_of_row[~row_ended]
        self.live = live
        self.slot_of_row[finished] = -1
        if self.done:
            return TreeStep(finished, live[:0], live[:0], 0, None, None)
        return self._place(finished, parent, child_token, child_of_row, ended)

    def _place(
        self, finished: Int[Tensor, "n"], parent: Int[Tensor, "child"], child_token: Int[Tensor, "child"],
        child_of_row: Int[Tensor, "live"], ended: Bool[Tensor, "child"],
    ) -> TreeStep:
        """Place the children that did not end: a node's first child continues in its slot, the others fork
        into free or new slots, then the last slots in use fill the free ones (compaction)."""
        live = self.live
        empty = live[:0]
        kept = (~ended).nonzero().flatten()
        k_parent = parent[kept]
        first = torch.ones_like(k_parent, dtype=torch.bool)
        first[1:] = k_parent[1:] != k_parent[:-1]
        slot = torch.full((parent.shape[0],), -1, dtype=torch.long)
        slot[kept[first]] = k_parent[first]
        occupied = torch.zeros(self.n_slots, dtype=torch.bool)
        occupied[k_parent[first]] = True
        free = (~occupied).nonzero().flatten()
        forks = kept[~first]
        src = dst = empty
        grown = 0
        if forks.numel():
            grown = max(0, forks.numel() - free.numel())
            dst = torch.cat([free[: forks.numel()], torch.arange(self.n_slots, self.n_slots + grown)])
            src = parent[forks]
            slot[forks] = dst
            self.n_slots += grown
        compaction = None
        n_kept = int(kept.numel())
        if self.share and self.n_slots > n_kept:
            # every free slot is filled from the end of the batch: a slot in use below n_kept stays where it is, one
            # at or above it moves into a free one below (the cache copies the moved rows only)
            used = slot[kept]
            occupied = torch.zeros(self.n_slots, dtype=torch.bool)
            occupied[used] = True
            holes = (~occupied[:n_kept]).nonzero().flatten()
            movers = occupied[n_kept:].nonzero().flatten() + n_kept
            compaction = torch.arange(n_kept)
            compaction[holes] = movers
            new_slot = torch.arange(self.n_slots)
            new_slot[movers] = holes
            slot[kept] = new_slot[used]
            self.n_slots = n_kept
        self.slot_of_row[live] = slot[child_of_row]
        inputs = torch.full((self.n_slots,), self.pad_id, dtype=torch.long)
        inputs[slot[kept]] = child_token[kept]
        return TreeStep(finished, src, dst, grown, compaction, inputs)

    def row_tokens(self, row: int) -> list[int]:
        """The tokens row ``row`` generated (EOS or the stop string's last token included)."""
        return self.tokens[row, : int(self.lengths[row])].tolist()

    def row_logprobs(self, row: int) -> list[float]:
        return self.logprobs[row, : int(self.lengths[row])].tolist()
