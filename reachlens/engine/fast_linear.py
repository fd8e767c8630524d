"""A real model's large linear maps through oneDNN's matrix product, on a CPU in float32.

At a real shape a decoding step is matrix products: the layers' linear maps and the LM head are about 90 % of
a reachlens step at the Qwen2.5-0.5B shape (``benchmarks/README.md``). ``torch.nn.functional.linear`` runs
them through MKL's sgemm; oneDNN's fp32 product (``torch.ops.mkldnn._linear_pointwise``, the kernel torch's
own compiler emits for CPU linears) is faster on every qualifying shape measured on this project's CPU
(AVX-512, torch 2.13's CPU wheel; ``benchmarks/bench_linear.py``, 1 thread, at 64 rows): 896 -> 4,864 7.45 ms
against 6.38, the LM head of a 151,936-token vocabulary 367 against 239, Llama 3.2 1B's 2,048 -> 8,192 32.4
against 22.8; 1.00x-2.02x at 1 to 512 rows. A smaller map can be slower (896 x 896 at 64 rows: 0.93x), hence
the bound below.

:func:`fast_linears` swaps that product in, for the duration of a reachlens forward, for every
``nn.Linear`` inside the bridge whose weight has at least :data:`LARGE` entries and both sides at least
:data:`WIDE` (a real model's MLP, its wide projections and its LM head; no tiny test or zoo model has one),
when the weight is float32 on a CPU and no gradient is recorded. The bridge's hooks around each map
(``hook_in``/``hook_out``: ``hook_q``, ``hook_z``, ``mlp`` hooks, the logits) still fire, and the weight is
read at every call (an edited weight acts). The two kernels sum in different orders: the outputs agree to
float32 rounding (relative 1e-6), not bitwise, so a greedy token or a sample drawn at a near-tie can differ
from HuggingFace's; everywhere else (smaller maps, another device or dtype) the product is HuggingFace's own.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor

from reachlens.engine.fast_attention import found_once, swap_forward

__all__ = ["LARGE", "WIDE", "fast_linears", "large_linears"]

LARGE = 1 << 22
"""Entries of a weight (4.2 M) from which its map runs through oneDNN."""
WIDE = 512
"""... and the fewest features on either side of it (a real model's width; the zoo's is 128, the tiny test
models' 64)."""

_onednn_linear = torch.ops.mkldnn._linear_pointwise


def _forward(self, x: Tensor) -> Tensor:
    w = self.weight
    if torch.is_grad_enabled() or x.device.type != "cpu" or x.dtype != torch.float32 or w.dtype != torch.float32:
        return self._reachlens_bridge_forward(x)
    return _onednn_linear(x, w, self.bias, "none", [], "")


def large_linears(model) -> list[torch.nn.Linear]:
    """The ``nn.Linear`` maps of ``model`` that qualify (at least :data:`LARGE` float32 entries on a CPU, both
    sides at least :data:`WIDE`, oneDNN available); found once per model."""
    return found_once(model, "_reachlens_large_linears", lambda: [] if not torch.backends.mkldnn.is_available() else [
        m for m in model.modules()
        if type(m) is torch.nn.Linear and m.weight.numel() >= LARGE and min(m.weight.shape) >= WIDE
        and m.weight.device.type == "cpu" and m.weight.dtype == torch.float32
    ])


def fast_linears(model) -> contextlib.AbstractContextManager[int]:
    """Within the block, the qualifying linear maps of ``model`` run through oneDNN; yields how many."""
    return swap_forward(large_linears(model), _forward)
