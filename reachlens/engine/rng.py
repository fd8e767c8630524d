"""Counter-based randomness: every sample is a pure function of (seed, question, sample index).

A sample must not depend on what else shares its batch. Otherwise "same seed, same samples" breaks as
soon as the batch size, the question order or the budget changes, and extending an audit from K to
2K samples could not reuse the first K. So the sampler draws no numbers from a stateful generator.
Row ``r`` at decoding step ``t`` uses the uniform ``u = U(row_seed[r], t)``: a 53-bit value made by
an integer hash (``splitmix``-style mixing in 32-bit lanes), and takes the token by inverse-CDF
sampling, ``min{i : cdf[i] > u * cdf[-1]}``. Inverse-CDF with one uniform draws from exactly the
categorical distribution, costs one cumulative sum per row (no per-token noise, so it stays cheap for
a 150k vocabulary), and gives the same tokens on any device whose logits agree.

Numerical caveat: a sample can flip when two runs' probabilities differ at the boundary of ``u``
(e.g. a different dtype or device); the same machine and dtype always reproduce.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from reachlens.engine.host_reads import to_device, to_host
from reachlens.errors import ReachlensError

__all__ = ["Workspace", "counter_normals", "intervention_seed", "row_seed", "sample_inverse_cdf", "uniforms"]

_M32 = 0xFFFFFFFF
# Odd multipliers below 2**31, so a 32-bit lane times a multiplier never overflows int64.
_A, _B, _C = 0x7FEB352D, 0x68E31DA5, 0x2C1B3C6D


def row_seed(seed: int, question_id: str, sample_idx: int) -> int:
    """A 32-bit seed for one sample, stable across machines and Python processes.

    >>> row_seed(0, "arith-test-00000", 3) == row_seed(0, "arith-test-00000", 3)
    True
    """
    digest = hashlib.sha256(f"{seed}\x1f{question_id}\x1f{sample_idx}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def _mix(x: Tensor) -> Tensor:
    x = x ^ (x >> 16)
    x = (x * _A) & _M32
    x = x ^ (x >> 15)
    x = (x * _B) & _M32
    x = x ^ (x >> 16)
    return x


def uniforms(seeds: Int[Tensor, "batch"], step: int) -> Float[Tensor, "batch"]:
    """One uniform in (0, 1) per row for decoding step ``step`` (float64, 53 bits)."""
    s = seeds.to(torch.int64) & _M32
    t = (step * _C + 0x9E3779B9) & _M32
    hi = _mix(s ^ t)
    lo = _mix(hi ^ _mix((s + 0x632BE5AB) & _M32))
    bits = (hi << 21) | (lo >> 11)
    return (bits.to(torch.float64) + 0.5) / float(2**53)


class Workspace:
    """Scratch tensors reused from one decoding step to the next (one per chunk of a generate call).

    The sampler's per-step work runs over the whole vocabulary: with 200 rows of a 152k vocabulary a
    float64 copy is 240 MB. A fresh tensor that size every step costs more in page faults than the
    arithmetic on it, so each buffer is kept and grown when a step needs more.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, Tensor] = {}

    def take(self, name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
        """A tensor of ``shape`` (contents undefined) backed by the buffer ``name``."""
        n = math.prod(shape)
        buf = self._buffers.get(name)
        if buf is None or buf.numel() < n or buf.dtype != dtype or buf.device != device:
            buf = self._buffers[name] = torch.empty(n, dtype=dtype, device=device)
        return buf[:n].view(shape)


def sample_inverse_cdf(
    logits: Float[Tensor, "batch vocab"],
    seeds: Int[Tensor, "rows"],
    step: int,
    temperature: float,
    top_p: float = 1.0,
    group: Int[Tensor, "rows"] | np.ndarray | Sequence[int] | None = None,
    workspace: Workspace | None = None,
) -> Int[Tensor, "rows"]:
    """Draw one token per row from ``softmax(logits / temperature)``, optionally nucleus-truncated.

    Top-p keeps the smallest set of most probable tokens whose mass reaches ``top_p`` (the token that
    crosses the threshold is kept, as in HuggingFace's ``TopPLogitsWarper``).

    ``group[r]`` names the logits row that row ``r`` samples from (default: row ``r``), so rows that
    share a distribution share one softmax and one cumulative sum; each still draws its own uniform. ``group`` is
    host data (a numpy array or a sequence; a tensor is read once): the rows' places in the batched search are
    computed on the host, and the uniforms on the device from ``seeds`` (where ``seeds`` lives), so a draw reads
    nothing back.
    ``workspace`` keeps the float64 buffers between calls (the same numbers, computed in place).
    """
    if temperature <= 0:
        raise ReachlensError(f"temperature={temperature!r}: sampling needs temperature > 0 (use argmax for greedy)")
    n_dist = logits.shape[0]
    host = np.arange(n_dist, dtype=np.int64) if group is None else to_host(group)
    if host.shape != tuple(seeds.shape):
        raise ValueError(f"group {tuple(host.shape)} must have one entry per seed {tuple(seeds.shape)}")
    ws = Workspace() if workspace is None else workspace
    logits = logits.detach()  # an index is drawn: nothing to differentiate (and out= buffers refuse grad)
    scaled = ws.take("scaled", tuple(logits.shape), torch.float64, logits.device)
    scaled.copy_(logits).div_(temperature)  # bit for bit logits.to(float64) / temperature
    probs = torch.ops.aten._softmax.out(scaled, -1, False, out=ws.take("probs", tuple(logits.shape), torch.float64,
                                                                         logits.device))
    u = uniforms(seeds, step).to(probs.device)
    order = None
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        cum = sorted_p.cumsum(-1)
        drop = (cum - sorted_p) >= top_p
        probs = sorted_p.masked_fill_(drop, 0.0)
    cdf = probs.cumsum_(-1)
    # the rows of one distribution, side by side: queries [n_dist, most rows of one distribution]; where each row
    # goes is found on the host, from the group it was given there (nothing is read back from the device)
    group, rank, width = _ranks(host, n_dist, probs.device)
    queries = torch.zeros((n_dist, width), dtype=cdf.dtype, device=cdf.device)
    queries[group, rank] = u * cdf[group, -1]
    pick = torch.searchsorted(cdf, queries, right=True).clamp_(max=cdf.shape[-1] - 1)[group, rank]
    return pick if order is None else order[group, pick]


def _ranks(group: np.ndarray, n_dist: int, device: torch.device) -> tuple[Tensor, Tensor, int]:
    """Each row's group and rank among its group's rows (in row order) on ``device``, and the most rows of a group
    (at least 1): computed on the host."""
    counts = np.bincount(group, minlength=n_dist)
    order = np.argsort(group, kind="stable")
    rank = np.empty_like(group)
    rank[order] = np.arange(group.size) - (np.cumsum(counts) - counts)[group[order]]
    width = int(counts.max()) if group.size else 1
    return to_device(group, device), to_device(rank, device), width


# --- seeds and Gaussians of the random interventions (grafts, embedding noise) --------------------
_STREAM = 0x5BD1E995  # keeps these counters apart from the sampler's steps


def intervention_seed(seed: int, question_id: str, candidate_idx: int) -> int:
    """A 32-bit seed for candidate ``candidate_idx`` of a random intervention (a noise or permutation
    graft, embedding noise) on one question: stable across machines, and unrelated to
    :func:`row_seed` of the same triple, so a graft's draw never correlates with a sample's.

    >>> intervention_seed(0, "arith-test-00000", 3) == intervention_seed(0, "arith-test-00000", 3)
    True
    """
    digest = hashlib.sha256(f"intervention\x1f{seed}\x1f{question_id}\x1f{candidate_idx}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def _uniform_grid(seeds: Tensor, counters: Tensor) -> Tensor:
    """One uniform in (0, 1) per (row, counter): the hash of :func:`uniforms` with a tensor of counters."""
    s = (seeds.to(torch.int64) & _M32).view(-1, *([1] * (counters.ndim - 1)))
    t = ((counters.to(torch.int64) & _M32) * _C + 0x9E3779B9 + _STREAM) & _M32
    hi = _mix(s ^ t)
    lo = _mix(hi ^ _mix((s + 0x632BE5AB) & _M32))
    bits = (hi << 21) | (lo >> 11)
    return (bits.to(torch.float64) + 0.5) / float(2**53)


def counter_normals(seeds: Int[Tensor, "batch"], counters: Int[Tensor, "#batch *n"]) -> Float[Tensor, "batch *n"]:
    """A standard normal per (row, counter), float64: Box-Muller on the counter-based uniforms of
    counters ``2c`` and ``2c + 1``, so value ``c`` of a row depends only on (its seed, ``c``), never on
    the batch, the device or the other counters asked for. ``counters`` must lie in ``0..2**31-1``
    (a first dimension of 1 serves every row).

    >>> counter_normals(torch.tensor([7]), torch.arange(4)[None]).shape
    torch.Size([1, 4])
    """
    u1 = _uniform_grid(seeds, 2 * counters)
    u2 = _uniform_grid(seeds, 2 * counters + 1)
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * torch.pi * u2)
