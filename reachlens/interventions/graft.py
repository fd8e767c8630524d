"""Activation grafts: replace one position's activation at one layer, once, in the prompt's prefill.

A graft (the activation probe of "Hard or Just Unreached?", arXiv 2606.19636) replaces the block
output of the *last prompt token* at one layer (site ``blocks.{layer}.hook_resid_post`` by default)
with a fixed perturbation, in the prefill forward only; the greedy decode that follows runs the
plain model over the perturbed prompt's cache. It is deterministic and answer-blind: what it
writes depends on the prompt's own activations and, for the random kinds, on a seed per (seed,
question, candidate) (:func:`~reachlens.engine.rng.intervention_seed`), drawn with the engine's
counter-based generator, so a graft is a pure function of its :class:`Graft`. A graft is an
intervention, not a decoding method: report what it reaches apart from sampling.

Kinds (``h`` is the activation being replaced, ``d`` its width):

* ``zero``: zeros;
* ``noise``: Gaussian noise with per-component standard deviation ``|h| / sqrt(d)``, so its
  expected norm matches ``|h|`` (the norm of a draw varies around it);
* ``direction``: a random unit direction scaled to exactly ``|h|``;
* ``permute``: ``h`` with its hidden dimensions permuted (a random permutation; same norm);
* ``bos``: the activation at the prompt's first position (its BOS token, where the tokenizer adds
  one), same layer and site;
* ``mean``: the mean of the activations at the prompt's other positions (needs >= 2 tokens);
* ``prev_layer``: the activation at the same site and position one layer down (for layer 0 at
  ``resid_post``: the block's input, the embedding).

Position: ``-1`` is the last prompt token (the last column of the left-padded prefill batch); a
non-negative position counts tokens from the prompt's first real token, a negative one from its
end, each mapped through every row's own left padding. A position outside a prompt is refused.

The hooks fire in the prefill forward only (``current_rows().step == -1``) and return the
activation untouched while decoding, so prefix sharing stays on for the decode that follows.
:func:`grafting` grafts every row; :func:`graft_arms` makes each graft an arm (``Row.arm`` is the
:class:`Graft` itself), so all grafts of a question decode in one batch, one hook per site.

Numerics: the replacement is computed in float32 (the noise in float64) and cast to the
activation's dtype; a ``zero`` graft equals a HuggingFace forward whose decoder layer's output is
zeroed at that position (tested per family).

>>> g = Graft("noise", layer=3, seed=intervention_seed(0, "arith-test-00007", 2))  # doctest: +SKIP
>>> rows = [Row(q, tag=(qid, None)), Row(q, tag=(qid, 2), arm=g)]  # doctest: +SKIP
>>> with model.hooks(fwd_hooks=graft_arms(model, [g])):  # doctest: +SKIP
...     outs = generate(model, prompts, rows, Protocol.greedy(task))
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from reachlens.engine.hooks import BatchRows, FwdHook, HookFn, current_rows, keyed_arms, per_arm, row_agnostic
from reachlens.engine.rng import counter_normals
from reachlens.engine.sites import SITE_ALIASES, hook_name, site_shape
from reachlens.errors import ReachlensError, UnknownNameError

__all__ = [
    "GRAFT_KINDS", "RANDOM_KINDS", "Graft", "graft_arms", "grafting", "prefill_entries", "prefill_rows", "prompt_columns",
]

GRAFT_KINDS = ("zero", "noise", "direction", "permute", "bos", "mean", "prev_layer")
"""The perturbations a graft writes (see the module docstring)."""
RANDOM_KINDS = frozenset({"noise", "direction", "permute"})
"""The kinds that draw from their seed."""


@dataclass(frozen=True)
class Graft:
    """One graft: what replaces which activation. Hashable, so a graft is its own arm (``Row.arm``)."""

    kind: str
    """One of :data:`GRAFT_KINDS`."""
    layer: int
    """The block whose site is replaced."""
    site: str = "resid_post"
    """A TransformerLens site of the block holding one vector per position (default: its output)."""
    position: int = -1
    """The prompt token replaced: -1 the last; >= 0 from the first real token; < 0 from the end."""
    seed: int = 0
    """The draw of a random kind (:data:`RANDOM_KINDS`); see :func:`~reachlens.engine.rng.intervention_seed`."""

    def __post_init__(self) -> None:
        if self.kind not in GRAFT_KINDS:
            raise UnknownNameError(f"unknown graft kind {self.kind!r}; known: {', '.join(GRAFT_KINDS)}")
        for name in ("layer", "position", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ReachlensError(f"graft {name}={value!r} must be an integer")

    @property
    def label(self) -> str:
        """The arm's name in tables: ``graft:zero@L3`` (site and position added when not the defaults)."""
        site = "" if SITE_ALIASES.get(self.site, self.site) == "resid_post" else f":{self.site}"
        pos = "" if self.position == -1 else f"@pos{self.position}"
        return f"graft:{self.kind}{site}@L{self.layer}{pos}"


