"""Unstructured magnitude pruning of chosen layers, saved as a loadable HuggingFace folder.

Pruning is how a localized recognition-vs-generation failure is manufactured on purpose: zero the
smallest-magnitude fraction of the weights of a block's MLP (or attention), and the block can no
longer write what it wrote; a layer sweep of zero-ablations should then point at it. It transforms a
checkpoint (a new folder), so it lives with the model code, not among the hook factories of
:mod:`reachlens.interventions`.

What is pruned is named by the components of :data:`reachlens.engine.sites.COMPONENTS`, the same
words an ablation uses: ``mlp`` (the weights behind ``mlp_out``: gate/up/down projections), ``attn``
(behind ``attn_out``: q/k/v/o) and ``layer`` (both).

Rule: each chosen weight *matrix* is pruned on its own (layer-wise, per matrix): its
``floor(fraction * numel)`` entries of smallest ``|w|`` are set to zero, ties broken by flat index
(the lower index is pruned first), so the result is deterministic. Norm weights, embeddings and
biases are never touched. Pruning works on a fresh HuggingFace copy of the checkpoint (never on a
loaded TransformerBridge, whose module tree is rewired), and the pruned folder carries its own
``pruning.json`` and model card so that any result made with it names its origin.

>>> prune_checkpoint("zoo:base", "runs/pruned-l3", PruneConfig(layers=(3,), fraction=0.6))  # doctest: +SKIP
PosixPath('runs/pruned-l3')
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from reachlens.engine.sites import COMPONENTS
from reachlens.errors import ReachlensError

__all__ = ["PruneConfig", "magnitude_mask", "prunable_weights", "prune_", "prune_checkpoint"]

_HF_MODULES = {"mlp_out": ("mlp",), "attn_out": ("self_attn", "attn", "attention")}
"""Output site -> the HuggingFace submodule of a decoder layer that writes it, whose 2-D weights are
pruned (the first name the family uses: Llama/Gemma/OLMo/Phi-3 ``self_attn``, GPT-2 ``attn``,
GPT-NeoX ``attention``)."""


@dataclass(frozen=True)
class PruneConfig:
    """What to prune."""

    layers: tuple[int, ...]
    """Decoder layers whose weights are pruned (0-based)."""
    fraction: float
    """Share of each chosen matrix's entries set to zero, in [0, 1)."""
    components: tuple[str, ...] = ("mlp",)
    """Which parts of each layer (:data:`~reachlens.engine.sites.COMPONENTS`): ``mlp`` (gate/up/down
    projections), ``attn`` (q/k/v/o), ``layer`` (both)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(int(x) for x in self.layers))
        object.__setattr__(self, "components", tuple(self.components))
        if not self.layers:
            raise ReachlensError("PruneConfig needs at least one layer")
        if not (isinstance(self.fraction, (int, float)) and math.isfinite(self.fraction) and 0 <= self.fraction < 1):
            raise ReachlensError(f"fraction={self.fraction!r} must lie in [0, 1)")
        bad = [c for c in self.components if c not in COMPONENTS]
        if bad or not self.components:
            raise ReachlensError(f"components={self.components!r}: each must be one of {', '.join(COMPONENTS)}")


def magnitude_mask(weight: Float[Tensor, "rows cols"], fraction: float) -> Bool[Tensor, "rows cols"]:
    """True where an entry is kept: all but the ``floor(fraction * numel)`` smallest ``|w|``.

    >>> magnitude_mask(torch.tensor([[0.1, -3.0], [0.5, 2.0]]), 0.5).tolist()
    [[False, True], [False, True]]
    """
    n_prune = int(math.floor(fraction * weight.numel()))
    keep = torch.ones(weight.numel(), dtype=torch.bool, device=weight.device)
    if n_prune:
        order = torch.argsort(weight.detach().abs().flatten(), stable=True)
        keep[order[:n_prune]] = False
    return keep.view_as(weight)


def prunable_weights(hf_model, config: PruneConfig) -> dict[str, torch.nn.Parameter]:
    """The 2-D weights ``config`` selects, by their HuggingFace parameter names.

    Raises:
        ReachlensError: a layer is out of range, or a selected part holds no 2-D weights.
    """
    n_layers = int(hf_model.config.num_hidden_layers)
    for layer in config.layers:
        if not 0 <= layer < n_layers:
            raise ReachlensError(f"layer {layer} is out of range for a {n_layers}-layer model (valid: 0-{n_layers - 1})")
    stack = _decoder_layers(hf_model, n_layers)
    params = dict(hf_model.named_parameters())
    chosen: dict[str, torch.nn.Parameter] = {}
    sites = dict.fromkeys(s for comp in config.components for s in COMPONENTS[comp])  # ordered, no repeats
    for layer in config.layers:
        for site in sites:
            layer_module = hf_model.get_submodule(f"{stack}.{layer}")
            part = next((n for n in _HF_MODULES[site] if hasattr(layer_module, n)), _HF_MODULES[site][0])
            prefix = f"{stack}.{layer}.{part}."
            found = {k: p for k, p in params.items() if k.startswith(prefix) and p.ndim == 2}
            if not found:
                raise ReachlensError(f"no 2-D weights under {prefix!r} ({type(hf_model).__name__})")
            chosen.update(found)
    return chosen


def _decoder_layers(hf_model, n_layers: int) -> str:
    """The dotted name of the model's list of decoder layers (``model.layers``, ``transformer.h``, ...)."""
    for name, module in hf_model.named_modules():
        last = name.rsplit(".", 1)[-1]
        if isinstance(module, torch.nn.ModuleList) and len(module) == n_layers and last in ("layers", "h"):
            return name
    raise ReachlensError(f"{type(hf_model).__name__} has no list of {n_layers} decoder layers")


