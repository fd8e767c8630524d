"""Norms without the statistics nobody reads: the bridge's normalisation, minus unhooked hook work.

TransformerLens' ``NormalizationBridge`` (every ``ln1``, ``ln2``, ``ln_final``, Gemma's and OLMo 2's
post-norms) computes the norm's scale and normalised input in float32 *only* to fire
``hook_scale`` and ``hook_normalized``, then returns the wrapped HuggingFace norm's own output when
no hook edited them. When neither hook point carries a hook, that side computation changes
nothing, so :func:`fused_norms` skips it for the duration of a reachlens forward: ``hook_in``, the
HuggingFace norm, ``hook_out``. The result is bit-identical to the bridge's (it *is* the bridge's
return value in that case). Each call checks the two hook points and falls back to the bridge's own
forward if either carries a hook, or in training mode, or for a bridge that does not run the
HuggingFace norm itself (``use_native_layernorm_autograd`` off).
"""

from __future__ import annotations

import contextlib

import torch

from reachlens.engine.fast_attention import fire, found_once, points_hooked, swap_forward

__all__ = ["fused_norms", "fusable_norms"]


def _fused_forward(self, hidden_states, **kwargs):
    statistics, hook_in, norm, hook_out = self._reachlens_norm
    if self.training or kwargs or points_hooked(statistics) or norm is not self.original_component:
        return self._reachlens_bridge_forward(hidden_states, **kwargs)
    x = fire(hook_in, hidden_states)
    out = norm(x)
    if out.dtype != x.dtype:
        out = out.to(x.dtype)
    return fire(hook_out, out)


def fusable_norms(model) -> list:
    """The normalisation bridges of ``model`` that run the HuggingFace norm themselves (found once)."""
    from transformer_lens.model_bridge.generalized_components.normalization import NormalizationBridge

    def find() -> list:
        found = [
            m for m in model.modules()
            if isinstance(m, NormalizationBridge) and getattr(m, "use_native_layernorm_autograd", False)
            and m.original_component is not None and not isinstance(m.original_component, torch.nn.Identity)
        ]
        for m in found:  # the parts the fused forward calls, looked up once (a bridge's submodule lookups are not free)
            object.__setattr__(m, "_reachlens_norm", ((m.hook_scale, m.hook_normalized), m.hook_in,
                                                      m.original_component, m.hook_out))
        return found

    return found_once(model, "_reachlens_fusable_norms", find)


def fused_norms(model) -> contextlib.AbstractContextManager[int]:
    """Within the block, eligible norm bridges of ``model`` skip unhooked hook statistics; yields how many."""
    return swap_forward(fusable_norms(model), _fused_forward)
