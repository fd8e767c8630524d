"""Directional steering: add ``alpha * v`` to one block's output on every forward.

``v`` is a direction in the residual space (``d_model``), by default unit-norm (see
:func:`reachlens.studies.causal.mean_difference_direction`: mean block output on the failure set
minus mean on the healthy panel, at the answer position). With ``v`` pointing from healthy towards
failing behaviour, ``-alpha v`` is the *rescue* intervention and ``+alpha v`` the *induction* one.

Where: the vector is added at **every position** of every forward, the prompt's prefill and each
decoding step, so a generated token sees the same shift as the prompt did. (Adding only at
generated positions would leave the prompt's cached keys and values unsteered, a different and
weaker intervention.)

Targets: ``mlp`` adds to ``blocks.L.hook_mlp_out`` (the MLP's contribution), ``attn`` to
``blocks.L.hook_attn_out``, ``layer`` to ``blocks.L.hook_out`` (the residual after the block, i.e.
the block's total contribution shifted by ``alpha v``).

Numerics: ``alpha = 0`` adds an exact zero, so logits and generations are bit-for-bit unchanged.

>>> with model.hooks(fwd_hooks=steering(model, 3, v, -4.0)):  # doctest: +SKIP
...     outs = generate(model, prompts, rows, params)
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor

from reachlens.engine.hooks import row_agnostic
from reachlens.errors import ReachlensError, UnknownNameError
from reachlens.interventions._hooks import INTERVENTIONS, FwdHook, check_layer, resolve_hook_name

__all__ = ["STEER_HOOKS", "add_vector_hook", "steering", "steer_hook_name"]

STEER_HOOKS = {
    "mlp": "blocks.{layer}.hook_mlp_out",
    "attn": "blocks.{layer}.hook_attn_out",
    "layer": "blocks.{layer}.hook_out",
}
"""Where each steering target adds its vector."""


def steer_hook_name(model, layer: int, component: str = "mlp") -> str:
    """The resolved hook name a steering of ``component`` at ``layer`` writes to."""
    if component not in STEER_HOOKS:
        raise UnknownNameError(f"unknown steering target {component!r}; known: {', '.join(STEER_HOOKS)}")
    check_layer(model, layer)
    return resolve_hook_name(model, STEER_HOOKS[component].format(layer=layer))


def add_vector_hook(vector: Float[Tensor, "d_model"], alpha: float):
    """A hook function that adds ``alpha * vector`` at every position of its activation."""
    if not math.isfinite(alpha):
        raise ReachlensError(f"alpha={alpha!r} must be a finite number")
    if not bool(torch.isfinite(vector).all()):
        raise ReachlensError("the steering vector has non-finite entries")
    shift = vector.detach().clone()
    scaled: dict[tuple, Tensor] = {}

    @row_agnostic
    def hook(tensor: Float[Tensor, "batch pos d_model"], *, hook) -> Float[Tensor, "batch pos d_model"]:
        key = (tensor.device, tensor.dtype)
        if key not in scaled:
            scaled[key] = (alpha * shift).to(device=tensor.device, dtype=tensor.dtype)
        return tensor + scaled[key]

    return hook


@INTERVENTIONS.decorator("steer")
def steering(
    model, layer: int, vector: Float[Tensor, "d_model"], alpha: float, component: str = "mlp"
) -> list[FwdHook]:
    """``fwd_hooks`` that add ``alpha * vector`` to ``component``'s output at block ``layer``.

    Raises:
        ReachlensError: the vector's size is not the model's ``d_model``, or it is not finite.

    >>> steering(model, 2, v, 0.0)  # doctest: +SKIP
    [('blocks.2.hook_mlp_out', <function ...>)]
    """
    name = steer_hook_name(model, layer, component)
    d_model = int(model.cfg.d_model)
    if vector.ndim != 1 or vector.shape[0] != d_model:
        raise ReachlensError(f"steering vector has shape {tuple(vector.shape)}; the model needs ({d_model},)")
    return [(name, add_vector_hook(vector, float(alpha)))]
