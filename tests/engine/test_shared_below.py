"""The prefill of arms shares the layers below each arm's first hooked layer (``SharedBelow``).

An arm whose hooks sit at layer L and above computes, below L, exactly what the plain model computes on the same
prompt, so the engine runs its entries from L up and takes the plain entry's activations and keys below. Checked on a
tiny Llama (the fused path) and a tiny GPT-2 (the generic path) of three layers: against plain HuggingFace with
forward hooks zeroing the module (an independent reference), against the same call with the sharing off, with arms
at every layer (layer 0 included: nothing to share), and with a reading hook that must still see every entry.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from reachlens.engine import LayerStack, Row, current_rows, generate, row_agnostic, tokenizer_of
from reachlens.engine.hooks import plain_below
from reachlens.engine.stack import SharedBelow
from reachlens.engine.tokens import encode_prompts
from reachlens.interventions import zero_ablation
from reachlens.models.testing import make_tiny_model
from reachlens.protocol import Protocol

GEN = importlib.import_module("reachlens.engine.generate")
PROMPTS = ["Q: 12+34=?\nA:", "hello world, a b c d e"]  # two lengths: the prefill is left-padded
GREEDY = Protocol("test", k=1, temperature=0.0, max_new_tokens=3)
N_LAYERS = 3
CONDS = [None, (0, "attn"), (1, "mlp"), (1, "attn"), (2, "mlp")]  # arms at every layer, one at layer 0


class Family:
    def __init__(self, name: str, folder) -> None:
        from transformers import AutoModelForCausalLM

        from reachlens.models import load_model

        self.name = name
        self.model = load_model(str(folder))
        self.hf = AutoModelForCausalLM.from_pretrained(str(folder), use_safetensors=True).eval()
        self.fused = name == "llama"  # the fused path for the Llama, the generic one for GPT-2

    def module(self, layer: int, site: str):
        base = getattr(self.hf, self.hf.base_model_prefix)
        block = (base.h if hasattr(base, "h") else base.layers)[layer]
        return block.mlp if site == "mlp" else getattr(block, "self_attn", None) or block.attn


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def fam(request, tmp_path_factory) -> Family:
    return Family(request.param, make_tiny_model(request.param, tmp_path_factory.mktemp(request.param),
                                                 n_layers=N_LAYERS))


def _zero(module, args, out):
    return (torch.zeros_like(out[0]), *out[1:]) if isinstance(out, tuple) else torch.zeros_like(out)


@torch.no_grad()
def hf_greedy(fam: Family, ids: list[int], cond) -> tuple[list[int], list[float]]:
    """Plain HF with a forward hook zeroing the module: greedy tokens (a full re-forward per token, no cache) and
    each token's log-probability."""
    handle = None if cond is None else fam.module(*cond).register_forward_hook(_zero)
    try:
        seq, logps = torch.tensor([ids]), []
        for _ in range(GREEDY.max_new_tokens):
            logp = torch.log_softmax(fam.hf(seq, use_cache=False).logits[0, -1].float(), -1)
            token = logp.argmax()
            logps.append(float(logp[token]))
            seq = torch.cat([seq, token[None, None]], dim=1)
    finally:
        if handle is not None:
            handle.remove()
    return seq[0, len(ids):].tolist(), logps


def sweep(fam: Family, fused: bool, extra=(), **kwargs):
    hooks = [h for c in CONDS if c is not None for h in zero_ablation(fam.model, *c, arm=c)]
    rows = [Row(p, arm=c) for p in range(len(PROMPTS)) for c in CONDS]
    with fam.model.hooks(fwd_hooks=[*hooks, *extra]):
        return rows, generate(fam.model, PROMPTS, rows, GREEDY, stop_at_eos=False, fused=fused, **kwargs)


def spying(monkeypatch) -> list[SharedBelow]:
    """Every SharedBelow a forward runs with."""
    seen: list[SharedBelow] = []
    run = LayerStack.run_shared_below

    def spy(self, inputs, shared, **kwargs):
        seen.append(shared)
        return run(self, inputs, shared, **kwargs)

    monkeypatch.setattr(LayerStack, "run_shared_below", spy)
    return seen


