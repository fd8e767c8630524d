"""Per-row interventions: N arms in one batch decode as N one-arm runs do.

Each kind of intervention is run two ways on a tiny model of each engine path (a Llama on the fused
path, a GPT-2 on the generic one): every arm alone, with a plain hook written here (or, for the
prefill-only kinds, the factory's whole-batch hook) acting on every row; and all arms, plus the
plain model, in one ``generate`` call with the factories' per-arm hooks, with and without prefix
sharing. Tokens must be equal, log-probabilities equal to float32 rounding (the batch's composition
changes the matmul shapes).
"""

from __future__ import annotations

import pytest
import torch

from reachlens.engine import BatchRows, LayerStack, Row, current_rows, generate, per_arm, tokenizer_of
from reachlens.errors import ReachlensError
from reachlens.interventions import (
    EmbeddingNoise,
    Graft,
    embedding_noise,
    embedding_noise_arms,
    graft_arms,
    grafting,
    hook_name,
    mean_ablation,
    site_means,
    steering,
    steering_grid,
    unit_ablation,
    unit_ablation_arms,
    zero_ablation,
)
from reachlens.models.testing import make_tiny_model
from reachlens.protocol import Protocol

PROMPTS = ["Q: 12+34=?\nA:", "hello world, a b c", "Q: 7*8-9=?\nA: 7"]
PROTOCOL = Protocol("test", k=1, temperature=1.0, max_new_tokens=6)


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def model(request, tmp_path_factory):
    from reachlens.models import load_model

    return load_model(str(make_tiny_model(request.param, tmp_path_factory.mktemp(request.param))))


def rows_of(arm) -> list[Row]:
    """Per prompt: the greedy row and two samples, tagged by (prompt, arm, sample)."""
    return [Row(p, seed, (p, arm, seed), arm=arm) for p in range(len(PROMPTS)) for seed in (None, 11, 12)]


def plain(fn):
    """A hook written here, with no reachlens marking (so the engine gives every row its own entry)."""
    return lambda x, *, hook: fn(x)


def decode(model, rows, hooks, **kwargs):
    with model.hooks(fwd_hooks=hooks):
        return generate(model, PROMPTS, rows, PROTOCOL, stop_at_eos=False, **kwargs)


def assert_arms_equal_one_at_a_time(model, alone: dict, together: list) -> None:
    """``alone``: arm -> the hooks of that arm on every row; ``together``: the per-arm hooks of all."""
    ref = {None: decode(model, rows_of(None), [])}
    for arm, hooks in alone.items():
        ref[arm] = decode(model, [Row(r.prompt, r.seed, r.tag) for r in rows_of(arm)], hooks)
        assert [c.token_ids for c in ref[arm]] != [c.token_ids for c in ref[None]], f"arm {arm!r} must change the output"
    rows = [r for arm in ref for r in rows_of(arm)]
    for share in (True, False):
        out = decode(model, rows, together, share_prefixes=share)
        for i, arm in enumerate(ref):
            got = out[i * len(ref[arm]) : (i + 1) * len(ref[arm])]
            assert [c.token_ids for c in got] == [c.token_ids for c in ref[arm]], (arm, share)
            for a, b in zip(got, ref[arm]):
                assert a.logprobs == pytest.approx(b.logprobs, rel=1e-5, abs=1e-5), (arm, share)


@torch.no_grad()
def test_zero_ablation_arms(model):
    zero = plain(torch.zeros_like)
    alone = {("L0", "mlp"): [(hook_name(model, 0, "mlp_out"), zero)],
             ("L1", "attn"): [(hook_name(model, 1, "attn_out"), zero)],
             ("L1", "layer"): [(hook_name(model, 1, "attn_out"), zero), (hook_name(model, 1, "mlp_out"), zero)]}
    together = [h for (layer, comp) in alone for h in zero_ablation(model, int(layer[1]), comp, arm=(layer, comp))]
    assert_arms_equal_one_at_a_time(model, alone, together)


@torch.no_grad()
def test_mean_ablation_arms(model):
    names = [hook_name(model, 0, "mlp_out"), hook_name(model, 1, "attn_out")]
    means = site_means(model, PROMPTS, names)
    for name in names:  # against TransformerLens' own cache: the mean over every prompt token
        acts = [model.run_with_cache(model.to_tokens(p))[1][name][0] for p in PROMPTS]
        torch.testing.assert_close(means[name], torch.cat(acts).mean(0), rtol=1e-5, atol=1e-5)
    alone = {"m0": [(names[0], plain(lambda x: means[names[0]].expand_as(x).clone()))],
             "a1": [(names[1], plain(lambda x: means[names[1]].expand_as(x).clone()))]}
    together = mean_ablation(model, 0, "mlp", means, arm="m0") + mean_ablation(model, 1, "attn", means, arm="a1")
    assert_arms_equal_one_at_a_time(model, alone, together)


@torch.no_grad()
def test_steering_grid_arms(model):
    v = torch.randn(64)
    name = hook_name(model, 1, "resid_post")
    grid = {("steer", a): a for a in (-3.0, 2.0, 5.0)}
    alone = {key: [(name, plain(lambda x, a=a: x + a * v))] for key, a in grid.items()}
    alone["mlp"] = [(hook_name(model, 0, "mlp_out"), plain(lambda x: x + 4.0 * v))]
    together = steering_grid(model, 1, v, grid, "resid_post") + steering(model, 0, v, 4.0, "mlp_out", arm="mlp")
    assert_arms_equal_one_at_a_time(model, alone, together)


