"""Interventions: hook factories that change how the engine runs, never the study code.

Each factory returns ``fwd_hooks`` for ``with model.hooks(fwd_hooks=...)``; hook names and layers
are resolved when the hooks are built, so a typo fails before anything runs. Every hook is live on
every forward of a generation (prompt prefill and each decoding step).

* :mod:`~reachlens.interventions.ablation`: zero the MLP, attention, or both outputs of a block;
* :mod:`~reachlens.interventions.steering`: add ``alpha * v`` to a block's output;
* :mod:`~reachlens.interventions.units`: zero chosen MLP hidden units, rank units along a direction;
* :mod:`~reachlens.interventions.pruning`: unstructured magnitude pruning into a new checkpoint.

>>> with model.hooks(fwd_hooks=zero_ablation(model, 3, "mlp")):  # doctest: +SKIP
...     result = audit(model, task, protocol)
"""

from reachlens.interventions._hooks import (
    COMPONENT_HOOKS,
    INTERVENTIONS,
    FwdHook,
    check_layer,
    component_hook_names,
    resolve_hook_name,
)
from reachlens.interventions.ablation import ablated, zero_ablation, zero_hook
from reachlens.interventions.pruning import PRUNE_COMPONENTS, PruneConfig, magnitude_mask, prune_, prune_checkpoint
from reachlens.interventions.steering import STEER_HOOKS, add_vector_hook, steer_hook_name, steering
from reachlens.interventions.units import (
    mlp_hidden_hook_name,
    mlp_output_hook_name,
    mlp_out_weight,
    top_units,
    unit_ablation,
    unit_contributions,
    unit_mask_hook,
)

__all__ = [
    "COMPONENT_HOOKS",
    "INTERVENTIONS",
    "PRUNE_COMPONENTS",
    "PruneConfig",
    "STEER_HOOKS",
    "FwdHook",
    "ablated",
    "add_vector_hook",
    "check_layer",
    "component_hook_names",
    "magnitude_mask",
    "mlp_hidden_hook_name",
    "mlp_output_hook_name",
    "mlp_out_weight",
    "prune_",
    "prune_checkpoint",
    "resolve_hook_name",
    "steer_hook_name",
    "steering",
    "top_units",
    "unit_ablation",
    "unit_contributions",
    "unit_mask_hook",
    "zero_ablation",
    "zero_hook",
]
