"""Model loading (``load_model``; from a spec, :class:`ModelSource`), the shipped zoo, the character tokenizer it uses, and magnitude
pruning into a new checkpoint (:mod:`reachlens.models.pruning`); real checkpoints (``real:NAME``,
:mod:`reachlens.models.real`), GGUF files (:mod:`reachlens.models.gguf`) and base + adapter pairs
(:mod:`reachlens.models.adapters`), each made once into the model cache (:mod:`reachlens.models.cache`)."""

from reachlens.errors import ModelLoadError
from reachlens.models.adapters import adapter_base, is_adapter, merged_folder
from reachlens.models.cache import model_cache_root
from reachlens.models.char_tokenizer import SPECIAL_TOKENS, build_char_tokenizer
from reachlens.models.gguf import GGUFSource, dequantized_folder, gguf_source, is_gguf
from reachlens.models.loading import (
    ModelIdentity,
    identity_of,
    load_model,
    load_tokenizer,
    model_identity,
    resolve_spec,
    same_model,
)
from reachlens.models.pruning import PruneConfig, magnitude_mask, prune_, prune_checkpoint
from reachlens.models.real import REAL_CHECKPOINTS, real_names, real_table
from reachlens.models.source import ModelSource, load_vllm

__all__ = [
    "GGUFSource",
    "ModelIdentity",
    "ModelLoadError",
    "ModelSource",
    "PruneConfig",
    "REAL_CHECKPOINTS",
    "SPECIAL_TOKENS",
    "adapter_base",
    "build_char_tokenizer",
    "dequantized_folder",
    "gguf_source",
    "identity_of",
    "is_adapter",
    "is_gguf",
    "load_model",
    "load_tokenizer",
    "load_vllm",
    "magnitude_mask",
    "merged_folder",
    "model_cache_root",
    "model_identity",
    "prune_",
    "prune_checkpoint",
    "real_names",
    "real_table",
    "resolve_spec",
    "same_model",
]