@torch.no_grad()
def prune_(hf_model, config: PruneConfig) -> dict[str, dict[str, int | float]]:
    """Prune ``hf_model`` in place; returns per matrix its size and the share of zeros after pruning."""
    report = {}
    for name, param in prunable_weights(hf_model, config).items():
        param.mul_(magnitude_mask(param, config.fraction).to(param.dtype))
        report[name] = {"numel": int(param.numel()), "zero_fraction": float((param == 0).float().mean())}
    return report


def prune_checkpoint(spec: str, out: str | Path, config: PruneConfig) -> Path:
    """Load ``spec`` (zoo:NAME, a folder, a hub name) as plain HuggingFace, prune it, save it to ``out``.

    ``out`` receives safetensors weights, the tokenizer, ``pruning.json`` (source spec and
    fingerprint, the config, per-matrix zero fractions) and a ``README.md`` model card; it loads
    with :func:`reachlens.load_model`.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reachlens.models.loading import model_identity, resolve_spec

    target, _ = resolve_spec(spec)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ReachlensError(f"output folder {str(out)!r} is not empty; pick a new folder")
    hf = AutoModelForCausalLM.from_pretrained(target, use_safetensors=True, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(target)
    report = prune_(hf, config)
    out.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    source = model_identity(spec)
    record = {"source": asdict(source), "config": asdict(config), "matrices": report}
    (out / "pruning.json").write_text(json.dumps(record, indent=2) + "\n")
    lines = [
        f"# {out.name}: {spec} with magnitude-pruned weights", "",
        f"Source: `{spec}` (fingerprint `{source.fingerprint}`).",
        f"Unstructured magnitude pruning, per matrix: the smallest {config.fraction:.0%} of |w| set to zero in "
        f"{', '.join(config.components)} of layer(s) {', '.join(map(str, config.layers))}.",
        "Made by `reachlens.models.pruning.prune_checkpoint`; details in `pruning.json`.", "",
    ]
    (out / "README.md").write_text("\n".join(lines))
    return out
