"""The engine on CUDA: what the CPU suite cannot check. Skipped, with the reason, where no CUDA device is present.

    python -m pytest -q tests/gpu        # on a GPU machine (benchmarks/gpu/run.sh runs it first)

* greedy text on CUDA equals the engine's own on the CPU, float32, on every tiny family (the two devices' matrix
  products differ in their last bits, so a near-tie could part them: the tiny models' large init keeps greedy
  margins wide, and a parting names the family and the position);
* sampled text equal between two CUDA runs (the counter-based draws depend on (seed, step) alone);
* a zero-ablation arm and a steering arm equal, token for token, a plain HuggingFace forward hook on the same
  site, float32 (HF ``generate`` greedy under ``register_forward_hook``);
* bfloat16 greedy within a stated tolerance of float32: the first 4 tokens of each prompt equal (bfloat16 rounds
  logits to 8 bits of mantissa; later tokens may part at a near-tie), and the log-probability of those tokens within
  0.1 nats;
* host-device synchronisations under ``torch.cuda.set_sync_debug_mode("warn")``: at most one per decoding step
  plus a constant per call (compared at N and 2N new tokens, as ``tests/engine/test_host_reads.py`` does on the CPU).
"""

from __future__ import annotations

import warnings

import pytest
import torch

from reachlens.engine import Row, generate
from reachlens.interventions import steering, zero_ablation
from reachlens.models.testing import TINY_FAMILIES, make_tiny_model
from reachlens.protocol import Protocol

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() "
                                "is False here); run on a GPU machine: benchmarks/gpu/run.sh")

PROMPTS = ["Q: 12+34=?\nA:", "hello world, a b c", "Q: 7*8-9=?\nA: 7"]
GREEDY = Protocol("gpu", k=1, temperature=1.0, max_new_tokens=16)
SAMPLED = Protocol("gpu", k=8, temperature=1.0, top_p=0.9, max_new_tokens=16)


def _load(folder, device: str, dtype=torch.float32):
    from reachlens.models import load_model

    return load_model(str(folder), device=device, dtype=dtype)


@pytest.fixture(scope="module", params=TINY_FAMILIES)
def family(request, tmp_path_factory):
    return request.param, make_tiny_model(request.param, tmp_path_factory.mktemp(request.param))


def _texts(model, rows, protocol, **kwargs) -> list[tuple[int, ...]]:
    return [c.token_ids for c in generate(model, PROMPTS, rows, protocol, stop_at_eos=False, **kwargs)]


def test_cuda_greedy_equals_cpu_greedy_in_float32(family):
    name, folder = family
    rows = [Row(p) for p in range(len(PROMPTS))]
    cpu, cuda = _texts(_load(folder, "cpu"), rows, GREEDY), _texts(_load(folder, "cuda"), rows, GREEDY)
    for p, (a, b) in enumerate(zip(cpu, cuda)):
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        assert a == b, f"{name}: prompt {p} parts at token {at}: cpu {a[at:at + 4]} cuda {b[at:at + 4]}"


def test_cuda_samples_equal_between_two_runs(family):
    _, folder = family
    model = _load(folder, "cuda")
    rows = [Row(p, seed=s) for p in range(len(PROMPTS)) for s in range(8)]
    assert _texts(model, rows, SAMPLED) == _texts(model, rows, SAMPLED)


def _hf_greedy(hf, tok, prompt: str, hook) -> list[int]:
    ids = torch.tensor([tok(prompt)["input_ids"]], device="cuda")
    handle = hook()
    try:
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=GREEDY.max_new_tokens,
                          do_sample=False, pad_token_id=tok.pad_token_id or 0)
    finally:
        handle.remove()
    return out[0, ids.shape[1]:].tolist()


def test_arms_equal_hf_forward_hooks_in_float32(tmp_path):
    from transformers import AutoModelForCausalLM

    from reachlens.engine import tokenizer_of

    folder = make_tiny_model("llama", tmp_path / "llama", n_layers=3)
    model = _load(folder, "cuda")
    hf = AutoModelForCausalLM.from_pretrained(str(folder)).to("cuda").eval()
    v = torch.linspace(-1.0, 1.0, model.cfg.d_model)
    hooks = zero_ablation(model, 1, "mlp", arm="zero") + steering(model, 2, v, 4.0, "mlp_out", arm="steer")
    rows = [Row(p, arm=a) for p in range(len(PROMPTS)) for a in (None, "zero", "steer")]
    with model.hooks(fwd_hooks=hooks):
        ours = _texts(model, rows, GREEDY)
    mlps = hf.model.layers
    ref = {
        None: lambda: mlps[0].mlp.register_forward_hook(lambda m, i, o: None),
        "zero": lambda: mlps[1].mlp.register_forward_hook(lambda m, i, o: torch.zeros_like(o)),
        "steer": lambda: mlps[2].mlp.register_forward_hook(lambda m, i, o: o + 4.0 * v.to(o)),
    }
    tok = tokenizer_of(model)
    for row, got in zip(rows, ours):
        assert list(got) == _hf_greedy(hf, tok, PROMPTS[row.prompt], ref[row.arm]), (row.prompt, row.arm)


def test_bfloat16_within_tolerance_of_float32(family):
    name, folder = family
    rows = [Row(p) for p in range(len(PROMPTS))]
    full = generate(_load(folder, "cuda"), PROMPTS, rows, GREEDY, stop_at_eos=False)
    half = generate(_load(folder, "cuda", torch.bfloat16), PROMPTS, rows, GREEDY, stop_at_eos=False)
    for p, (a, b) in enumerate(zip(full, half)):
        assert a.token_ids[:4] == b.token_ids[:4], f"{name}: prompt {p}: {a.token_ids[:4]} vs {b.token_ids[:4]}"
        gaps = [abs(x - y) for x, y in zip(a.logprobs[:4], b.logprobs[:4])]
        assert max(gaps) <= 0.1, f"{name}: prompt {p}: log-probabilities part by {max(gaps):.3f} nats"


def _syncs(model, new: int) -> int:
    rows = [Row(p, seed=s) for p in range(2) for s in [None, *range(16)]]
    protocol = Protocol("gpu", k=16, temperature=1.0, top_p=0.9, max_new_tokens=new, stop=("Q:",))
    generate(model, PROMPTS[:2], rows, protocol)
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            generate(model, PROMPTS[:2], rows, protocol)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message).lower() for w in seen)


def test_at_most_one_sync_per_decoding_step():
    model = _load("zoo:base", "cuda")
    n = 8
    short, long = _syncs(model, n), _syncs(model, 2 * n)
    assert long - short <= n, f"{long - short} synchronisations over {n} more decoding steps ({short} at {n})"
