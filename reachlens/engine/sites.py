"""Hook sites: TransformerLens' names for the activations of a block, resolved against a model.

Every intervention in reachlens (zero-ablation, steering, unit masks) and every CLI ``--site``
names where it acts with TransformerLens' own short names, the vocabulary of
``transformer_lens.utils.get_act_name``; :func:`hook_name` turns ``(layer, site)`` into the hook
name of the model, checking it before anything runs.

* ``resid_pre`` (``blocks.L.hook_resid_pre``): the residual stream entering the block;
* ``attn_out`` (``blocks.L.hook_attn_out``): what attention adds to the residual stream;
* ``resid_mid`` (``blocks.L.hook_resid_mid``): between attention and MLP, read only (see below;
  none on GPT-NeoX/Pythia, whose attention and MLP run in parallel);
* ``mlp_out`` (``blocks.L.hook_mlp_out``): what the MLP adds to the residual stream;
* ``resid_post`` (``blocks.L.hook_resid_post``): the residual stream leaving the block (its output);
* ``mlp_pre`` (``blocks.L.mlp.hook_pre``): the MLP's pre-activation (the gate projection of a gated MLP);
* ``pre_linear`` (``blocks.L.mlp.hook_pre_linear``): the up projection of a gated MLP;
* ``mlp_post`` (``blocks.L.mlp.hook_post``): the MLP's hidden units, the input of ``W_out``;
* ``q``, ``k``, ``v``, ``z`` (``blocks.L.attn.hook_q`` ...): per head; ``z`` is the attention output
  before ``W_O``;
* ``rot_q``, ``rot_k`` (``blocks.L.attn.hook_rot_q`` ...): q and k after rotary (never called by
  TransformerLens' joint-qkv attention of Phi-3 and GPT-NeoX);
* ``attn_scores``, ``pattern`` (``blocks.L.attn.hook_attn_scores`` ...): pre-softmax scores and
  attention probabilities.

``get_act_name``'s aliases work too (``pre``, ``post``, ``query``, ``key``,
``value``, ``attn_logits``), except ``attn``, which it reads as ``pattern`` while a reachlens
component ``attn`` is the attention output: as a site it is refused with both meanings named. Any
hook path inside the block is a site as well: ``mlp.hook_out`` (the MLP's own output, linear in
``mlp_post``), ``ln2.hook_normalized``, ...

Post-norm families: on Gemma 2/3 and OLMo 2 ``attn_out`` and ``mlp_out`` are *after* the block's
post-attention / post-MLP norm (what is added to the residual stream, as in TransformerLens), so
zeroing ``mlp_out`` removes the MLP's whole contribution there as everywhere. The MLP's output
before that norm is ``mlp.hook_out``; elsewhere ``mlp_out`` and ``mlp.hook_out`` are one hook.

**Components** name a part of a block by what it writes into the residual stream (:data:`COMPONENTS`):
``mlp`` is ``mlp_out``, ``attn`` is ``attn_out``, and ``layer`` is both, the block's whole
contribution (zeroing it passes the block's input through unchanged). Wherever reachlens takes a
component (``silence_sweep``, ``zero_ablation``, pruning) it means exactly these sites. Steering
adds one vector at one site, so ``layer`` (two sites) cannot be steered; the block's output, where
adding ``alpha * v`` shifts its whole contribution, is ``resid_post``.

``resid_mid`` is read-only here: in TransformerLens 4's bridge the hook is the MLP's input (the
input of its norm, ``ln2.hook_in``; OLMo 2: ``mlp.hook_in``), not the residual stream itself, so an
edit there changes what the MLP reads but not the stream the block passes on (in
``HookedTransformer`` it changed both). Reading it is exact. An intervention (``write=True``)
refuses it and names the alternatives.

Checks: :func:`hook_name` refuses an unknown site (naming the close ones and every known site), a
layer out of range, a hook point the model lacks (``resid_mid`` on GPT-NeoX), one TransformerLens
gates off until a ``set_use_*`` call, and one that exists but never fires in the model's forward
(``rot_q`` on GPT-NeoX). It learns the last from one forward of a single token the first time it
is asked about a model (cached on the model; hooks already attached fire on that forward too).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import torch

from reachlens.errors import ReachlensError, UnknownNameError

__all__ = ["COMPONENTS", "READ_ONLY", "SITES", "SITE_ALIASES", "check_layer", "hook_name", "site_shape", "sites_of"]

SITES: dict[str, str] = {
    "resid_pre": "hook_resid_pre",
    "attn_out": "hook_attn_out",
    "resid_mid": "hook_resid_mid",
    "mlp_out": "hook_mlp_out",
    "resid_post": "hook_resid_post",
    "mlp_pre": "mlp.hook_pre",
    "pre_linear": "mlp.hook_pre_linear",
    "mlp_post": "mlp.hook_post",
    "q": "attn.hook_q",
    "k": "attn.hook_k",
    "v": "attn.hook_v",
    "z": "attn.hook_z",
    "rot_q": "attn.hook_rot_q",
    "rot_k": "attn.hook_rot_k",
    "attn_scores": "attn.hook_attn_scores",
    "pattern": "attn.hook_pattern",
}
"""Site -> hook path inside block L (``blocks.L.`` + path), in TransformerLens' names."""

