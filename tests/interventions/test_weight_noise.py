"""Weight noise on every family: a draw's hooks run the model HuggingFace runs with ``W + dW``.

For each family a tiny random checkpoint (2 layers, d=64) is built once. The reference is a plain HuggingFace
model of the same checkpoint whose tensors get ``weight_noise_deltas(...)`` added by name (``state_dict``
edited, nothing of reachlens or TransformerLens in its forward). The noise itself is checked against its
definition (per-tensor scale, the low-rank form's shape, the seeded stream) with numbers computed here.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from reachlens.engine import Row, counter_normals, current_rows, generate, tokenizer_of
from reachlens.engine.stack import LayerStack
from reachlens.engine.tokens import encode_prompts
from reachlens.errors import ReachlensError, UnknownNameError
from reachlens.interventions import (
    WeightNoise,
    linear_sites,
    weight_noise,
    weight_noise_arms,
    weight_noise_deltas,
    weight_noise_draws,
)
from reachlens.models.testing import TINY_FAMILIES, make_tiny_model
from reachlens.protocol import Protocol

PROMPTS = ["Q: 12+34=?\nA:", "hello world, a b c d e"]
GREEDY = Protocol("test", k=1, temperature=0.0, max_new_tokens=3)
FUSED = {"llama", "qwen2", "qwen3", "olmo2"}
SIGMA = 0.3  # large enough to move a random model's logits visibly
ARMS_FAMILIES = ["llama", "gemma2", "phi3", "gpt2"]
"""Arms in one batch on four families (the per-family placement is the logits test's): the fused path with a tied
head, softcapping and sliding windows, a joint qkv and gate_up tensor, GPT-2's transposed Conv1D."""


class Family:
    """One family's checkpoint as a bridge and as plain HuggingFace, in float32 (how reachlens runs) and in
    float64 (where ``x W^T + x dW^T`` and ``x (W + dW)^T`` agree far below 1e-5: float32 rounding, about 1e-6 of
    a logit, would otherwise blur a check of the deltas' placement)."""

    def __init__(self, name: str, folder) -> None:
        from transformers import AutoModelForCausalLM

        from reachlens.models import load_model

        self.name, self.folder = name, folder
        self.model = load_model(str(folder))
        self.hf = AutoModelForCausalLM.from_pretrained(str(folder), use_safetensors=True).eval()
        self.model64 = load_model(str(folder), dtype=torch.float64)
        self.hf64 = AutoModelForCausalLM.from_pretrained(str(folder), use_safetensors=True,
                                                         dtype=torch.float64).eval()
        self.ids = encode_prompts(tokenizer_of(self.model), PROMPTS)
        self.paths = (True, False) if name in FUSED else (True,)

    def noised_hf(self, deltas: dict[str, torch.Tensor], hf=None):
        """A copy of the HuggingFace model with each named tensor += its delta."""
        hf = copy.deepcopy(self.hf if hf is None else hf)
        state = hf.state_dict()
        assert set(deltas) <= set(state), set(deltas) - set(state)
        with torch.no_grad():
            for name, delta in deltas.items():
                state[name].add_(delta.to(state[name].dtype))
        return hf

    def logits(self, head_out: torch.Tensor) -> torch.Tensor:
        cap = getattr(self.hf.config, "final_logit_softcapping", None)
        return head_out if cap is None else cap * torch.tanh(head_out / cap)


@pytest.fixture(scope="module", params=TINY_FAMILIES)
def fam(request, tmp_path_factory) -> Family:
    return Family(request.param, make_tiny_model(request.param, tmp_path_factory.mktemp(request.param)))


def padded(ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, ids))
    tokens = torch.tensor([[0] * (width - len(i)) + i for i in ids])
    mask = torch.tensor([[False] * (width - len(i)) + [True] * len(i) for i in ids])
    return tokens, mask


def hf_greedy(hf, ids: list[int], new: int) -> tuple[torch.Tensor, list[int]]:
    """First logits and ``new`` greedy tokens of a HuggingFace model (a full re-forward per token)."""
    seq, first = torch.tensor([ids]), None
    for _ in range(new):
        logits = hf(seq, use_cache=False).logits[0, -1]
        first = logits if first is None else first
        seq = torch.cat([seq, logits.argmax()[None, None]], dim=1)
    return first, seq[0, len(ids):].tolist()


