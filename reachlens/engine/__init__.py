"""The engine: the one way reachlens runs a hooked model (prefill, decode, routes, scoring)."""

from reachlens.engine.generate import Completion, Row, generate, tokenize_prompts
from reachlens.engine.hooks import (
    BatchRows, arm_entries, arm_index, arms_served, current_rows, per_arm, row_agnostic, user_hooks,
)
from reachlens.engine.kv_cache import SlotKVCache
from reachlens.engine.memory import check_budget, check_rows, machine_memory
from reachlens.engine.scoring import LoglikResult, encode_pair, loglikelihoods
from reachlens.engine.rng import counter_normals, intervention_seed, row_seed, sample_inverse_cdf, uniforms
from reachlens.engine.sample_tree import SampleTree, TreeStep
from reachlens.engine.stack import (
    FUSED_MODEL_TYPES,
    EngineInfo,
    LayerInputs,
    LayerStack,
    RowRoutes,
    UnsupportedModelError,
    check_architecture,
    describe,
    validate_route,
)
from reachlens.engine.stopping import StopChecker
from reachlens.engine.tokens import encode, tokenizer_of

__all__ = [
    "BatchRows",
    "Completion",
    "EngineInfo",
    "FUSED_MODEL_TYPES",
    "LayerInputs",
    "LayerStack",
    "LoglikResult",
    "Row",
    "RowRoutes",
    "SampleTree",
    "SlotKVCache",
    "StopChecker",
    "TreeStep",
    "UnsupportedModelError",
    "arm_entries",
    "arm_index",
    "arms_served",
    "check_architecture",
    "check_budget",
    "check_rows",
    "counter_normals",
    "current_rows",
    "describe",
    "encode",
    "encode_pair",
    "generate",
    "intervention_seed",
    "loglikelihoods",
    "machine_memory",
    "per_arm",
    "row_agnostic",
    "row_seed",
    "sample_inverse_cdf",
    "tokenize_prompts",
    "tokenizer_of",
    "uniforms",
    "user_hooks",
    "validate_route",
]
