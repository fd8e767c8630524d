"""Every family runs through the engine and equals plain HuggingFace.

For each family a tiny random checkpoint is built here from its ``transformers`` config class
(2 layers, d=64; Gemma 2 softcapped with a sliding window shorter than the prompts, Gemma 3 with
mixed sliding/full layers, GPT-NeoX with partial rotary and parallel residual, GPT-2 with learned
positions, Mistral with a sliding window). The references are plain HuggingFace: ``generate``, a
forward over a hand-built list of decoder layers, a forward with an MLP hooked to return zeros, a
log-softmax sum; none of them goes through reachlens or TransformerLens.
"""

from __future__ import annotations

import contextlib
from collections import Counter

import pytest
import torch
from torch import nn

from reachlens.protocol import Protocol
from reachlens.engine import LayerStack, Row, describe, generate, loglikelihoods, tokenizer_of
from reachlens.routing import route_logits
from reachlens.engine.tokens import encode_prompts
from reachlens.errors import ReachlensError, UnknownNameError
from reachlens.interventions import SITES, ablated, hook_name, mlp_out_weight, zero_ablation
from reachlens.models.pruning import PruneConfig, prune_
from reachlens.models.testing import TINY_FAMILIES, make_tiny_model


def decode(max_new_tokens: int, **fields) -> Protocol:
    """The engine's decode spec for these tests: a Protocol (sampled rows at temperature 1.0 unless given)."""
    fields.setdefault("temperature", 1.0)
    return Protocol("test", k=1, max_new_tokens=max_new_tokens, **fields)


def generate_to_length(*args, **kwargs):
    """:func:`generate` with EOS not stopping a row: every decode in these tests runs to its length."""
    return generate(*args, stop_at_eos=False, **kwargs)


PROMPTS = ["Q: 12+34=?\nA:", "Q: 5-3+2=?\nA: 5-3=2", "hello world, a b c", "Q: 7*8-9+10-11=?\nA:"]
SKIP, REPEAT = (1,), (0, 1, 1)
FUSED = {"llama", "qwen2", "qwen3", "olmo2"}  # mistral's sliding window sends it down the generic path


class Family:
    def __init__(self, name: str, folder) -> None:
        from transformers import AutoModelForCausalLM

        from reachlens.models import load_model

        self.name = name
        self.folder = folder
        self.model = load_model(str(folder))
        self.hf = AutoModelForCausalLM.from_pretrained(str(folder), use_safetensors=True).eval()
        self.tok = tokenizer_of(self.model)


_BUILT: dict[str, Family] = {}


def family(name: str, tmp_path_factory) -> Family:
    if name not in _BUILT:
        _BUILT[name] = Family(name, make_tiny_model(name, tmp_path_factory.mktemp(name)))
    return _BUILT[name]


@pytest.fixture(scope="module", params=TINY_FAMILIES)
def fam(request, tmp_path_factory) -> Family:
    yield family(request.param, tmp_path_factory)
    _BUILT.pop(request.param, None)  # one family's models at a time


def _base(hf):
    return getattr(hf, hf.base_model_prefix)


def _layers_name(hf) -> str:
    return "h" if hasattr(_base(hf), "h") else "layers"


@contextlib.contextmanager
def hf_route(hf, route):
    """The plain HF model with its decoder-layer list replaced by ``route`` (each layer keeps its
    attention type), as one would hand-build a routed model. Use without a KV cache."""
    base, name, cfg = _base(hf), _layers_name(hf), hf.config
    layers, n, types = getattr(base, name), cfg.num_hidden_layers, getattr(cfg, "layer_types", None)
    setattr(base, name, nn.ModuleList([layers[i] for i in route]))
    cfg.num_hidden_layers = len(route)
    if types is not None:
        cfg.layer_types = [types[i] for i in route]
    try:
        yield hf
    finally:
        setattr(base, name, layers)
        cfg.num_hidden_layers = n
        if types is not None:
            cfg.layer_types = types


