"""A probe run's candidates against plain HuggingFace, and its selectors against a Counter vote.

The references are written here without reachlens or TransformerLens: greedy decoding with the HF model
(a full forward per token, no cache), the graft as a PyTorch forward hook on the decoder layer that
replaces the hidden state at the grafted prompt position by what the kind says (zero; the first position's;
the mean of the other prompt positions'; the layer below's), the prompt tokens from the tokenizer, the text
cut at the protocol's stop string. Grafting the prompt position in every full forward is what grafting it
once in the cached prefill does: later tokens see that position's keys and values, computed from the graft.
"""

from __future__ import annotations

import math
from collections import Counter

import pandas as pd
import pytest
import torch

from reachlens import ExecConfig, Protocol, load_task, probe

N, TOKENS, LAYER = 4, 8, 1
GREEDY = Protocol.greedy("arith", max_new_tokens=TOKENS)
SPECS = ["sampling:k=4:temperature=1.5", f"graft:kind=zero,bos,mean,prev_layer:layer={LAYER}",
         f"graft:kind=zero,mean:layer={LAYER}:placebo=true"]


@pytest.fixture(scope="module")
def task():
    return load_task("arith", n=N)


@pytest.fixture(scope="module")
def run(tiny_model, task):
    return probe(tiny_model, task, SPECS, protocol=GREEDY, exec_config=ExecConfig(max_batch_rows=16))


def replacement(kind: str, hidden: torch.Tensor, below: torch.Tensor | None, pos: int, prompt_len: int) -> torch.Tensor:
    """What a graft of ``kind`` writes at ``pos`` (hidden: [seq, d] of the grafted layer's output)."""
    if kind == "zero":
        return torch.zeros_like(hidden[pos])
    if kind == "bos":
        return hidden[0]
    if kind == "mean":
        others = [i for i in range(prompt_len) if i != pos]
        return hidden[others].mean(0)
    assert kind == "prev_layer" and below is not None
    return below[pos]


@torch.no_grad()
def hf_greedy(hf, tokenizer, prompt: str, stop: str, graft: tuple[str, int] | None) -> str:
    """Plain HF greedy text of ``prompt``, with ``graft`` = (kind, prompt position) at decoder layer LAYER."""
    ids = tokenizer(prompt)["input_ids"]
    layers = hf.model.layers
    seen: dict[str, torch.Tensor] = {}

    def unpack(out):
        return out[0] if isinstance(out, tuple) else out

    def keep_below(module, args, out):
        seen["below"] = unpack(out)[0].clone()

    def write(module, args, out):
        hidden = unpack(out).clone()
        kind, pos = graft
        hidden[0, pos] = replacement(kind, hidden[0], seen.get("below"), pos, len(ids))
        return (hidden, *out[1:]) if isinstance(out, tuple) else hidden

    handles = [] if graft is None else [layers[LAYER - 1].register_forward_hook(keep_below),
                                        layers[LAYER].register_forward_hook(write)]
    try:
        seq = torch.tensor([ids])
        for _ in range(TOKENS):
            token = hf(seq, use_cache=False).logits[0, -1].argmax()
            if int(token) == tokenizer.eos_token_id:
                break
            seq = torch.cat([seq, token[None, None]], dim=1)
    finally:
        for h in handles:
            h.remove()
    text = tokenizer.decode(seq[0, len(ids):].tolist(), skip_special_tokens=True)
    return text.split(stop)[0]


def test_greedy_and_every_deterministic_graft_equal_plain_huggingface(tiny_hf, tiny_model, task, run):
    tokenizer = tiny_model.tokenizer
    stop = GREEDY.resolved(task).stop[0]
    bank = run.candidates
    rows = bank[~bank["probe"].str.startswith("sampling")]
    assert len(rows) == N * (1 + 4 + 2)
    grafted = 0
    for r in rows.itertuples():
        q = next(q for q in task.questions if q.question_id == r.question_id)
        if r.probe == "greedy":
            graft = None
        else:
            kind = r.arm.split("graft:")[1].split("@")[0]
            pos = int(r.detail.removeprefix("pos=")) if r.detail else len(tokenizer(task.prompt(q))["input_ids"]) - 1
            graft = (kind, pos)
            grafted += 1
        assert r.text == hf_greedy(tiny_hf, tokenizer, task.prompt(q), stop, graft), (r.probe, r.arm, r.question_id)
    assert grafted == N * 6
    texts = rows.groupby("question_id")["text"].nunique()
    assert (texts > 1).any(), "the grafts must change some decode, or the comparison is weak"


def counter_majority(bank: pd.DataFrame) -> float:
    """Mean over questions of the expected correctness of a plurality vote with a uniform tie-break."""
    per = []
    for _, g in bank.groupby("question_id"):
        voters = g[g["scored"] & g["answer"].notna() & (g["answer"].astype(str) != "nan")]
        votes = Counter(voters["answer"])
        if not votes:
            per.append(0.0)
            continue
        top = max(votes.values())
        tied = [a for a, n in votes.items() if n == top]
        per.append(sum(float(voters.loc[voters["answer"] == a, "correct"].iloc[0]) for a in tied) / len(tied))
    return sum(per) / len(per)


def test_the_runs_majority_and_selection_gap_equal_a_counter_vote_over_its_bank(run):
    bank, summary = run.candidates, run.summary()
    for label in run.probes:
        mine = bank[bank["probe"] == label]
        o = mine.groupby("question_id").apply(lambda g: bool((g["correct"] & g["scored"]).any())).mean()
        entry = summary["probes"][label]
        assert entry["O"] == pytest.approx(o)
        assert entry["selectors"]["majority"] == pytest.approx(counter_majority(mine))
        best = max(entry["selectors"].values())
        assert entry["selection_gap"] == pytest.approx(o - best)
        assert not math.isnan(entry["selection_gap"])
