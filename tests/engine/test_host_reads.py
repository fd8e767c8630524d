"""Host reads per decoding step of ``generate``: at most one, plus a constant per call.

On a GPU every read of a tensor's values by the host (``nonzero``, ``unique``, ``bool(tensor)``, ``.tolist()``,
``.cpu()``) is a host-device synchronisation; a decoding step needs one (its new tokens, for the stop check and the
sample tree). The reads are counted here on the CPU by :class:`~reachlens.engine.host_reads.HostReads` (a
``TorchDispatchMode`` counting the data-dependent operators, plus the ``tolist``/``numpy`` conversions) over one
call at ``N`` and at ``2N`` new tokens: the ``N`` extra steps may add at most ``N`` reads, whatever the call's fixed
cost (its prefill, its chunking, its completions). The calls sample with EOS, stop strings and top-p, on the fused
and the generic paths, with and without prefix sharing, with arms (a zero ablation and a steering vector) and
layer routes (one route for the call, and rows of different routes in one batch).

The counter itself is checked against operations whose reads are known.
"""

from __future__ import annotations

import pytest
import torch

from reachlens.engine import Row, generate
from reachlens.engine.host_reads import HostReads
from reachlens.interventions import steering, zero_ablation
from reachlens.protocol import Protocol

PROMPTS = ["Q: 12+34=?\nA:", "Q: 7*8-9=?\nA:"]
N = 8


@pytest.fixture(scope="module")
def zoo():
    from reachlens.models import load_model

    return load_model("zoo:base")


def _rows(arms: bool, routes: bool) -> list[Row]:
    """Per prompt: the greedy row and four samples, on the plain model (and, with ``arms``, on two arms; with
    ``routes``, half of them on a shorter route)."""
    out = []
    for p in range(len(PROMPTS)):
        for arm in (None, "zero", "steer") if arms else (None,):
            for seed in (None, 1, 2, 3, 4):
                route = (0, 1, 2, 4, 5) if routes and (seed or 0) % 2 else None
                out.append(Row(p, seed, (p, arm, seed), arm=arm, route=route))
    return out


def _reads(model, rows, new: int, **kwargs) -> tuple[int, list]:
    protocol = Protocol("arith", k=4, temperature=2.5, top_p=0.9, max_new_tokens=new, stop=("46", "Q:"))
    v = torch.linspace(-1.0, 1.0, model.cfg.d_model)
    hooks = zero_ablation(model, 2, "mlp", arm="zero") + steering(model, 1, v, 4.0, "resid_post", arm="steer")
    with model.hooks(fwd_hooks=hooks):
        generate(model, PROMPTS, rows, protocol, **kwargs)  # warm-up: the stop tables are built once per tokenizer
        with HostReads() as reads:
            outs = generate(model, PROMPTS, rows, protocol, **kwargs)
    return reads.total, outs


@pytest.mark.parametrize("case", [
    dict(),
    dict(fused=False),
    dict(share_prefixes=False),
    dict(arms=True),
    dict(arms=True, fused=False, share_prefixes=False),
    dict(route=(0, 1, 3, 5)),
    dict(arms=True, routes=True),
], ids=["fused", "generic", "no-sharing", "arms", "arms-generic-no-sharing", "route", "arms-mixed-routes"])
def test_at_most_one_host_read_per_decoding_step(zoo, case):
    case = dict(case)
    rows = _rows(case.pop("arms", False), case.pop("routes", False))
    short, _ = _reads(zoo, rows, N, **case)
    long, outs = _reads(zoo, rows, 2 * N, **case)
    reasons = {c.finish_reason for c in outs}
    assert "length" in reasons and reasons & {"eos", "stop"}, reasons  # the loop ran 2N steps, and rows finished
    assert long - short <= N, f"{long - short} host reads over {N} more decoding steps ({short} at {N} steps)"


def test_the_counter_sees_what_reads_and_nothing_else():
    x = torch.tensor([0.0, 2.0, 0.0, 3.0])
    with HostReads() as reads:
        y = (x * 2 + 1).sort().values.cumsum(0)  # no read
        torch.zeros(3)[torch.tensor([0, 2])]  # an index tensor of longs: no read
    assert reads.total == 0 and y.shape == (4,)
    with HostReads() as reads:
        x.nonzero()
        x.unique()
        bool(x.any())
        int(x.argmax())
        x[x > 0]
        x.tolist()
        x.numpy()
    assert reads.total == 7, reads.by_op
    assert torch.Tensor.tolist is not None and x.tolist() == [0.0, 2.0, 0.0, 3.0]  # restored after the block
