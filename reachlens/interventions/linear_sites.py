"""The linear maps of a model, each with the hook points around it and the checkpoint tensor it computes with.

An intervention on a *weight* (:mod:`reachlens.interventions.weight_noise`) acts through hooks, never by
editing a parameter: for a linear map ``y = x W^T`` (a HuggingFace ``nn.Linear``; GPT-2's ``Conv1D`` stores
``W`` transposed and computes ``x W``), adding ``x dW^T`` to its output is running the map with ``W + dW``. In
TransformerLens 4's bridge every linear map of a block is a ``LinearBridge`` with two hook points, ``hook_in``
(its input ``x``) and ``hook_out`` (its output ``y``), named by the block's component:

* ``attn.q``, ``attn.k``, ``attn.v``, ``attn.o`` (``blocks.L.attn.q.hook_in`` ...): the attention
  projections; ``hook_out`` of q/k/v and ``hook_in`` of o hold one vector per head (flattened here);
* ``mlp.gate`` (gated MLPs only), ``mlp.in``, ``mlp.out``: the MLP's projections;
* ``unembed`` (``unembed.hook_in`` / ``unembed.hook_out``): the LM head, where it is its own tensor.

:func:`linear_sites` resolves these for a model and names the tensor of the *checkpoint* each uses (the name
in the checkpoint's own ``state_dict``, ``model.layers.3.self_attn.q_proj.weight``). Where the checkpoint
keeps one joint tensor (GPT-2's ``c_attn``, GPT-NeoX's interleaved ``query_key_value``, Phi-3's ``qkv_proj``
and ``gate_up_proj``), the bridge runs q, k and v (gate and up) as separate maps holding copies of that
tensor's rows; each site then records which rows of the joint tensor it holds, found by matching the rows
(weight and bias) exactly. Rows that two output units share bit for bit (a pruned, zeroed unit) cannot be
told apart, and such a model is refused rather than guessed.

Both hook points of every site are checked to fire in the model's forward on the generic and the fused
path (:func:`~reachlens.engine.sites.hook_name`), and a block whose forward runs a linear map not named
here is refused: an intervention on "every linear map" never skips one silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from reachlens.engine.sites import hook_name, site_shape
from reachlens.errors import ReachlensError, UnknownNameError

__all__ = [
    "BLOCK_MAPS", "TARGET_GROUPS", "LinearSite", "checkpoint_names", "checkpoint_tensor", "linear_sites",
    "resolve_targets",
]

BLOCK_MAPS = ("attn.q", "attn.k", "attn.v", "attn.o", "mlp.gate", "mlp.in", "mlp.out")
"""Every linear map of a block, by its component path (GPT-2 and GPT-NeoX have no ``mlp.gate``)."""
TARGET_GROUPS: dict[str, tuple[str, ...]] = {
    "attn": BLOCK_MAPS[:4],
    "mlp": BLOCK_MAPS[4:],
    **{m.split(".")[1]: (m,) for m in BLOCK_MAPS},
    "unembed": ("unembed",),
}
"""Target name -> the maps it names: ``attn`` (q, k, v, o), ``mlp`` (gate, in, out), each map alone by its
last part (``q``, ..., ``gate``, ``in``, ``out``), ``unembed`` (the LM head)."""


@dataclass(frozen=True)
class LinearSite:
    """One linear map of the model: where its input and output are hooked, and the checkpoint tensor it uses."""

    map: str
    """The component path: ``attn.q``, ..., ``mlp.out``, or ``unembed``."""
    layer: int | None
    """Its block (None: the LM head)."""
    hook_in: str
    """The hook point of its input ``x`` (``blocks.3.attn.q.hook_in``)."""
    hook_out: str
    """The hook point of its output ``y``."""
    param: str
    """The checkpoint tensor's name in the checkpoint's own state_dict (``model.layers.3.self_attn.q_proj.weight``)."""
    transposed: bool
    """True where the checkpoint stores the tensor as ``[in, out]`` (GPT-2's ``Conv1D``: ``y = x W``)."""
    in_features: int
    out_features: int
    """The map's width on each side (``out_features`` counts this map's rows only, for a split joint tensor)."""
    rows: Tensor | None = field(default=None, compare=False, repr=False)
    """For a map holding some rows of a joint tensor, which ones (output units, in ``[out, in]`` layout), in
    the order of the map's outputs; None: all of them, in order."""


def _strip(name: str) -> str:
    return name.replace("._original_component", "").replace("_original_component.", "")


def checkpoint_names(model) -> frozenset[str]:
    """The tensor names of the checkpoint's own state_dict (the HuggingFace class, built on the meta device)."""
    found = model.__dict__.get("_reachlens_checkpoint_names")
    if found is None:
        hf = model.original_model
        with torch.device("meta"):
            found = frozenset(type(hf)(hf.config).state_dict())
        object.__setattr__(model, "_reachlens_checkpoint_names", found)
    return found


def _checkpoint_params(model) -> dict[int, tuple[str, nn.Module, Tensor]]:
    """id(parameter) -> (checkpoint name, the module owning it, the parameter), for the checkpoint's tensors."""
    names = checkpoint_names(model)
    hf = model.original_model
    out: dict[int, tuple[str, nn.Module, Tensor]] = {}
    for mangled, p in hf.named_parameters(remove_duplicate=False):
        clean = _strip(mangled)
        if clean in names and id(p) not in out:
            owner = hf.get_submodule(mangled.rpartition(".")[0]) if "." in mangled else hf
            out[id(p)] = (clean, owner, p)
    return out


def _parts(targets: str | Sequence[str]) -> list[str]:
    parts = [p.strip() for p in targets.split("+")] if isinstance(targets, str) else list(targets)
    if not parts:
        raise ReachlensError("targets names no linear map; give e.g. 'attn+mlp'")
    for p in parts:
        if p not in TARGET_GROUPS:
            raise UnknownNameError(f"unknown weight target {p!r}; known: {', '.join(TARGET_GROUPS)}")
    return parts


def checkpoint_tensor(model, name: str) -> Tensor:
    """The live parameter the model holds for checkpoint tensor ``name`` (read it; never write it).

    Raises:
        UnknownNameError: ``name`` is not a tensor of the checkpoint's state_dict.
    """
    for param_name, _, p in _checkpoint_params(model).values():
        if param_name == name:
            return p
    raise UnknownNameError(f"{name!r} is not a tensor of this checkpoint (e.g. {sorted(checkpoint_names(model))[:3]})")


def resolve_targets(targets: str | Sequence[str]) -> tuple[str, ...]:
    """The maps ``targets`` names (a target or several, joined by ``+`` or as a sequence), in
    :data:`BLOCK_MAPS` order then ``unembed``.

    >>> resolve_targets("attn+out")
    ('attn.q', 'attn.k', 'attn.v', 'attn.o', 'mlp.out')
    """
    chosen = {m for p in _parts(targets) for m in TARGET_GROUPS[p]}
    return tuple(m for m in (*BLOCK_MAPS, "unembed") if m in chosen)


def _linear_bridges(model) -> dict[str, tuple[str, nn.Module]]:
    """hook_in name -> its LinearBridge (or the unembedding bridge), with the module path of each."""
    from transformer_lens.model_bridge.generalized_components.linear import LinearBridge

    out = {}
    for path, mod in model.named_modules():
        if isinstance(mod, LinearBridge) and mod.hook_in.name:
            out[mod.hook_in.name] = (path, mod)
    return out


def _row_keys(w: Tensor, b: Tensor | None) -> list[bytes]:
    """Each row of ``w`` (with its bias entry) as bytes: equal rows, equal keys."""
    raw = w.detach().contiguous().view(torch.uint8).cpu().numpy()
    braw = None if b is None else b.detach().contiguous().view(torch.uint8).cpu().numpy().reshape(w.shape[0], -1)
    return [raw[i].tobytes() + (b"" if braw is None else braw[i].tobytes()) for i in range(w.shape[0])]


def _rows_in(part: nn.Module, joint: Tensor, joint_bias: Tensor | None, transposed: bool, name: str) -> Tensor | None:
    """Which rows of the joint tensor (``[out, in]`` layout) the split map ``part`` holds; None if not all found."""
    lin = joint.T if transposed else joint
    if lin.shape[1] != part.weight.shape[1] or lin.dtype != part.weight.dtype:
        return None
    with_bias = joint_bias is not None and getattr(part, "bias", None) is not None
    where: dict[bytes, list[int]] = {}
    for j, key in enumerate(_row_keys(lin, joint_bias if with_bias else None)):
        where.setdefault(key, []).append(j)
    rows = []
    for key in _row_keys(part.weight, part.bias if with_bias else None):
        hits = where.get(key)
        if not hits:
            return None
        if len(hits) > 1:
            raise ReachlensError(f"rows {hits} of {name} are identical, so the bridge's split of it cannot be mapped "
                                 "back to the checkpoint's rows; weight interventions cannot run on this checkpoint")
        rows.append(hits[0])
    return torch.tensor(rows, dtype=torch.long)


def _is_conv1d(module: nn.Module) -> bool:
    """Whether ``module`` is HuggingFace's ``Conv1D`` (GPT-2's linear map, its weight stored ``[in, out]``)."""
    from transformers.pytorch_utils import Conv1D

    return isinstance(module, Conv1D)


def _place(model, path: str, bridge: nn.Module, params: dict) -> tuple[str, bool, Tensor | None]:
    """(checkpoint name, transposed, rows) of the tensor the linear bridge at ``path`` computes with."""
    inner = bridge.original_component
    hit = params.get(id(inner.weight))
    if hit is not None:
        return hit[0], _is_conv1d(hit[1]), None
    parent = model.get_submodule(path.rpartition(".")[0]).original_component  # the attention / MLP it was split from
    for p in parent.parameters():
        found = params.get(id(p))
        if found is None or p.ndim != 2:
            continue
        name, owner, _ = found
        rows = _rows_in(inner, p, getattr(owner, "bias", None), _is_conv1d(owner), name)
        if rows is not None:
            return name, _is_conv1d(owner), rows
    raise ReachlensError(f"{bridge.hook_in.name}: its weight is neither a checkpoint tensor nor rows of one; "
                         "weight interventions cannot run on this architecture")


def _fires(model, name: str) -> bool:
    try:
        site_shape(model, name)
    except UnknownNameError:
        return False
    return True


def _checked_blocks(model, bridges: dict) -> None:
    """Refuse a block whose forward runs a linear map outside :data:`BLOCK_MAPS`."""
    def known(name: str) -> bool:
        parts = name.split(".", 2)  # blocks, L, the path inside the block
        return len(parts) == 3 and parts[2].removesuffix(".hook_in") in BLOCK_MAPS

    extra = sorted(n for n in bridges if n.startswith("blocks.") and not known(n) and _fires(model, n))
    if extra:
        raise ReachlensError(f"the model's blocks run linear maps reachlens does not know ({', '.join(extra[:4])}); "
                             f"weight interventions name only {', '.join(BLOCK_MAPS)}")


def _site(model, layer: int | None, name: str, bridges: dict, params: dict) -> LinearSite:
    if layer is None:
        hin, hout = "unembed.hook_in", "unembed.hook_out"
    else:
        hin = hook_name(model, layer, f"{name}.hook_in", write=True)
        hout = hook_name(model, layer, f"{name}.hook_out", write=True)
    path, bridge = bridges[hin]
    param, transposed, rows = _place(model, path, bridge, params)
    inner = bridge.original_component  # a split part is an nn.Linear even where the checkpoint's tensor is a Conv1D's
    n_out, n_in = inner.weight.shape[::-1] if _is_conv1d(inner) else inner.weight.shape
    return LinearSite(name, layer, hin, hout, param, transposed, int(n_in), int(n_out), rows)


def _unembed(model, bridges: dict, params: dict) -> LinearSite:
    hf = model.original_model
    head, embed = hf.get_output_embeddings(), hf.get_input_embeddings()
    if "unembed.hook_in" not in bridges:
        bridges["unembed.hook_in"] = ("unembed", model.unembed)
    if head is not None and embed is not None and head.weight.data_ptr() == embed.weight.data_ptr():
        raise ReachlensError("the LM head of this model is its input embedding (tied weights), so noising it would "
                             "noise the embedding too; leave 'unembed' out of the targets")
    return _site(model, None, "unembed", bridges, params)


def linear_sites(model, targets: str | Sequence[str] = "attn+mlp") -> tuple[LinearSite, ...]:
    """Every linear map ``targets`` names (:func:`resolve_targets`), block by block, then the LM head.

    A group skips the maps a family lacks (``mlp`` on GPT-2 is ``in`` and ``out``).

    Raises:
        ReachlensError: a map named alone that the model lacks in every block (``gate`` on GPT-2), a hook that does not fire,
            a block running a linear map not named in :data:`BLOCK_MAPS`, a tied LM head asked for, or a split
            tensor whose rows cannot be mapped back.

    >>> [s.param for s in linear_sites(model, "q")][:1]  # doctest: +SKIP
    ['model.layers.0.self_attn.q_proj.weight']
    """
    maps = resolve_targets(targets)
    named = {TARGET_GROUPS[p][0] for p in _parts(targets) if len(TARGET_GROUPS[p]) == 1}  # asked for by name
    cache = model.__dict__.setdefault("_reachlens_linear_sites", {})
    if maps in cache:
        return cache[maps]
    bridges, params = _linear_bridges(model), _checkpoint_params(model)
    _checked_blocks(model, bridges)
    sites: list[LinearSite] = []
    for name in (m for m in maps if m != "unembed"):
        layers = [i for i in range(len(model.blocks)) if f"blocks.{i}.{name}.hook_in" in bridges]
        if not layers and name in named:
            kind = model.original_model.config.model_type
            raise ReachlensError(f"the {kind} model has no linear map {name!r} in its blocks; leave it out of the "
                                 "targets")
        sites.extend(_site(model, i, name, bridges, params) for i in layers)
    sites.sort(key=lambda s: (s.layer, BLOCK_MAPS.index(s.map)))
    if "unembed" in maps:
        sites.append(_unembed(model, bridges, params))
    cache[maps] = tuple(sites)
    return cache[maps]
