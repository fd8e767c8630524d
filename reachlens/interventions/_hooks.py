"""Hook-name and layer resolution shared by every intervention kind.

An intervention that names a hook the model does not have must fail before anything runs: a
typo'd hook that silently runs unhooked would make an ablated audit equal to a clean one. Every
factory in this package resolves its names through :func:`resolve_hook_name` and its layer through
:func:`check_layer`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from reachlens._registry import Registry
from reachlens.errors import ReachlensError, UnknownNameError

__all__ = [
    "COMPONENT_HOOKS", "INTERVENTIONS", "HookFn", "FwdHook", "check_layer", "component_hook_names",
    "resolve_hook_name",
]

HookFn = Callable[..., Any]
"""A TransformerLens hook function ``fn(tensor, *, hook) -> tensor | None``."""
FwdHook = tuple[str, HookFn]
"""One entry of ``model.hooks(fwd_hooks=[...])``: a hook name and its function."""

INTERVENTIONS: Registry[Callable[..., list]] = Registry("intervention")
"""Intervention kinds by name (``zero``, ``steer``, ``units``): each a factory ``(model, ...) -> fwd_hooks``."""

COMPONENT_HOOKS: dict[str, tuple[str, ...]] = {
    "mlp": ("blocks.{layer}.hook_mlp_out",),
    "attn": ("blocks.{layer}.hook_attn_out",),
    "layer": ("blocks.{layer}.hook_attn_out", "blocks.{layer}.hook_mlp_out"),
}
"""The output hooks of a block's components. ``layer`` is attention and MLP output together (the
block then passes its input through unchanged); the residual stream itself is never zeroed."""


def n_layers_of(model) -> int:
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        raise ReachlensError(f"{type(model).__name__} has no 'blocks': load the model with reachlens.load_model")
    return len(blocks)


def check_layer(model, layer: int) -> int:
    """``layer`` as an int, or a ReachlensError naming the valid range.

    >>> check_layer(model, 9)  # doctest: +SKIP
    ReachlensError: layer 9 is out of range for a 6-layer model (valid: 0-5)
    """
    n = n_layers_of(model)
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise ReachlensError(f"layer {layer!r} is not an integer index")
    if not 0 <= layer < n:
        raise ReachlensError(f"layer {layer} is out of range for a {n}-layer model (valid: 0-{n - 1})")
    return layer


def resolve_hook_name(model, name: str) -> str:
    """``name`` if ``model`` has that hook point, else a LookupError naming the closest known names."""
    hook_dict = getattr(model, "hook_dict", None)
    if hook_dict is None:
        raise ReachlensError(f"{type(model).__name__} has no hook_dict: load the model with reachlens.load_model")
    if name not in hook_dict:
        close = difflib.get_close_matches(name, list(hook_dict), n=5, cutoff=0.6)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownNameError(f"model has no hook point {name!r}{hint}")
    return name


def component_hook_names(model, layer: int, component: str) -> tuple[str, ...]:
    """The resolved output hook names of ``component`` (``mlp``, ``attn`` or ``layer``) at ``layer``.

    >>> component_hook_names(model, 2, "layer")  # doctest: +SKIP
    ('blocks.2.hook_attn_out', 'blocks.2.hook_mlp_out')
    """
    if component not in COMPONENT_HOOKS:
        raise UnknownNameError(f"unknown component {component!r}; known: {', '.join(COMPONENT_HOOKS)}")
    check_layer(model, layer)
    return tuple(resolve_hook_name(model, t.format(layer=layer)) for t in COMPONENT_HOOKS[component])
