"""Model loading (``load_model``), the shipped zoo and the character tokenizer it uses."""

from reachlens.models.char_tokenizer import SPECIAL_TOKENS, build_char_tokenizer
from reachlens.models.loading import ModelIdentity, ModelLoadError, load_model, model_identity, resolve_spec

__all__ = [
    "ModelIdentity",
    "ModelLoadError",
    "SPECIAL_TOKENS",
    "build_char_tokenizer",
    "load_model",
    "model_identity",
    "resolve_spec",
]
