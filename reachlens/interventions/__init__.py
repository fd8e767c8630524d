"""Interventions: hook factories that change how the engine runs, never the study code.

Each factory returns ``fwd_hooks`` for ``with model.hooks(fwd_hooks=...)``, at TransformerLens'
sites (``mlp_out``, ``attn_out``, ``resid_post``, ``mlp_post``, ...: :mod:`reachlens.engine.sites`);
:func:`hook_name` resolves ``(layer, site)`` against the model when the hooks are built, so a typo
fails before anything runs. Ablation, steering and unit masks are live on every forward of a
generation (prompt prefill and each decoding step); grafts and embedding noise act once, in the
prompt's prefill. Every hook function here is marked
:func:`~reachlens.engine.hooks.row_agnostic` or :func:`~reachlens.engine.hooks.per_arm`, so the
sampler keeps sharing prefixes under it.

Every factory acts on every row by default, or, given ``arm=KEY`` (or a grid of arms), only on the
rows of :func:`reachlens.engine.generate` whose ``Row.arm`` is that arm: the arms of a sweep decode
side by side in one batch (:mod:`reachlens.engine.hooks`, "Arms").

* :mod:`~reachlens.interventions.ablation`: zero a site, a component (``mlp``, ``attn``, ``layer``) or
  several sites, or replace it by its mean;
* :mod:`~reachlens.interventions.steering`: add ``alpha * v`` at a site (a grid of alphas as arms);
* :mod:`~reachlens.interventions.units`: zero chosen MLP hidden units, rank units along a direction;
* :mod:`~reachlens.interventions.graft`: replace one prompt position's activation at one layer, in
  the prefill (zero, noise, direction, permute, bos, mean, prev_layer);
* :mod:`~reachlens.interventions.embedding_noise`: Gaussian noise on the prompt's embeddings;
* :mod:`~reachlens.interventions.weight_noise`: Gaussian noise on the weights of the linear maps
  (:mod:`~reachlens.interventions.linear_sites`), as ``x dW^T`` added at each map's output, every forward.
* :mod:`~reachlens.interventions.direction_file`: a direction read from a ``.npy`` or ``.json`` file, checked.

Pruning, which writes a new checkpoint rather than hooking a model, is
:mod:`reachlens.models.pruning`.

>>> with model.hooks(fwd_hooks=zero_ablation(model, 3, "mlp_out")):  # doctest: +SKIP
...     result = audit(model, task, protocol)
"""

from reachlens.engine.hooks import FwdHook, HookFn
from reachlens.engine.rng import intervention_seed
from reachlens.engine.sites import COMPONENTS, SITES, check_layer, hook_name, site_shape, sites_of
from reachlens.interventions.ablation import (
    ablated,
    displacement_hook,
    mean_ablation,
    random_displacement,
    replace_hook,
    site_means,
    zero_ablation,
    zero_hook,
)
from reachlens.interventions.direction_file import read_direction
from reachlens.interventions.embedding_noise import (
    EMBED_SITE,
    EmbeddingNoise,
    embedding_noise,
    embedding_noise_arms,
    embedding_noise_values,
)
from reachlens.interventions.graft import GRAFT_KINDS, RANDOM_KINDS, Graft, graft_arms, grafting, prompt_columns
from reachlens.interventions.steering import (
    add_vector_arms_hook,
    add_vector_hook,
    steering,
    steering_grid,
    steering_site,
)
from reachlens.interventions.linear_sites import BLOCK_MAPS, LinearSite, checkpoint_tensor, linear_sites
from reachlens.interventions.units import (
    MLP_OUTPUT_SITE,
    UNIT_SITE,
    mlp_out_weight,
    top_units,
    unit_ablation,
    unit_ablation_arms,
    unit_contributions,
    unit_mask_arms_hook,
    unit_mask_hook,
)
from reachlens.interventions.weight_noise import (
    WeightNoise,
    weight_noise,
    weight_noise_arms,
    weight_noise_deltas,
    weight_noise_draws,
)

__all__ = [
    "BLOCK_MAPS",
    "COMPONENTS",
    "EMBED_SITE",
    "GRAFT_KINDS",
    "MLP_OUTPUT_SITE",
    "RANDOM_KINDS",
    "SITES",
    "UNIT_SITE",
    "EmbeddingNoise",
    "FwdHook",
    "Graft",
    "HookFn",
    "LinearSite",
    "WeightNoise",
    "ablated",
    "displacement_hook",
    "add_vector_arms_hook",
    "add_vector_hook",
    "check_layer",
    "checkpoint_tensor",
    "embedding_noise",
    "embedding_noise_arms",
    "embedding_noise_values",
    "graft_arms",
    "grafting",
    "hook_name",
    "intervention_seed",
    "linear_sites",
    "mean_ablation",
    "random_displacement",
    "mlp_out_weight",
    "prompt_columns",
    "read_direction",
    "replace_hook",
    "site_means",
    "site_shape",
    "sites_of",
    "steering",
    "steering_grid",
    "steering_site",
    "top_units",
    "unit_ablation",
    "unit_ablation_arms",
    "unit_contributions",
    "unit_mask_arms_hook",
    "unit_mask_hook",
    "weight_noise",
    "weight_noise_arms",
    "weight_noise_deltas",
    "weight_noise_draws",
    "zero_ablation",
    "zero_hook",
]