SITE_ALIASES: dict[str, str] = {
    "pre": "mlp_pre", "post": "mlp_post", "query": "q", "key": "k", "value": "v",
    "attn_logits": "attn_scores",
}
"""``get_act_name``'s other spellings of a site."""

COMPONENTS: dict[str, tuple[str, ...]] = {
    "mlp": ("mlp_out",),
    "attn": ("attn_out",),
    "layer": ("attn_out", "mlp_out"),
}
"""Component -> the sites where that part of a block writes into the residual stream."""


def _n_layers(model) -> int:
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        raise ReachlensError(f"{type(model).__name__} has no 'blocks': load the model with reachlens.load_model")
    return len(blocks)


def check_layer(model, layer: int) -> int:
    """``layer`` as an int, or a ReachlensError naming the valid range.

    >>> check_layer(model, 9)  # doctest: +SKIP
    ReachlensError: layer 9 is out of range for a 6-layer model (valid: 0-5)
    """
    n = _n_layers(model)
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise ReachlensError(f"layer {layer!r} is not an integer index")
    if not 0 <= layer < n:
        raise ReachlensError(f"layer {layer} is out of range for a {n}-layer model (valid: 0-{n - 1})")
    return layer


def _known() -> str:
    return ", ".join(SITES) + "; or a hook path inside the block such as 'mlp.hook_out'"