def ids_of(fam: Family, text: str) -> torch.Tensor:
    return torch.tensor([fam.tok(text)["input_ids"]])


def hf_greedy(fam: Family, prompts: list[str], n: int) -> list[list[int]]:
    enc = fam.tok(prompts, return_tensors="pt", padding=True)
    out = fam.hf.generate(**enc, do_sample=False, max_new_tokens=n, min_new_tokens=n, eos_token_id=None,
                          pad_token_id=fam.tok.pad_token_id)
    return out[:, enc.input_ids.shape[1]:].tolist()


@torch.no_grad()
def test_the_path_each_family_takes(fam):
    info = describe(fam.model)
    assert info.model_type == fam.hf.config.model_type and info.n_layers == 2
    assert info.path == ("fused" if fam.name in FUSED else "generic"), info.reason


@torch.no_grad()
def test_greedy_equals_hf_generate_alone_and_in_a_left_padded_batch(fam):
    params = decode(12)
    for p in PROMPTS[:2]:
        ours = generate_to_length(fam.model, [p], [Row(0)], params)[0]
        ref = hf_greedy(fam, [p], 12)[0]
        assert list(ours.token_ids) == ref
        assert len(set(ref)) > 2, "the reference must vary, or the equality proves little"
    lengths = {len(x) for x in encode_prompts(fam.tok, PROMPTS)}
    window = getattr(fam.hf.config, "sliding_window", None)
    assert len(lengths) > 1 and (window is None or max(lengths) > 2 * window)
    batched = generate_to_length(fam.model, PROMPTS, [Row(i) for i in range(len(PROMPTS))], params, max_batch_rows=64)
    assert [list(o.token_ids) for o in batched] == hf_greedy(fam, PROMPTS, 12)


@torch.no_grad()
def test_identity_route_equals_the_bridge_forward_and_hf(fam):
    ids = ids_of(fam, PROMPTS[1])
    ours = LayerStack(fam.model).forward(ids)
    torch.testing.assert_close(ours, fam.model(ids), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours, fam.hf(ids).logits, rtol=1e-4, atol=1e-4)
    if fam.name in FUSED:  # both paths, against each other
        generic = LayerStack(fam.model, fused=False).forward(ids)
        torch.testing.assert_close(ours, generic, rtol=1e-5, atol=1e-5)


@torch.no_grad()
@pytest.mark.parametrize("route", [SKIP, REPEAT], ids=["skip", "repeat"])
def test_routes_equal_a_hand_built_hf_forward(fam, route):
    ids = ids_of(fam, PROMPTS[3])  # longer than the sliding window
    ours = LayerStack(fam.model).forward(ids, route=route)
    with hf_route(fam.hf, route) as routed:
        ref = routed(ids, use_cache=False).logits
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)
    assert (ours - fam.hf(ids).logits).abs().max() > 1e-2, "the route must change the logits"


@torch.no_grad()
def test_route_trie_equals_one_forward_per_route(fam):
    """The trie executor stacks the states of routes that share a prefix (the layer arguments the
    family's forward prepared are stacked with them); one-row and two-row batches."""
    p = encode_prompts(fam.tok, [PROMPTS[3]])[0]
    ids = torch.tensor([p, p[::-1]])
    routes = [SKIP, REPEAT, (0, 1), (1, 0), (0, 1, 1)]
    stack = LayerStack(fam.model)
    for batch in (ids[:1], ids):
        trie = route_logits(fam.model, batch, routes, last_only=False)
        for r, logits in zip(routes, trie):
            torch.testing.assert_close(logits, stack.forward(batch, route=r), rtol=1e-4, atol=1e-4)


