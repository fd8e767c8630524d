"""Grafts and embedding noise on every family: once, in the prefill, where they say; equal to plain HuggingFace.

For each family a tiny random checkpoint (2 layers, d=64) is built once, with the plain HuggingFace
model beside it. The references are HuggingFace forwards with a PyTorch forward hook on the decoder
layer (or the input embedding) written here; none goes through reachlens or TransformerLens. The
definitions of the kinds are checked against what a recording hook saw before the graft.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch

from reachlens.engine import Row, current_rows, generate, intervention_seed, counter_normals, tokenizer_of
from reachlens.engine.tokens import encode_prompts
from reachlens.errors import ReachlensError, UnknownNameError
from reachlens.interventions import (
    GRAFT_KINDS,
    EmbeddingNoise,
    Graft,
    embedding_noise_arms,
    graft_arms,
    hook_name,
)
from reachlens.models.testing import TINY_FAMILIES, make_tiny_model
from reachlens.protocol import Protocol

PROMPTS = ["Q: 12+34=?\nA:", "hello world, a b c d e"]  # two lengths: the prefill is left-padded
GREEDY = Protocol("test", k=1, temperature=0.0, max_new_tokens=3)
FUSED = {"llama", "qwen2", "qwen3", "olmo2"}


class Family:
    def __init__(self, name: str, folder) -> None:
        from transformers import AutoModelForCausalLM

        from reachlens.models import load_model

        self.name = name
        self.model = load_model(str(folder))
        self.hf = AutoModelForCausalLM.from_pretrained(str(folder), use_safetensors=True).eval()
        self.ids = encode_prompts(tokenizer_of(self.model), PROMPTS)
        self.paths = (True, False) if name in FUSED else (True,)

    def logits(self, head_out: torch.Tensor) -> torch.Tensor:
        """What the LM head's hook saw, through the family's final-logit softcapping (Gemma 2)."""
        cap = getattr(self.hf.config, "final_logit_softcapping", None)
        return head_out if cap is None else cap * torch.tanh(head_out / cap)

    def layer(self, i: int):
        base = getattr(self.hf, self.hf.base_model_prefix)
        return (base.h if hasattr(base, "h") else base.layers)[i]


@pytest.fixture(scope="module", params=TINY_FAMILIES)
def fam(request, tmp_path_factory) -> Family:
    return Family(request.param, make_tiny_model(request.param, tmp_path_factory.mktemp(request.param)))


def counting(fn, log: list):
    """``fn`` with every call logged: (hook name, step, [(entry arm, column) it changed])."""

    def wrapper(x, *, hook):
        out = fn(x, hook=hook)
        rows = current_rows()
        changed = [] if out is None else (out != x).any(-1).nonzero().tolist()
        log.append((hook.name, rows.step, [(rows.arms[int(rows.arm_of_entry[e])], c) for e, c in changed]))
        return out

    return functools.update_wrapper(wrapper, fn)  # keeps the per_arm marking: sharing stays on


@torch.no_grad()
def test_a_graft_fires_once_per_row_in_the_prefill_at_its_layer_and_position(fam):
    width = max(map(len, fam.ids))
    for fused in fam.paths:
        for position in (-1, 2):
            grafts = [Graft("zero", 1, position=position), Graft("noise", 0, seed=3, position=position)]
            log: list = []
            hooks = [(name, counting(fn, log)) for name, fn in graft_arms(fam.model, grafts)]
            rows = [Row(p, tag=p, arm=arm) for p in range(2) for arm in (None, *grafts)]
            with fam.model.hooks(fwd_hooks=hooks):
                generate(fam.model, PROMPTS, rows, GREEDY, stop_at_eos=False, fused=fused)
            assert [step for _, step, _ in log] == [-1] * 2 + [0] * 2 + [1] * 2, "both sites, every forward"
            assert all(not changed for _, step, changed in log if step >= 0), "nothing changes while decoding"
            for g in grafts:
                name = fam.model.hook_dict[hook_name(fam.model, g.layer, "resid_post")].name
                cols = sorted(width - 1 if position == -1 else width - len(ids) + position for ids in fam.ids)
                hits = [c for n, step, changed in log if step < 0 for arm, c in changed if arm == g]
                assert sorted(hits) == cols, (fused, g)  # one position per prompt's row, mapped through its padding
                assert all(n == name for n, step, changed in log for arm, _ in changed if arm == g)


def prefill_logits(fam: Family, seen: dict):
    """A hook at the LM head recording each prefill entry's last logits by its first row's tag."""

    def grab(x, *, hook):
        rows = current_rows()
        if rows.step < 0:
            for entry, members in enumerate(rows.entries):
                seen[rows.tags[members[0]]] = fam.logits(x[entry, -1])

    return grab


def hf_zeroed(fam: Family, layer: int, ids: list[int], new: int) -> tuple[torch.Tensor, list[int]]:
    """Plain HF: the last prompt position's output of decoder layer ``layer`` zeroed in the prompt's
    forward only; the first logits and ``new`` greedy tokens (a full re-forward per token, no cache)."""
    prompt_len = len(ids)

    def zero(module, args, out):
        hidden = out[0] if isinstance(out, tuple) else out
        hidden = hidden.clone()
        hidden[:, prompt_len - 1] = 0
        return (hidden, *out[1:]) if isinstance(out, tuple) else hidden

    handle = fam.layer(layer).register_forward_hook(zero)
    try:
        seq = torch.tensor([ids])
        first = None
        for _ in range(new):
            logits = fam.hf(seq, use_cache=False).logits[0, -1]
            first = logits if first is None else first
            seq = torch.cat([seq, logits.argmax()[None, None]], dim=1)
    finally:
        handle.remove()
    return first, seq[0, prompt_len:].tolist()


@torch.no_grad()
def test_a_zero_graft_equals_a_hf_forward_with_that_hidden_state_zeroed(fam):
    graft = Graft("zero", 0)
    seen: dict = {}
    grab = prefill_logits(fam, seen)
    refs = [hf_zeroed(fam, 0, ids, GREEDY.max_new_tokens) for ids in fam.ids]
    plain = [fam.hf(torch.tensor([ids])).logits[0, -1] for ids in fam.ids]
    for fused in fam.paths:
        seen.clear()
        rows = [Row(p, tag=(p, arm), arm=arm) for p in range(2) for arm in (None, graft)]
        with fam.model.hooks(fwd_hooks=graft_arms(fam.model, [graft]) + [("unembed.hook_out", grab)]):
            outs = generate(fam.model, PROMPTS, rows, GREEDY, stop_at_eos=False, fused=fused, share_prefixes=True)
        for p, (logits, tokens) in enumerate(refs):
            torch.testing.assert_close(seen[(p, graft)], logits, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(seen[(p, None)], plain[p], rtol=1e-5, atol=1e-5)
            assert (logits - plain[p]).abs().max() > 1e-2, "the graft must change the logits"
            assert list(outs[2 * p + 1].token_ids) == tokens, (fused, p)


@torch.no_grad()
def test_embedding_noise_equals_hf_with_noise_added_to_its_input_embeddings(fam):
    """Relative to the norm at the site, so Gemma's sqrt(d) embedding scale (inside the bridge's
    embedding) means nothing to the ratio: the reference adds the noise at HF's own embedding."""
    draw = EmbeddingNoise(0.5, seed=intervention_seed(0, "q", 1))
    seen: dict = {}
    grab = prefill_logits(fam, seen)
    def noisy(module, args, out):
        d = out.shape[-1]
        z = counter_normals(torch.tensor([draw.seed]), torch.arange(out.shape[1] * d).view(1, -1, d))
        return (out.double() + z * draw.ratio * out.double().norm(dim=-1, keepdim=True) / math.sqrt(d)).to(out.dtype)

    handle = fam.hf.get_input_embeddings().register_forward_hook(noisy)
    try:
        refs = [fam.hf(torch.tensor([ids])).logits[0, -1] for ids in fam.ids]
    finally:
        handle.remove()
    rows = [Row(p, tag=p, arm=draw) for p in range(2)]
    with fam.model.hooks(fwd_hooks=embedding_noise_arms(fam.model, [draw]) + [("unembed.hook_out", grab)]):
        generate(fam.model, PROMPTS, rows, GREEDY, stop_at_eos=False, share_prefixes=True)
    for p, ref in enumerate(refs):
        torch.testing.assert_close(seen[p], ref, rtol=1e-5, atol=1e-5)
        assert (ref - fam.hf(torch.tensor([fam.ids[p]])).logits[0, -1]).abs().max() > 1e-2