def _path(site: str) -> str:
    """The hook path inside a block that ``site`` names (no model needed)."""
    if not isinstance(site, str) or not site:
        raise ReachlensError(f"site {site!r} is not a site name; known sites: {_known()}")
    if site == "attn":
        raise UnknownNameError("site 'attn' is ambiguous: TransformerLens' get_act_name reads it as 'pattern' "
                               "(attention probabilities), a reachlens component 'attn' is 'attn_out' (the attention "
                               "output); name the site 'attn_out' or 'pattern'")
    site = SITE_ALIASES.get(site, site)
    if site in SITES:
        return SITES[site]
    if "hook_" in site and not site.startswith("blocks."):
        return site
    close = difflib.get_close_matches(site, [*SITES, *COMPONENTS], n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise UnknownNameError(f"unknown site {site!r}{hint} (known sites: {_known()}; components: {', '.join(COMPONENTS)})")


def sites_of(target: str | Sequence[str]) -> tuple[str, ...]:
    """The sites ``target`` names: a component (``layer`` -> ``attn_out, mlp_out``), a site, sites
    joined by ``+`` (``attn_out+mlp_out``), or a sequence of any of these. Names are checked, not
    resolved against a model (:func:`hook_name` does that).

    >>> sites_of("layer"), sites_of("mlp_post"), sites_of("resid_mid+mlp_out")
    (('attn_out', 'mlp_out'), ('mlp_post',), ('resid_mid', 'mlp_out'))
    """
    if isinstance(target, str):
        parts = [p.strip() for p in target.split("+")] if "+" in target else [target]
        out: list[str] = []
        for p in parts:
            if p in COMPONENTS:
                out.extend(COMPONENTS[p])
            else:
                _path(p)
                out.append(p)
        return tuple(out)
    if not isinstance(target, Sequence) or not target:
        raise ReachlensError(f"{target!r} names no site; give a site, a component or several sites")
    return tuple(s for t in target for s in sites_of(t))


def _probe(model) -> dict[str, tuple[int, ...]]:
    """Hook name -> activation shape (batch and position left out), for every hook point of every
    block that fires in one engine forward of a single token (cached on the model)."""
    found = model.__dict__.get("_reachlens_site_shapes")
    if found is not None:
        return found
    from reachlens.engine.stack import LayerStack

    shapes: dict[str, tuple[int, ...]] = {}
    hooks = []
    for name, point in model.hook_dict.items():
        if not name.startswith("blocks."):
            continue
        try:
            model.check_hooks_to_add(point, name, None)
        except ValueError:  # gated off until set_use_*(True): cannot fire now
            continue

        def record(x, *, hook, _name=name):
            if isinstance(x, torch.Tensor):
                shapes[_name] = tuple(x.shape[2:]) if x.ndim >= 3 else tuple(x.shape[1:])

        hooks.append((name, record))
    stack = LayerStack(model)
    with torch.inference_mode(), model.hooks(fwd_hooks=hooks):
        stack.forward(torch.zeros((1, 1), dtype=torch.long, device=stack.device))
    object.__setattr__(model, "_reachlens_site_shapes", shapes)
    return shapes


READ_ONLY: dict[str, str] = {
    "resid_mid": "in TransformerLens 4's bridge this hook is the MLP's input ({hook}), so an edit there changes "
                 "what the MLP reads but not the residual stream the block passes on; edit 'attn_out' to change "
                 "the stream, or name the MLP's input as the hook path {path!r}",
}
"""Sites whose edits do not mean what TransformerLens' names say (why, for the error message)."""


def hook_name(model, layer: int, site: str, *, write: bool = False) -> str:
    """The hook name of ``site`` in block ``layer`` of ``model``, checked against the model.

    ``write=True`` (what an intervention passes) also refuses a read-only site (:data:`READ_ONLY`).

    Raises:
        ReachlensError: the layer is out of range, the site is unknown (an UnknownNameError, naming
            the close ones and the known sites), the model has no such hook point (naming the sites
            it has), TransformerLens gates it off, or it never fires in this model's forward.

    >>> hook_name(model, 3, "mlp_out")  # doctest: +SKIP
    'blocks.3.hook_mlp_out'
    >>> hook_name(model, 3, "mpl_out")  # doctest: +SKIP
    UnknownNameError: unknown site 'mpl_out'; did you mean 'mlp_out'? (known sites: resid_pre, ...)
    """
    path = _path(site)
    check_layer(model, layer)
    hook_dict = getattr(model, "hook_dict", None)
    if hook_dict is None:
        raise ReachlensError(f"{type(model).__name__} has no hook_dict: load the model with reachlens.load_model")
    name = f"blocks.{layer}.{path}"
    kind = getattr(getattr(getattr(model, "original_model", None), "config", None), "model_type", type(model).__name__)
    if name not in hook_dict:
        close = difflib.get_close_matches(name, list(hook_dict), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        has = [s for s, p in SITES.items() if f"blocks.{layer}.{p}" in hook_dict]
        raise UnknownNameError(f"the {kind} model has no hook point {name!r}{hint} (site {site!r}; the sites it "
                               f"has: {', '.join(has)})")
    try:
        model.check_hooks_to_add(hook_dict[name], name, None)
    except ValueError as e:
        raise ReachlensError(f"site {site!r}: {e}") from None
    shapes = _probe(model)
    if name not in shapes:
        model.__dict__.pop("_reachlens_site_shapes", None)  # perhaps gated when probed, enabled since
        shapes = _probe(model)
    if name not in shapes:
        raise ReachlensError(f"site {site!r} ({name}) exists on the {kind} model but never fires in its forward "
                             "(TransformerLens' implementation of this block does not call it); pick another site")
    canonical = SITE_ALIASES.get(site, site)
    if write and canonical in READ_ONLY:
        hook = hook_dict[name].name or name
        why = READ_ONLY[canonical].format(hook=hook, path=hook.removeprefix(f"blocks.{layer}."))
        raise ReachlensError(f"site {site!r} can be read but not edited: {why}")
    return name


def site_shape(model, name: str) -> tuple[int, ...]:
    """The shape of the activation at hook ``name`` without its batch and position dimensions
    (``(d_model,)`` for ``mlp_out``, ``(n_heads, d_head)`` for ``z``), as seen in a forward."""
    shapes = _probe(model)
    if name not in shapes:
        raise UnknownNameError(f"{name!r} is not a hook point that fires in this model's forward")
    return shapes[name]