@torch.no_grad()
def test_repeat_route_cache_equals_a_full_re_forward_each_step(fam):
    n = 10
    ours = generate_to_length(fam.model, [PROMPTS[0]], [Row(0)], decode(n), route=REPEAT)[0]
    ids = ids_of(fam, PROMPTS[0])
    with hf_route(fam.hf, REPEAT) as routed:
        for _ in range(n):
            nxt = routed(ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
    assert list(ours.token_ids) == ids[0, -n:].tolist()


@torch.no_grad()
def test_zero_ablating_an_mlp_equals_a_hand_zeroed_hf_forward(fam):
    ids = ids_of(fam, PROMPTS[3])
    with ablated(fam.model, 0, "mlp"):
        ours = LayerStack(fam.model).forward(ids)
    mlp = getattr(_base(fam.hf), _layers_name(fam.hf))[0].mlp
    handle = mlp.register_forward_hook(lambda mod, args, out: torch.zeros_like(out))
    try:
        ref = fam.hf(ids).logits
    finally:
        handle.remove()
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)
    assert (ours - fam.hf(ids).logits).abs().max() > 1e-2, "the ablation must change the logits"


@torch.no_grad()
def test_recognition_loglikelihoods_equal_a_direct_hf_computation(fam):
    requests = [("Q: 12+34=?\nA:", " 46"), ("Q: 12+34=?\nA:", " 47 #### 47"), ("hello world", " ab")]
    ours = loglikelihoods(fam.model, requests, batch_size=2)
    for (ctx, cont), r in zip(requests, ours):
        whole = fam.tok(ctx + cont)["input_ids"]
        n = len(whole) - len(fam.tok(ctx)["input_ids"])
        logits = fam.hf(torch.tensor([whole[:-1]])).logits[0, -n:].float()
        ref = float(torch.log_softmax(logits, -1).gather(-1, torch.tensor(whole[-n:])[:, None]).sum())
        assert r.logprob == pytest.approx(ref, abs=2e-4, rel=1e-5) and r.n_tokens == n


def test_the_model_s_own_tokenizer_is_the_one_to_tokens_uses(fam):
    """``model.to_tokens`` gives the ids the engine decodes, so ``run_with_cache`` sees the audit's prompt."""
    from transformers import AutoTokenizer

    own = AutoTokenizer.from_pretrained(str(fam.folder))
    for p in PROMPTS:
        assert fam.model.to_tokens(p)[0].tolist() == own(p)["input_ids"] == encode_prompts(fam.tok, [p])[0]
    assert fam.model.cfg.default_prepend_bos is False
    logits, cache = fam.model.run_with_cache(fam.model.to_tokens(PROMPTS[0]))
    assert cache["blocks.0.hook_resid_pre"].shape[1] == len(encode_prompts(fam.tok, PROMPTS[:1])[0])
    torch.testing.assert_close(logits, LayerStack(fam.model).forward(ids_of(fam, PROMPTS[0])), rtol=1e-4, atol=1e-4)


@torch.no_grad()
def test_mlp_units_and_pruning_resolve_on_every_family(fam):
    """The MLP's output is W_out @ hook_post (+ bias): unit contributions are exact on every layout
    (GPT-2 stores W_out transposed); pruning finds each family's MLP and attention weights."""
    seen = {}

    def grab(key):
        def hook(x, hook):
            seen[key] = x
        return hook

    with fam.model.hooks(fwd_hooks=[(hook_name(fam.model, 1, "mlp_post"), grab("post")),
                                    (hook_name(fam.model, 1, "mlp.hook_out"), grab("out"))]):
        LayerStack(fam.model).forward(ids_of(fam, PROMPTS[0]))
    post, out = seen["post"], seen["out"]
    w = mlp_out_weight(fam.model, 1)
    assert w.shape == (64, post.shape[-1])
    bias = getattr(fam.model.blocks[1].mlp.out, "bias", None)
    torch.testing.assert_close(post @ w.T + (0 if bias is None else bias), out, rtol=1e-4, atol=1e-4)

    from transformers import AutoModelForCausalLM

    copy = AutoModelForCausalLM.from_pretrained(str(fam.folder), use_safetensors=True)
    report = prune_(copy, PruneConfig(layers=(1,), fraction=0.5, components=("mlp", "attn")))
    assert len(report) >= 3 and all(0.5 <= r["zero_fraction"] < 0.6 for r in report.values()), report