@torch.no_grad()
@pytest.mark.parametrize("rank", [None, 4])
def test_a_draws_logits_equal_hf_with_its_deltas_added_and_no_parameter_moves(fam, rank):
    """float64, one prompt at a time (the generic path's padded float64 forward is not this test's subject), to
    1e-5; float32 on the left-padded batch (full rank), to float32 rounding."""
    noise = WeightNoise(SIGMA, draw=1, seed=7, rank=rank)
    batch, mask = padded(fam.ids)
    for model, hf, tol in ((fam.model64, fam.hf64, 1e-5), (fam.model, fam.hf, 1e-4))[:1 if rank else 2]:
        before = {k: v.clone() for k, v in model.state_dict().items()}
        deltas = weight_noise_deltas(model, noise)
        noised = fam.noised_hf(deltas, hf)
        cases = [(torch.tensor([ids]), None) for ids in fam.ids] if tol == 1e-5 else [(batch, mask)]
        for tokens, m in cases:
            keep = torch.ones_like(tokens, dtype=torch.bool) if m is None else m
            ref = noised(tokens, attention_mask=keep.long()).logits
            plain = hf(tokens, attention_mask=keep.long()).logits
            for fused in fam.paths:
                with model.hooks(fwd_hooks=weight_noise(model, noise)):
                    got = LayerStack(model, fused=fused).forward(tokens, attention_mask=m)
                torch.testing.assert_close(got[keep], ref[keep], rtol=tol, atol=tol)
            assert (ref[keep] - plain[keep]).abs().max() > 1e-2, "the noise must move the logits"
        after = model.state_dict()
        assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def check_arms_decode_as_hf(fam, draws, rows: list[Row], **generate_kwargs) -> None:
    """Decode ``rows`` (prompts of ``PROMPTS``, arms among ``draws`` or None) in one batch with the draws' arm hooks;
    each row's first logits and greedy tokens must be HuggingFace's with its draw's deltas added (the plain
    rows': HF's own), to float32 rounding (see Family)."""
    refs = {d: [hf_greedy(fam.noised_hf(weight_noise_deltas(fam.model, d)), ids, GREEDY.max_new_tokens)
                for ids in fam.ids] for d in draws}
    plain = [hf_greedy(fam.hf, ids, GREEDY.max_new_tokens) for ids in fam.ids]
    seen: dict = {}

    def grab(x, *, hook):
        rows = current_rows()
        if rows.step < 0:
            for entry, members in enumerate(rows.entries):
                for m in members:
                    seen[rows.tags[m]] = fam.logits(x[entry, -1]).clone()

    with fam.model.hooks(fwd_hooks=weight_noise_arms(fam.model, draws) + [("unembed.hook_out", grab)]):
        outs = generate(fam.model, PROMPTS, rows, GREEDY, stop_at_eos=False, **generate_kwargs)
    for out, row in zip(outs, rows):
        logits, tokens = (plain if row.arm is None else refs[row.arm])[row.prompt]
        torch.testing.assert_close(seen[row.tag], logits, rtol=1e-4, atol=1e-4)
        assert list(out.token_ids) == tokens, (generate_kwargs, row.tag)


@torch.no_grad()
@pytest.mark.parametrize("fam", ARMS_FAMILIES, indirect=True)
def test_draws_as_arms_decode_beside_the_greedy_deployment_as_hf_does(fam):
    draws = (WeightNoise(SIGMA, draw=1, seed=3), WeightNoise(SIGMA / 2, draw=0, seed=3, rank=2))
    rows = [Row(p, tag=(p, arm), arm=arm) for p in range(2) for arm in (None, *draws)]
    for fused in fam.paths:
        check_arms_decode_as_hf(fam, draws, rows, fused=fused, share_prefixes=True)


