"""Interventions: hook factories that change how the engine runs, never the study code.

Each factory returns ``fwd_hooks`` for ``with model.hooks(fwd_hooks=...)``, at TransformerLens'
sites (``mlp_out``, ``attn_out``, ``resid_post``, ``mlp_post``, ...: :mod:`reachlens.engine.sites`);
:func:`hook_name` resolves ``(layer, site)`` against the model when the hooks are built, so a typo
fails before anything runs. Every hook is live on every forward of a generation (prompt prefill
and each decoding step), and every hook function here is marked
:func:`~reachlens.engine.hooks.row_agnostic`, so the sampler keeps sharing prefixes under it.

* :mod:`~reachlens.interventions.ablation`: zero a site, a component (``mlp``, ``attn``, ``layer``) or several sites;
* :mod:`~reachlens.interventions.steering`: add ``alpha * v`` at a site;
* :mod:`~reachlens.interventions.units`: zero chosen MLP hidden units, rank units along a direction.

Pruning, which writes a new checkpoint rather than hooking a model, is
:mod:`reachlens.models.pruning`.

>>> with model.hooks(fwd_hooks=zero_ablation(model, 3, "mlp_out")):  # doctest: +SKIP
...     result = audit(model, task, protocol)
"""

from reachlens.engine.hooks import FwdHook, HookFn
from reachlens.engine.sites import COMPONENTS, SITES, check_layer, hook_name, site_shape, sites_of
from reachlens.interventions.ablation import ablated, zero_ablation, zero_hook
from reachlens.interventions.steering import add_vector_hook, steering, steering_site
from reachlens.interventions.units import (
    MLP_OUTPUT_SITE,
    UNIT_SITE,
    mlp_out_weight,
    top_units,
    unit_ablation,
    unit_contributions,
    unit_mask_hook,
)

__all__ = [
    "COMPONENTS",
    "MLP_OUTPUT_SITE",
    "SITES",
    "UNIT_SITE",
    "FwdHook",
    "HookFn",
    "ablated",
    "add_vector_hook",
    "check_layer",
    "hook_name",
    "mlp_out_weight",
    "site_shape",
    "sites_of",
    "steering",
    "steering_site",
    "top_units",
    "unit_ablation",
    "unit_contributions",
    "unit_mask_hook",
    "zero_ablation",
    "zero_hook",
]