def record_prefill(store: dict, prefill_only: bool = True):
    """A hook recording each entry's prefill activation by its rows' tag (marked safe under sharing)."""
    from reachlens.engine import row_agnostic

    @row_agnostic
    def record(x, *, hook):
        rows = current_rows()
        if rows.step < 0 or not prefill_only:
            for entry, members in enumerate(rows.entries):
                if members:
                    store.setdefault(rows.tags[members[0]], []).append((rows.step, x[entry].clone()))

    return record


@torch.no_grad()
def test_each_kind_writes_what_it_says_at_the_mapped_position(tiny_model):
    site = hook_name(tiny_model, 1, "resid_post")
    grafts = [Graft(kind, 1, seed=7) for kind in GRAFT_KINDS] + [Graft("bos", 1, position=3)]
    before, after, below = {}, {}, {}
    rows = [Row(p, tag=(p, g), arm=g) for p in range(2) for g in grafts]
    hooks = [(site, record_prefill(before)), *graft_arms(tiny_model, grafts), (site, record_prefill(after)),
             (hook_name(tiny_model, 0, "resid_post"), record_prefill(below))]
    with tiny_model.hooks(fwd_hooks=hooks):
        generate(tiny_model, PROMPTS, rows, GREEDY, stop_at_eos=False)
    lengths = [len(ids) for ids in encode_prompts(tokenizer_of(tiny_model), PROMPTS)]
    width = max(lengths)
    for p, n in enumerate(lengths):
        first = width - n
        for g in grafts:
            (_, b), = before[(p, g)]
            (_, a), = after[(p, g)]
            col = width - 1 if g.position == -1 else first + g.position
            others = torch.ones(width, dtype=torch.bool)
            others[col] = False
            assert torch.equal(a[others], b[others]), "only the grafted position changes"
            h, new, d = b[col], a[col], b.shape[-1]
            z = counter_normals(torch.tensor([7]), torch.arange(d)[None])[0]
            expected = {
                "zero": torch.zeros(d),
                "noise": (z * h.double().norm() / math.sqrt(d)).float(),
                "direction": (z / z.norm() * h.double().norm()).float(),
                "bos": b[first],
                "mean": b[first:col].mean(0),
                "prev_layer": below[(p, g)][0][1][col] if g.kind == "prev_layer" else None,
            }
            if g.kind == "permute":
                assert torch.equal(new.sort().values, h.sort().values) and not torch.equal(new, h)
            else:
                torch.testing.assert_close(new, expected[g.kind], rtol=1e-6, atol=1e-6, msg=str(g))
    noise, direction = after[(0, grafts[1])][0][1][-1], after[(0, grafts[2])][0][1][-1]
    assert noise.norm() != pytest.approx(float(before[(0, grafts[1])][0][1][-1].norm()), rel=1e-6)
    assert direction.norm() == pytest.approx(float(before[(0, grafts[2])][0][1][-1].norm()), rel=1e-5)