@torch.no_grad()
def test_unit_mask_arms(model):
    name = hook_name(model, 1, "mlp_post")
    sets = {"top": [0, 3, 5, 9, 11], "random": [2, 4, 6, 8, 10, 12, 14], "L0": [1, 7]}

    def masked(units):
        def fn(x):
            x = x.clone()
            x[..., units] = 0
            return x
        return fn

    alone = {arm: [(name, plain(masked(units)))] for arm, units in sets.items() if arm != "L0"}
    alone["L0"] = [(hook_name(model, 0, "mlp_post"), plain(masked(sets["L0"])))]
    together = unit_ablation_arms(model, 1, {k: sets[k] for k in ("top", "random")})
    together += unit_ablation(model, 0, sets["L0"], arm="L0")
    assert_arms_equal_one_at_a_time(model, alone, together)


@torch.no_grad()
def test_graft_arms(model):
    grafts = [Graft("zero", 1), Graft("noise", 0, seed=5), Graft("permute", 1, seed=9), Graft("mean", 0),
              Graft("prev_layer", 1), Graft("bos", 0, site="mlp_out", position=1)]
    alone = {g: grafting(model, g) for g in grafts}
    assert_arms_equal_one_at_a_time(model, alone, graft_arms(model, grafts))


@torch.no_grad()
def test_embedding_noise_arms(model):
    draws = [EmbeddingNoise(0.5, seed=s) for s in (1, 2)] + [EmbeddingNoise(2.0, seed=1)]
    alone = {n: embedding_noise(model, n) for n in draws}
    assert_arms_equal_one_at_a_time(model, alone, embedding_noise_arms(model, draws))


@torch.no_grad()
def test_rows_of_different_arms_never_share_an_entry(model):
    """The sample tree's roots are (prompt, arm): the prefill has one entry per pair, and in every
    forward each entry stands for rows of one arm, which ``arm_of_entry`` names."""
    seen: list[BatchRows] = []
    arms = ["a", "b"]

    @per_arm(arms)
    def record(x, *, hook):
        seen.append(current_rows())

    rows = [Row(p, seed, arm=arm) for p in range(2) for arm in (None, *arms) for seed in (None, 1, 2, 3)]
    with model.hooks(fwd_hooks=[(hook_name(model, 0, "mlp_out"), record)]):
        generate(model, PROMPTS, rows, PROTOCOL, stop_at_eos=False)
    assert seen[0].step == -1 and seen[0].n_entries == 2 * 3 and seen[0].prompt_mask.shape[0] == 6
    assert seen[0].arms == (None, "a", "b")
    for where in seen:
        for entry, members in enumerate(where.entries):
            if members:
                assert {rows[r].arm for r in members} == {where.arms[int(where.arm_of_entry[entry])]}
                assert len({rows[r].prompt for r in members}) == 1
            else:
                assert int(where.arm_of_entry[entry]) == -1
        idx = where.arm_index(("b", "zz"))
        assert idx.tolist() == [0 if e >= 0 and where.arms[e] == "b" else -1 for e in where.arm_of_entry.tolist()]
        assert where.arm_index(("zz",)) is None
        b_entries = [e for e, a in enumerate(where.arm_of_entry.tolist()) if a >= 0 and where.arms[a] == "b"]
        found = where.arm_entries(("b", "zz"))
        assert (found.tolist() if found is not None else []) == b_entries
        assert where.arm_entries(("zz",)) is None
        both = [e for e, a in enumerate(where.arm_of_entry.tolist()) if a >= 0 and where.arms[a] in ("a", "b")]
        found = where.arm_entries(("b", "a"))
        assert (found.tolist() if found is not None else []) == both


def test_an_arm_no_hook_serves_is_refused_before_decoding(model):
    with model.hooks(fwd_hooks=zero_ablation(model, 0, "mlp", arm="L0 mlp")):
        with pytest.raises(ReachlensError, match=r"rows carry arm 'L0 mpl', which no attached hook serves.*'L0 mlp'"):
            generate(model, PROMPTS, [Row(0), Row(0, arm="L0 mpl")], PROTOCOL)
    with pytest.raises(ReachlensError, match="arm None is the plain model"):
        steering_grid(model, 0, torch.ones(64), {None: 1.0})


def test_a_per_arm_hook_outside_generate_says_so(model):
    ids = torch.tensor([tokenizer_of(model)(PROMPTS[0])["input_ids"]])
    with model.hooks(fwd_hooks=zero_ablation(model, 0, "mlp", arm="x")):
        with pytest.raises(ReachlensError, match="ran outside reachlens.engine.generate"):
            LayerStack(model).forward(ids)
    with model.hooks(fwd_hooks=grafting(model, Graft("zero", 0))):
        with pytest.raises(ReachlensError, match="prefill-only hook .* outside reachlens.engine.generate"):
            LayerStack(model).forward(ids)


def test_the_vllm_backend_refuses_rows_with_arms():
    from reachlens.engine.backends.vllm_model import VLLMModel

    with pytest.raises(ReachlensError, match="vLLM backend runs no interventions, but rows carry arm 'L3 mlp'"):
        VLLMModel.generate_rows(object(), PROMPTS, [Row(0), Row(0, arm="L3 mlp")], PROTOCOL)