@torch.no_grad()
@pytest.mark.parametrize("fam", ["llama"], indirect=True)
def test_many_draws_with_uneven_rows_in_one_batched_product_are_each_hf_with_its_deltas(fam):
    """Draws gathered by their noise ``N`` into one batched product per map: two sigmas of one draw share ``N``,
    arms hold unequal numbers of entries (padding), and one arm runs on one prompt only; each row's first logits
    and greedy tokens are HuggingFace's with that draw's deltas added, the plain rows HF's own."""
    draws = [WeightNoise(s, draw=j, seed=5) for s in (SIGMA, SIGMA / 3) for j in range(2)]
    rows = [Row(0, tag=(0, None))] + [Row(0, tag=(0, d), arm=d) for d in draws]
    rows += [Row(1, tag=(1, None)), Row(1, tag=(1, draws[3]), arm=draws[3]), Row(1, tag=(1, "again"), arm=draws[3])]
    check_arms_decode_as_hf(fam, draws, rows, share_prefixes=False)


@torch.no_grad()
def test_a_weight_noise_probe_candidate_is_hf_with_its_deltas_on_every_family(fam):
    """A probe run's weight-noise candidates (arms beside the greedy deployment, in one batch): each candidate's
    first logits are HuggingFace's forward of its prompt with the draw's deltas added (float32, to 1e-4), the greedy
    row's the plain model's, and no parameter moves."""
    from reachlens import ExecConfig, load_task, probe

    task = load_task("arith", n=2)
    protocol = Protocol.greedy("arith", max_new_tokens=2)
    before = {k: v.clone() for k, v in fam.model.state_dict().items()}
    seen: dict = {}

    def grab(x, *, hook):
        try:
            rows = current_rows()
        except RuntimeError:  # the probe's checks run forwards of their own, outside a decode
            return
        if rows.step < 0:
            for entry, members in enumerate(rows.entries):
                for m in members:
                    seen[rows.tags[m]] = fam.logits(x[entry, -1]).clone()

    with fam.model.hooks(fwd_hooks=[("unembed.hook_out", grab)]):
        run = probe(fam.model, task, [f"weight_noise:sigma={SIGMA}:k=2"], protocol=protocol,
                    exec_config=ExecConfig(max_batch_rows=6))
    after = fam.model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    hf = {j: fam.noised_hf(weight_noise_deltas(fam.model, WeightNoise(SIGMA, draw=j, seed=protocol.seed)))
          for j in range(2)}
    moved = 0.0
    for r in run.candidates.itertuples():
        q = next(q for q in task.questions if q.question_id == r.question_id)
        ids = torch.tensor(encode_prompts(tokenizer_of(fam.model), [task.prompt(q)]))
        noised = r.probe != "greedy"
        ref = (hf[r.candidate_idx] if noised else fam.hf)(ids).logits[0, -1]
        got = seen[(r.question_id, (0, r.candidate_idx) if noised else None)]
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
        moved = max(moved, float((ref - fam.hf(ids).logits[0, -1]).abs().max()))
    assert moved > 1e-2, "the noise must move the logits"


def test_the_noise_is_sigma_times_each_tensors_std_times_seeded_normals(fam):
    noise = WeightNoise(0.05, draw=2, seed=11)
    deltas = weight_noise_deltas(fam.model, noise)
    state = fam.hf.state_dict()
    assert {s.param for s in linear_sites(fam.model)} == set(deltas)
    for name, delta in deltas.items():
        w = state[name]
        assert delta.shape == w.shape and delta.dtype == torch.float32
        z = delta.double() / (0.05 * w.double().std())
        assert abs(float(z.mean())) < 4 / math.sqrt(z.numel()) and abs(float(z.std()) - 1) < 0.1, name
    again = weight_noise_deltas(fam.model, WeightNoise(0.05, draw=2, seed=11))
    assert all(torch.equal(deltas[k], again[k]) for k in deltas), "deterministic given (seed, sigma, draw)"
    double = weight_noise_deltas(fam.model, WeightNoise(0.1, draw=2, seed=11))
    other = weight_noise_deltas(fam.model, WeightNoise(0.05, draw=3, seed=11))
    for k in deltas:
        torch.testing.assert_close(double[k], 2 * deltas[k])  # one direction per draw, scaled by sigma
        assert not torch.allclose(other[k], deltas[k])