NO_SITE = {  # site -> why it is refused on that family (every other site of SITES resolves)
    "gpt_neox": {"resid_mid": "has no hook point", "pre_linear": "has no hook point",  # parallel; plain MLP
                 "rot_q": "never fires", "rot_k": "never fires"},  # TransformerLens' joint-qkv attention
    "gpt2": {"pre_linear": "has no hook point", "rot_q": "has no hook point", "rot_k": "has no hook point"},
    "phi3": {"rot_q": "never fires", "rot_k": "never fires"},
}


@torch.no_grad()
def test_every_site_resolves_and_fires_on_every_forward_or_is_refused(fam):
    """``hook_name`` on TransformerLens' site names: each site the family has fires on the prefill and
    on every decoding step; the others are refused by name before anything runs."""
    refused = NO_SITE.get(fam.name, {})
    names = {}
    for site, path in SITES.items():
        if site in refused:
            with pytest.raises(ReachlensError, match=f"site '{site}'.*" if refused[site] == "never fires" else
                               f"{refused[site]} 'blocks.1.{path}'.*site '{site}'"):
                hook_name(fam.model, 1, site)
        else:
            names[site] = hook_name(fam.model, 1, site)
            assert names[site] == f"blocks.1.{path}"
    fired: Counter = Counter()

    def count(site):
        def hook(x, *, hook):
            fired[site] += 1
        return hook

    with fam.model.hooks(fwd_hooks=[(n, count(s)) for s, n in names.items()]):
        generate_to_length(fam.model, [PROMPTS[0]], [Row(0)], decode(3))
    assert fired == Counter({s: 3 for s in names}), "each site fires on the prefill and on 2 decoding steps"


@torch.no_grad()
def test_attn_out_and_mlp_out_are_what_a_block_adds_to_the_residual_stream(fam):
    """TransformerLens' semantics on every family, post-norm ones included (Gemma 2/3 and OLMo 2 norm
    the attention and MLP outputs before adding them): the residual stream is the sum of its writes,
    and resid_pre / resid_post are HuggingFace's hidden states."""
    seen = {}

    def grab(site):
        def hook(x, *, hook):
            seen[site] = x.clone()
        return hook

    sites = ["resid_pre", "attn_out", "mlp_out", "resid_post"] + ([] if fam.name in NO_SITE
                                                                  and "resid_mid" in NO_SITE[fam.name] else ["resid_mid"])
    ids = ids_of(fam, PROMPTS[3])
    with fam.model.hooks(fwd_hooks=[(hook_name(fam.model, 0, s), grab(s)) for s in sites]):
        LayerStack(fam.model).forward(ids)
    tol = dict(rtol=1e-4, atol=1e-4)
    if "resid_mid" in seen:
        torch.testing.assert_close(seen["resid_mid"], seen["resid_pre"] + seen["attn_out"], **tol)
        torch.testing.assert_close(seen["resid_post"], seen["resid_mid"] + seen["mlp_out"], **tol)
    else:  # GPT-NeoX: attention and MLP read the same input, in parallel
        torch.testing.assert_close(seen["resid_post"], seen["resid_pre"] + seen["attn_out"] + seen["mlp_out"], **tol)
    hidden = fam.hf(ids, output_hidden_states=True).hidden_states
    torch.testing.assert_close(seen["resid_pre"], hidden[0], **tol)
    torch.testing.assert_close(seen["resid_post"], hidden[1], **tol)
    post_norm = fam.name in ("gemma2", "gemma3", "olmo2")
    assert (hook_name(fam.model, 0, "mlp_out") == "blocks.0.hook_mlp_out"
            and (fam.model.hook_dict["blocks.0.hook_mlp_out"] is fam.model.hook_dict["blocks.0.mlp.hook_out"])
            != post_norm), "mlp_out is the MLP's own output except after a post-MLP norm"


