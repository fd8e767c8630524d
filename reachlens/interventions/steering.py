"""Directional steering: add ``alpha * v`` at one site of a block on every forward.

``v`` is a direction in the site's space (``d_model`` for the residual-stream sites), by default unit-norm (see
:func:`reachlens.studies.causal.mean_difference_direction`: mean activation at the site on the failure set
minus mean on the healthy panel, at the answer position). With ``v`` pointing from healthy towards
failing behaviour, ``-alpha v`` is the *rescue* intervention and ``+alpha v`` the *induction* one.

When: the vector is added at **every position** of every forward, the prompt's prefill and each
decoding step, so a generated token sees the same shift as the prompt did. (Adding only at
generated positions would leave the prompt's cached keys and values unsteered, a different and
weaker intervention.)

Where: any site of the block whose activation is one vector per position (:mod:`reachlens.engine.sites`):
``mlp_out`` (the default: the MLP's contribution), ``attn_out``, ``resid_post`` (the block's output,
i.e. its whole contribution shifted by ``alpha v``), ``resid_pre``, ``mlp_post`` (a vector over the
hidden units), ... A component of one site (``mlp``, ``attn``) names that site; ``layer`` is two
sites and is refused (steer ``resid_post`` to shift the whole block).

Arms: ``steering(..., arm=KEY)`` steers only the rows whose ``Row.arm`` is ``KEY``;
:func:`steering_grid` steers a grid of alphas at one site as one hook, one arm per alpha, so the
whole grid decodes in one batch (:mod:`reachlens.engine.hooks`, "Arms"). A row of an arm adds
exactly what the whole-batch hook of its alpha adds.

Numerics: ``alpha = 0`` adds an exact zero, so logits and generations are bit-for-bit unchanged.

>>> with model.hooks(fwd_hooks=steering(model, 3, v, -4.0, "resid_post")):  # doctest: +SKIP
...     outs = generate(model, prompts, rows, params)
>>> grid = {("steer", a): a for a in (-8.0, -4.0, 4.0, 8.0)}  # doctest: +SKIP
>>> rows = [Row(q, arm=key) for q in range(len(prompts)) for key in (None, *grid)]  # doctest: +SKIP
>>> with model.hooks(fwd_hooks=steering_grid(model, 3, v, grid, "resid_post")):  # doctest: +SKIP
...     outs = generate(model, prompts, rows, params)
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

import torch
from jaxtyping import Float
from torch import Tensor

from reachlens.engine.hooks import FwdHook, arm_index, per_arm, row_agnostic
from reachlens.engine.sites import hook_name, site_shape, sites_of
from reachlens.errors import ReachlensError

__all__ = ["add_vector_hook", "add_vector_arms_hook", "steering", "steering_grid", "steering_site"]


def _checked(vector: Tensor, alphas) -> Tensor:
    for alpha in alphas:
        if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not math.isfinite(alpha):
            raise ReachlensError(f"alpha={alpha!r} must be a finite number")
    if not bool(torch.isfinite(vector).all()):
        raise ReachlensError("the steering vector has non-finite entries")
    return vector.detach().clone()


def add_vector_arms_hook(vector: Float[Tensor, "d"], alphas: Mapping[Hashable, float]):
    """A hook function that adds ``alphas[arm] * vector`` at every position of the rows of each arm
    (``Row.arm``) in ``alphas``; other rows are returned unchanged. One hook for a whole grid."""
    keys = tuple(alphas)
    if not keys:
        raise ReachlensError("a steering grid needs at least one arm")
    shift = _checked(vector, alphas.values())
    scaled: dict[tuple, Tensor] = {}

    @per_arm(keys)
    def hook(tensor: Float[Tensor, "batch pos d"], *, hook) -> Float[Tensor, "batch pos d"] | None:
        idx = arm_index(keys, tensor.device)
        if idx is None:
            return None
        key = (tensor.device, tensor.dtype)
        if key not in scaled:  # row 0: no shift (rows of other arms); row i + 1: arm i's (as the whole-batch hook)
            rows = [torch.zeros_like(shift)] + [float(alphas[k]) * shift for k in keys]
            scaled[key] = torch.stack(rows).to(device=tensor.device, dtype=tensor.dtype)
        return tensor + scaled[key].index_select(0, idx + 1).unsqueeze(1)

    return hook


def add_vector_hook(vector: Float[Tensor, "d"], alpha: float):
    """A hook function that adds ``alpha * vector`` at every position of its activation."""
    shift = _checked(vector, [alpha])
    scaled: dict[tuple, Tensor] = {}

    @row_agnostic
    def hook(tensor: Float[Tensor, "batch pos d"], *, hook) -> Float[Tensor, "batch pos d"]:
        key = (tensor.device, tensor.dtype)
        if key not in scaled:
            scaled[key] = (alpha * shift).to(device=tensor.device, dtype=tensor.dtype)
        return tensor + scaled[key]

    return hook


def steering_site(model, layer: int, site: str = "mlp_out") -> tuple[str, int]:
    """The hook name a steering at ``site`` of block ``layer`` adds to, and the vector size it needs.

    Raises:
        ReachlensError: the site is unknown or missing (:func:`~reachlens.engine.sites.hook_name`),
            names more than one site, or is not one vector per position.

    >>> steering_site(model, 2, "resid_post")  # doctest: +SKIP
    ('blocks.2.hook_resid_post', 64)
    """
    sites = sites_of(site)
    if len(sites) != 1:
        raise ReachlensError(f"steering adds one vector at one site; {site!r} is {len(sites)} sites "
                             f"({', '.join(sites)}); to shift the block's whole output, steer site='resid_post'")
    name = hook_name(model, layer, sites[0], write=True)
    shape = site_shape(model, name)
    if len(shape) != 1:
        raise ReachlensError(f"site {site!r} ({name}) holds {shape} per position, not one vector; steer a site such "
                             "as 'mlp_out', 'attn_out' or 'resid_post'")
    return name, shape[0]


def _site_for(model, layer: int, vector: Tensor, site: str) -> str:
    name, width = steering_site(model, layer, site)
    if vector.ndim != 1 or vector.shape[0] != width:
        raise ReachlensError(f"steering vector has shape {tuple(vector.shape)}; the model needs ({width},) at {name}")
    return name


def steering(
    model, layer: int, vector: Float[Tensor, "d"], alpha: float, site: str = "mlp_out", *, arm: Hashable = None
) -> list[FwdHook]:
    """``fwd_hooks`` that add ``alpha * vector`` to the activation at ``site`` of block ``layer``;
    ``arm``: None on every row, a key only on the rows of that arm (``Row.arm``).

    Raises:
        ReachlensError: the site cannot be steered (:func:`steering_site`), the vector's size is not
            the site's width (``d_model`` for the residual-stream sites), or it is not finite.

    >>> steering(model, 2, v, 0.0)  # doctest: +SKIP
    [('blocks.2.hook_mlp_out', <function ...>)]
    """
    name = _site_for(model, layer, vector, site)
    if arm is not None:
        return [(name, add_vector_arms_hook(vector, {arm: float(alpha)}))]
    return [(name, add_vector_hook(vector, float(alpha)))]


def steering_grid(
    model, layer: int, vector: Float[Tensor, "d"], alphas: Mapping[Hashable, float], site: str = "mlp_out"
) -> list[FwdHook]:
    """``fwd_hooks`` that steer each arm of ``alphas`` (arm key -> alpha) by ``alpha * vector`` at
    ``site`` of block ``layer``, every position of every forward: one hook for the whole grid.

    Raises:
        ReachlensError: as :func:`steering`; or an arm key None (None is the plain model).

    >>> steering_grid(model, 2, v, {("steer", a): a for a in (-4.0, 4.0)}, "resid_post")  # doctest: +SKIP
    [('blocks.2.hook_resid_post', <function ...>)]
    """
    if None in alphas:
        raise ReachlensError("arm None is the plain model; name each steering arm with a key such as ('steer', alpha)")
    name = _site_for(model, layer, vector, site)
    return [(name, add_vector_arms_hook(vector, dict(alphas)))]