@torch.no_grad()
def test_a_graft_is_a_pure_function_of_its_seed(tiny_model):
    seeds = [intervention_seed(0, "arith-test-00001", j) for j in range(3)]
    assert len(set(seeds)) == 3 and seeds[0] == intervention_seed(0, "arith-test-00001", 0)
    grafts = [Graft("noise", 1, seed=s) for s in seeds] + [Graft("permute", 0, seed=seeds[0])]
    rows = [Row(p, arm=g) for p in range(2) for g in grafts]
    runs = []
    for order in (rows, rows[::-1]):
        with tiny_model.hooks(fwd_hooks=graft_arms(tiny_model, grafts)):
            outs = generate(tiny_model, PROMPTS, order, GREEDY, stop_at_eos=False)
        runs.append({(r.prompt, r.arm): o.token_ids for r, o in zip(order, outs)})
    assert runs[0] == runs[1]
    assert len({runs[0][(0, g)] for g in grafts}) > 1, "different draws must differ somewhere"


def test_graft_typos_and_impossible_grafts_are_refused_before_decoding(tiny_model):
    with pytest.raises(UnknownNameError, match="unknown graft kind 'zeros'; known: zero, noise"):
        Graft("zeros", 1)
    with pytest.raises(UnknownNameError, match="unknown site 'resid_pots'"):
        graft_arms(tiny_model, [Graft("zero", 1, site="resid_pots")])
    with pytest.raises(ReachlensError, match="layer 3 is out of range for a 3-layer model"):
        graft_arms(tiny_model, [Graft("zero", 3)])
    with pytest.raises(ReachlensError, match="holds .* per position, not one vector"):
        graft_arms(tiny_model, [Graft("zero", 1, site="z")])
    with pytest.raises(ReachlensError, match="prev_layer graft at layer 0 has no layer below at site 'mlp_out'"):
        graft_arms(tiny_model, [Graft("prev_layer", 0, site="mlp_out")])
    graft = Graft("zero", 1, position=13)  # the first prompt has 13 tokens: position 13 is past its end
    with tiny_model.hooks(fwd_hooks=graft_arms(tiny_model, [graft])):
        with pytest.raises(ReachlensError, match="graft position 13 is outside a prompt of 13 tokens"):
            generate(tiny_model, PROMPTS, [Row(0, arm=graft)], GREEDY)
    assert Graft("noise", 3).label == "graft:noise@L3" and Graft("bos", 2, "mlp_out", 4).label == "graft:bos:mlp_out@L2@pos4"
    assert EmbeddingNoise(0.25).label == "embedding_noise:0.25"
    with pytest.raises(ReachlensError, match="ratio=0.0 must be a finite number > 0"):
        EmbeddingNoise(0.0)