def test_the_low_rank_form_has_rank_r_and_unit_variance_entries(tiny_model, tiny_hf):
    r = 3
    deltas = weight_noise_deltas(tiny_model, WeightNoise(1.0, draw=0, rank=r))
    state = tiny_hf.state_dict()
    unit = torch.cat([(d.double() / state[n].double().std()).flatten() for n, d in deltas.items()])
    assert abs(float(unit.std()) - 1) < 0.1, "entries of B A / sqrt(R): variance 1, as the full form's"
    for name, d in deltas.items():
        assert int(torch.linalg.matrix_rank(d.double(), rtol=1e-5)) == r, name


def test_the_stream_is_the_engines_counter_normals_in_the_checkpoints_layout(tiny_model, tiny_hf):
    """Draw 0 of seed 0 at sigma = 1 / std(W): dW is the counter-based normals of the tensor's seed, row-major."""
    import hashlib

    name = "model.layers.1.mlp.down_proj.weight"
    std = float(tiny_hf.state_dict()[name].double().std())
    delta = weight_noise_deltas(tiny_model, WeightNoise(1.0 / std, targets="out"))[name]
    seed = int.from_bytes(hashlib.sha256(f"weight_noise\x1f0\x1f0\x1f{name}".encode()).digest()[:4], "little")
    z = counter_normals(torch.tensor([seed]), torch.arange(delta.numel())[None])[0].view(delta.shape)
    torch.testing.assert_close(delta.double(), z, rtol=1e-6, atol=1e-6)


def test_targets_are_resolved_and_bad_ones_refused(fam):
    sites = linear_sites(fam.model, "attn")
    assert {s.map for s in sites} == {"attn.q", "attn.k", "attn.v", "attn.o"}
    assert len(linear_sites(fam.model)) == len(fam.model.blocks) * (6 if fam.name in ("gpt2", "gpt_neox") else 7)
    with pytest.raises(UnknownNameError, match="unknown weight target 'atn'"):
        WeightNoise(0.1, targets="atn")
    if fam.name in ("gpt2", "gpt_neox"):
        with pytest.raises(ReachlensError, match="no linear map 'mlp.gate'"):
            linear_sites(fam.model, "gate")
    if fam.hf.config.tie_word_embeddings:
        with pytest.raises(ReachlensError, match="tied weights"):
            linear_sites(fam.model, "unembed")


@pytest.mark.parametrize("bad", [dict(sigma=-0.1), dict(sigma=float("nan")), dict(sigma=0.1, rank=0),
                                 dict(sigma=0.1, draw=-1), dict(sigma=float("inf"))])
def test_bad_draws_are_refused_in_one_line(bad):
    with pytest.raises(ReachlensError):
        WeightNoise(**bad)


@torch.no_grad()
def test_sigma_zero_is_the_plain_model_bit_for_bit(tiny_model):
    tokens = torch.tensor([[1, 5, 9, 12]])
    plain = LayerStack(tiny_model).forward(tokens)
    with tiny_model.hooks(fwd_hooks=weight_noise(tiny_model, WeightNoise(0.0))):
        assert torch.equal(LayerStack(tiny_model).forward(tokens), plain)


def test_the_grid_is_sigma_major_and_every_draw_is_served_as_an_arm(tiny_model):
    from reachlens.engine import arms_served

    draws = weight_noise_draws([0.1, 0.2], k=3, seed=5)
    assert [(d.sigma, d.draw, d.seed) for d in draws] == [(s, j, 5) for s in (0.1, 0.2) for j in range(3)]
    assert draws[0].unit == draws[3].unit and draws[0].unit != draws[1].unit  # one direction per draw index
    mixed = {**{("wn", i): d for i, d in enumerate(draws)}, "q only": WeightNoise(0.1, targets="q")}
    hooks = weight_noise_arms(tiny_model, mixed)
    n_sites = len(linear_sites(tiny_model)) + len(linear_sites(tiny_model, "q"))
    assert len(hooks) == 2 * n_sites  # the input and the output of every map, one hook set per targets
    with tiny_model.hooks(fwd_hooks=hooks):
        assert set(arms_served(tiny_model)) == set(mixed)
    with pytest.raises(ReachlensError, match="arm None"):
        weight_noise_arms(tiny_model, {None: draws[0]})
