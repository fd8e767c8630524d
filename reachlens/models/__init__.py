"""Model loading (``load_model``; from a spec, :class:`ModelSource`), the shipped zoo, the character tokenizer it uses, and magnitude
pruning into a new checkpoint (:mod:`reachlens.models.pruning`)."""

from reachlens.models.char_tokenizer import SPECIAL_TOKENS, build_char_tokenizer
from reachlens.models.loading import (
    ModelIdentity,
    ModelLoadError,
    identity_of,
    load_model,
    load_tokenizer,
    model_identity,
    resolve_spec,
    same_model,
)
from reachlens.models.pruning import PruneConfig, magnitude_mask, prune_, prune_checkpoint
from reachlens.models.source import ModelSource, load_vllm

__all__ = [
    "ModelIdentity",
    "ModelLoadError",
    "ModelSource",
    "PruneConfig",
    "SPECIAL_TOKENS",
    "build_char_tokenizer",
    "identity_of",
    "load_model",
    "load_tokenizer",
    "load_vllm",
    "magnitude_mask",
    "model_identity",
    "prune_",
    "prune_checkpoint",
    "resolve_spec",
    "same_model",
]