def prefill_rows():
    """The running forward's :class:`~reachlens.engine.hooks.BatchRows` if it is a prefill, else None.

    Raises:
        ReachlensError: outside :func:`reachlens.engine.generate` (a prefill-only hook needs to know
            which forward is the prefill).
    """
    try:
        rows = current_rows()
    except RuntimeError:
        raise ReachlensError("a prefill-only hook (graft, embedding noise) ran outside reachlens.engine.generate; "
                             "it knows the prompt's prefill only there") from None
    return rows if rows.step < 0 else None


def prefill_entries(
    keys: tuple[Hashable, ...] | None, n_entries: int
) -> tuple[BatchRows, Int[Tensor, "m"], Int[Tensor, "m"]] | None:
    """In the prefill: its rows, the entries that run one of ``keys`` (every entry when None) and
    the index in ``keys`` of each one's arm (0 when None), on the CPU; None in any other forward,
    or when no entry runs one of ``keys``."""
    rows = prefill_rows()
    if rows is None:
        return None
    if keys is None:
        return rows, torch.arange(n_entries), torch.zeros(n_entries, dtype=torch.long)
    idx = rows.arm_index(keys)
    if idx is None:
        return None
    ent = (idx >= 0).nonzero().flatten()
    return rows, ent, idx[ent]


def prompt_columns(prompt_mask: Bool[Tensor, "entries pos"], positions: Int[Tensor, "entries"]) -> Int[Tensor, "entries"]:
    """The column of each entry's prompt token ``positions[e]`` in a left-padded prefill batch
    (>= 0: from the first real token; < 0: from the end).

    Raises:
        ReachlensError: a position outside its entry's prompt.

    >>> prompt_columns(torch.tensor([[False, True, True], [True, True, True]]), torch.tensor([0, -1]))
    tensor([1, 2])
    """
    width = prompt_mask.shape[1]
    length = prompt_mask.sum(-1)
    cols = torch.where(positions < 0, width + positions, width - length + positions)
    bad = (positions >= length) | (positions < -length)
    if bool(bad.any()):
        e = int(bad.nonzero()[0, 0])
        raise ReachlensError(f"graft position {int(positions[e])} is outside a prompt of {int(length[e])} tokens; "
                             "use -1 (the last token) or a position inside every prompt")
    return cols


def _replacement(kind: str, tensor: Tensor, ent: Tensor, cols: Tensor, mask: Tensor, seeds: Tensor,
                 prev: Tensor | None) -> Float[Tensor, "m d"]:
    """What graft ``kind`` writes at ``tensor[ent, cols]`` (float32; the noise drawn in float64)."""
    h = tensor[ent, cols].float()
    d = h.shape[-1]
    if kind == "zero":
        return torch.zeros_like(h)
    if kind in ("noise", "direction"):
        z = counter_normals(seeds, torch.arange(d, device=seeds.device)[None]).to(h.device)
        norm = h.double().norm(dim=-1, keepdim=True)
        scale = norm / math.sqrt(d) if kind == "noise" else norm / z.norm(dim=-1, keepdim=True)
        return (z * scale).float()
    if kind == "permute":
        perm = counter_normals(seeds, torch.arange(d, 2 * d, device=seeds.device)[None]).argsort(-1).to(h.device)
        return h.gather(-1, perm)
    valid = mask[ent]
    if kind == "bos":
        return tensor[ent, valid.float().argmax(-1)].float()
    if kind == "mean":
        n = valid.sum(-1, keepdim=True)
        if bool((n < 2).any()):
            raise ReachlensError("a 'mean' graft needs a prompt of at least 2 tokens (the mean over its other positions)")
        total = torch.where(valid[..., None], tensor[ent].float(), 0.0).sum(1)  # left padding left out
        return (total - h) / (n - 1)
    assert kind == "prev_layer" and prev is not None
    return prev.float()


def _kind_codes(grafts: Sequence[Graft]) -> Tensor:
    return torch.tensor([GRAFT_KINDS.index(g.kind) for g in grafts], dtype=torch.long)


