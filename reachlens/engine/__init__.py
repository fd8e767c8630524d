"""The engine: the one way reachlens runs a hooked model (prefill, decode, routes, scoring)."""

from reachlens.engine.generate import Completion, Row, SamplingParams, generate, tokenize_prompts
from reachlens.engine.kv_cache import SlotKVCache
from reachlens.engine.scoring import LoglikResult, encode_pair, loglikelihoods
from reachlens.engine.rng import row_seed, sample_inverse_cdf, uniforms
from reachlens.engine.stack import SUPPORTED_MODEL_TYPES, LayerStack, validate_route
from reachlens.engine.stopping import StopChecker
from reachlens.engine.tokens import encode, tokenizer_of

__all__ = [
    "Completion",
    "LayerStack",
    "LoglikResult",
    "Row",
    "SUPPORTED_MODEL_TYPES",
    "SamplingParams",
    "SlotKVCache",
    "StopChecker",
    "encode",
    "encode_pair",
    "generate",
    "loglikelihoods",
    "row_seed",
    "sample_inverse_cdf",
    "tokenize_prompts",
    "tokenizer_of",
    "uniforms",
    "validate_route",
]