def test_each_arm_starts_at_its_first_hooked_layer(fam):
    hooks = zero_ablation(fam.model, 2, "attn", arm="a") + zero_ablation(fam.model, 1, "mlp", arm="b") \
        + zero_ablation(fam.model, 2, "mlp", arm="b") + zero_ablation(fam.model, 0, "mlp", arm="c")
    with fam.model.hooks(fwd_hooks=hooks):
        assert plain_below(fam.model, [None, "a", "b", "c"]) == (3, 2, 1, 0)
    # a hook that is not per-arm (it may read every entry) caps every arm at its block
    reader = row_agnostic(lambda x, *, hook: None)
    with fam.model.hooks(fwd_hooks=[*hooks, ("blocks.1.hook_resid_post", reader)]):
        assert plain_below(fam.model, [None, "a", "b", "c"]) == (1, 1, 1, 0)
    handle = fam.model.blocks[0].mlp.register_forward_hook(lambda *a: None)  # a plain PyTorch hook caps too
    try:
        with fam.model.hooks(fwd_hooks=hooks):
            assert plain_below(fam.model, [None, "a"]) == (0, 0)
    finally:
        handle.remove()


@torch.no_grad()
def test_the_shared_prefill_equals_hf_hooks_and_the_unshared_one(fam, monkeypatch):
    ids = encode_prompts(tokenizer_of(fam.model), PROMPTS)
    reference = {(p, c): hf_greedy(fam, ids[p], c) for p in range(len(PROMPTS)) for c in CONDS}
    seen = spying(monkeypatch)
    rows, shared = sweep(fam, fam.fused)
    # the prefill ran once with sharing: per prompt, the plain entry runs every layer, an arm from its layer
    assert len(seen) == 1 and seen[0].join == (N_LAYERS, 0, 1, 1, 2) * len(PROMPTS)
    monkeypatch.setattr(GEN, "plain_below", lambda model, arms: None)  # the sharing off
    _, unshared = sweep(fam, fam.fused)
    assert len(seen) == 1
    for r, a, b in zip(rows, shared, unshared):
        tokens, logps = reference[(r.prompt, r.arm)]
        assert list(a.token_ids) == tokens == list(b.token_ids), (fam.name, r)
        assert a.logprobs == pytest.approx(logps, abs=2e-5), (fam.name, r)
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-6), (fam.name, r)


@torch.no_grad()
def test_a_reading_hook_sees_every_entry(fam):
    """A row-agnostic hook that reads (not per-arm) at layer 1 sees every entry there and above: the arms share
    layer 0 only, and the decode is unchanged."""
    seen: list[tuple[int, int]] = []

    @row_agnostic
    def read(x, *, hook):
        rows = current_rows()
        if rows.step < 0:
            seen.append((x.shape[0], rows.n_entries))

    reading = [(f"blocks.{layer}.hook_resid_post", read) for layer in (1, 2)]
    rows, outs = sweep(fam, fam.fused, reading, share_prefixes=True)
    _, plain = sweep(fam, fam.fused)
    assert seen == [(len(CONDS) * len(PROMPTS),) * 2] * 2  # layers 1 and 2, every entry
    assert [o.token_ids for o in outs] == [o.token_ids for o in plain]


@torch.no_grad()
def test_the_stack_copies_the_base_entry_below_each_join(fam):
    """Three entries of one prompt, no hook: any joins give the same logits and the same cached keys."""
    stack = LayerStack(fam.model, fused=fam.fused)
    ids = torch.tensor([encode_prompts(tokenizer_of(fam.model), PROMPTS[:1])[0]] * 4)
    caches = [stack.new_cache(ids.shape[1] + 1) for _ in range(2)]
    with torch.inference_mode():
        plain = stack.forward(ids, cache=caches[0])
        shared = stack.forward(ids, cache=caches[1], shared=SharedBelow((0, 1, 3, 2), (0, 0, 0, 0)))
    torch.testing.assert_close(shared, plain, rtol=0, atol=1e-5)
    for slot in range(N_LAYERS):
        for store in ("_keys", "_values"):
            a, b = getattr(caches[0], store)[slot], getattr(caches[1], store)[slot]
            torch.testing.assert_close(b[:, :, : ids.shape[1]], a[:, :, : ids.shape[1]], rtol=0, atol=1e-5)
