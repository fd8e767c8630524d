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

Numerics: ``alpha = 0`` adds an exact zero, so logits and generations are bit-for-bit unchanged.

>>> with model.hooks(fwd_hooks=steering(model, 3, v, -4.0, "resid_post")):  # doctest: +SKIP
...     outs = generate(model, prompts, rows, params)
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor

from reachlens.engine.hooks import FwdHook, row_agnostic
from reachlens.engine.sites import hook_name, site_shape, sites_of
from reachlens.errors import ReachlensError

__all__ = ["add_vector_hook", "steering", "steering_site"]


def add_vector_hook(vector: Float[Tensor, "d"], alpha: float):
    """A hook function that adds ``alpha * vector`` at every position of its activation."""
    if not math.isfinite(alpha):
        raise ReachlensError(f"alpha={alpha!r} must be a finite number")
    if not bool(torch.isfinite(vector).all()):
        raise ReachlensError("the steering vector has non-finite entries")
    shift = vector.detach().clone()
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


def steering(
    model, layer: int, vector: Float[Tensor, "d"], alpha: float, site: str = "mlp_out"
) -> list[FwdHook]:
    """``fwd_hooks`` that add ``alpha * vector`` to the activation at ``site`` of block ``layer``.

    Raises:
        ReachlensError: the site cannot be steered (:func:`steering_site`), the vector's size is not
            the site's width (``d_model`` for the residual-stream sites), or it is not finite.

    >>> steering(model, 2, v, 0.0)  # doctest: +SKIP
    [('blocks.2.hook_mlp_out', <function ...>)]
    """
    name, width = steering_site(model, layer, site)
    if vector.ndim != 1 or vector.shape[0] != width:
        raise ReachlensError(f"steering vector has shape {tuple(vector.shape)}; the model needs ({width},) at {name}")
    return [(name, add_vector_hook(vector, float(alpha)))]