def _graft_hook(keys: tuple[Hashable, ...] | None, grafts: list[Graft], state: dict) -> HookFn:
    """The hook at one site: each entry of arm ``keys[i]`` (every entry when ``keys`` is None, with
    ``grafts[0]``) gets ``grafts[i]`` at its mapped column, in the prefill only."""
    kinds = _kind_codes(grafts)
    positions = torch.tensor([g.position for g in grafts], dtype=torch.long)
    seeds = torch.tensor([g.seed for g in grafts], dtype=torch.long)

    def apply(tensor: Float[Tensor, "batch pos d"], *, hook) -> Float[Tensor, "batch pos d"] | None:
        found = prefill_entries(keys, tensor.shape[0])
        if found is None:
            return None
        rows, ent, which = found
        mask = rows.prompt_mask.to(tensor.device)
        ent_d = ent.to(tensor.device)
        cols = prompt_columns(mask[ent_d], positions[which].to(tensor.device))
        out = tensor.clone()
        for code in kinds[which].unique().tolist():
            sub = (kinds[which] == code).nonzero().flatten()
            sub_d = sub.to(tensor.device)
            kind = GRAFT_KINDS[code]
            prev = None
            if kind == "prev_layer":
                if state.get("rows") is not rows:
                    raise RuntimeError(f"the prev_layer graft at {hook.name} found no capture from the layer below "
                                       "in this forward; attach every hook graft_arms returns")
                prev = state["prev"][ent_d[sub_d], cols[sub_d]]
            new = _replacement(kind, tensor, ent_d[sub_d], cols[sub_d], mask, seeds[which[sub]].to(tensor.device), prev)
            out[ent_d[sub_d], cols[sub_d]] = new.to(tensor.dtype)
        return out

    if keys is None:
        return row_agnostic(apply)
    return per_arm(keys)(apply)


def _capture_hook(state: dict) -> HookFn:
    """Records the prefill's activation one layer below, for the ``prev_layer`` grafts above it."""

    @row_agnostic
    def capture(tensor: Float[Tensor, "batch pos d"], *, hook) -> None:
        rows = prefill_rows()
        if rows is not None:
            state["rows"], state["prev"] = rows, tensor.detach()

    return capture


def _sites(model, graft: Graft) -> tuple[str, str | None]:
    """(the graft's hook name, the hook name ``prev_layer`` reads, or None), checked now."""
    name = hook_name(model, graft.layer, graft.site, write=True)
    shape = site_shape(model, name)
    if len(shape) != 1:
        raise ReachlensError(f"graft site {graft.site!r} ({name}) holds {shape} per position, not one vector; graft a "
                             "site such as 'resid_post', 'mlp_out' or 'attn_out'")
    if graft.kind != "prev_layer":
        return name, None
    if graft.layer > 0:
        return name, hook_name(model, graft.layer - 1, graft.site)
    if SITE_ALIASES.get(graft.site, graft.site) == "resid_post":
        return name, hook_name(model, 0, "resid_pre")
    raise ReachlensError(f"a prev_layer graft at layer 0 has no layer below at site {graft.site!r}; use layer >= 1, "
                         "or site 'resid_post' (whose layer below is the embedding)")


def _hooks(model, keyed: list[tuple[Hashable, Graft]]) -> list[FwdHook]:
    by_site: dict[str, list[tuple[Hashable, Graft]]] = {}
    prev_of: dict[str, str] = {}
    for key, g in keyed:
        name, prev = _sites(model, g)
        by_site.setdefault(name, []).append((key, g))
        if prev is not None:
            prev_of[name] = prev
    hooks: list[FwdHook] = []
    for name, members in by_site.items():
        state: dict = {}
        if name in prev_of:
            hooks.append((prev_of[name], _capture_hook(state)))
        keys = None if members[0][0] is None else tuple(k for k, _ in members)
        hooks.append((name, _graft_hook(keys, [g for _, g in members], state)))
    return hooks


def grafting(model, graft: Graft, *, arm: Hashable = None) -> list[FwdHook]:
    """``fwd_hooks`` that apply ``graft`` in the prefill of every row (``arm=None``) or of the rows
    of one arm (``Row.arm == arm``). Sites and layers are resolved now.

    >>> with model.hooks(fwd_hooks=grafting(model, Graft("zero", layer=3))):  # doctest: +SKIP
    ...     outs = generate(model, prompts, [Row(i) for i in range(len(prompts))], protocol)
    """
    return _hooks(model, [(arm, graft)])


def graft_arms(model, grafts: Sequence[Graft] | Mapping[Hashable, Graft]) -> list[FwdHook]:
    """``fwd_hooks`` for many grafts as arms, one hook per site: a sequence makes each graft its own
    arm key (``Row(..., arm=graft)``); a mapping names the arm of each graft.

    Raises:
        ReachlensError: no grafts, an arm key None, a site that is not one vector per position, a
            prev_layer graft with no layer below; UnknownNameError for a site or kind typo.

    >>> grafts = [Graft(k, layer=3, seed=intervention_seed(0, qid, j)) for j, k in enumerate(GRAFT_KINDS)]  # doctest: +SKIP
    >>> hooks = graft_arms(model, grafts)  # doctest: +SKIP
    """
    keyed = keyed_arms(grafts, Graft, caller="graft_arms", item="graft", arm="graft", itself="the Graft itself")
    return _hooks(model, keyed)