def test_a_site_typo_fails_before_anything_runs(fam):
    with pytest.raises(UnknownNameError, match="unknown site 'mlp_outt'; did you mean 'mlp_out'.*known sites: resid_pre"):
        zero_ablation(fam.model, 0, "mlp_outt")
    with pytest.raises(UnknownNameError, match="'attn' is ambiguous.*'attn_out' or 'pattern'"):
        hook_name(fam.model, 0, "attn")
    with pytest.raises(ReachlensError, match="layer 2 is out of range for a 2-layer model"):
        hook_name(fam.model, 2, "mlp_out")
    with pytest.raises(ReachlensError, match="site 'attn.hook_result'.*set_use_attn_result"):
        hook_name(fam.model, 0, "attn.hook_result")


@torch.no_grad()
def test_resid_mid_is_read_only_because_the_bridge_hooks_the_mlp_input_there(fam):
    """In TransformerLens 4's bridge ``hook_resid_mid`` is the MLP's input: zeroing it there (with a
    plain TransformerLens hook) leaves the residual stream after the block non-zero, which in
    ``HookedTransformer`` it would not be. So reachlens' interventions refuse to edit it."""
    if "resid_mid" in NO_SITE.get(fam.name, {}):  # GPT-NeoX: parallel attention and MLP, no resid_mid at all
        with pytest.raises(UnknownNameError, match="no hook point 'blocks.0.hook_resid_mid'"):
            zero_ablation(fam.model, 0, "resid_mid")
        return
    seen = {}

    def grab(x, *, hook):
        seen["post"] = x.clone()

    zero = lambda x, *, hook: torch.zeros_like(x)  # noqa: E731
    with fam.model.hooks(fwd_hooks=[(hook_name(fam.model, 0, "resid_mid"), zero),
                                    (hook_name(fam.model, 0, "resid_post"), grab)]):
        LayerStack(fam.model).forward(ids_of(fam, PROMPTS[0]))
    assert seen["post"].abs().max() > 1e-3
    with pytest.raises(ReachlensError, match="'resid_mid' can be read but not edited: .*MLP's input.*'attn_out'"):
        zero_ablation(fam.model, 0, "resid_mid")


@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_and_generic_paths_agree_on_samples_and_routes(name, tmp_path_factory):
    """Both execution paths on the families that have both: same tokens, log-probabilities to rounding."""
    fam = family(name, tmp_path_factory)
    assert describe(fam.model).attention == "fused"
    rows = [Row(p) for p in range(2)] + [Row(p, seed=100 + j) for p in range(2) for j in range(6)]
    params = decode(10, temperature=1.0)
    for route in (None, REPEAT):
        fused = generate_to_length(fam.model, PROMPTS[:2], rows, params, route=route)
        generic = generate_to_length(fam.model, PROMPTS[:2], rows, params, route=route, fused=False)
        assert [o.token_ids for o in fused] == [o.token_ids for o in generic]
        for a, b in zip(fused, generic):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    _BUILT.pop(name, None)


def test_a_tokenizer_that_prepends_bos_keeps_one_bos(tmp_path):
    """A Llama-style tokenizer adds BOS itself: the engine, ``model.tokenizer`` and ``model.to_tokens``
    all give one BOS (TransformerLens' default would otherwise be set against it)."""
    from tokenizers import processors
    from transformers import AutoTokenizer

    from reachlens.models import load_model
    from reachlens.models.char_tokenizer import build_char_tokenizer
    from reachlens.models.testing import TEST_ALPHABET

    folder = make_tiny_model("llama", tmp_path / "bos")
    tok = build_char_tokenizer(TEST_ALPHABET)
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", tok.bos_token_id)])
    tok.save_pretrained(folder)
    own = AutoTokenizer.from_pretrained(str(folder))
    ids = own(PROMPTS[0])["input_ids"]
    assert ids[0] == own.bos_token_id and ids[1] != own.bos_token_id
    model = load_model(str(folder))
    assert model.cfg.default_prepend_bos is True
    assert model.to_tokens(PROMPTS[0])[0].tolist() == ids == encode_prompts(model.tokenizer, PROMPTS[:1])[0]
