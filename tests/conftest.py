"""Shared fixtures: seeded RNGs, a tiny random Llama built from a config (nothing is downloaded)."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# model fingerprints are cached on disk; tests keep theirs away from the user's cache
os.environ.setdefault("REACHLENS_CACHE", tempfile.mkdtemp(prefix="reachlens-test-cache-"))


@pytest.fixture(autouse=True)
def _seed_everything():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """A random 3-layer Llama (GQA, d=64) with the character tokenizer, saved as safetensors.

    Its weights are drawn with a large init so that greedy outputs vary from token to token (a
    near-uniform random model repeats one token, which would make equality tests weak)."""
    from reachlens.models.testing import make_tiny_llama

    return make_tiny_llama(tmp_path_factory.mktemp("models") / "tiny", init_std=0.3)


@pytest.fixture(scope="session")
def tiny_model(tiny_dir):
    """The tiny model loaded as a TransformerBridge (shared: tests must not mutate it)."""
    from reachlens.models import load_model

    return load_model(str(tiny_dir))


@pytest.fixture(scope="session")
def tiny_hf(tiny_dir):
    """The same weights as a plain HuggingFace model (the reference)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_dir), use_safetensors=True).eval()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"the shared data folder {SHARED_DATA} is missing: tests need ../shared/data beside the repo")
    return SHARED_DATA


def fake_audit(realized, n_correct, k=4, spec="m", protocol=None):
    """An audit result made by hand: realized flags and correct-sample counts per question."""
    import pandas as pd

    from reachlens import Protocol
    from reachlens.studies import AuditResult
    from reachlens.tasks import load_task

    protocol = protocol or Protocol("arith", k=4, temperature=1.0, max_new_tokens=12)
    qids = [f"q{i}" for i in range(len(realized))]
    q = pd.DataFrame({
        "question_id": qids, "realized": realized, "reachable": [c > 0 for c in n_correct],
        "n_correct": n_correct, "n_scored": [k] * len(qids), "k": k,
        "propensity": [c / k for c in n_correct], "deployed_answer": "1", "deployed_text": "x",
        "deployed_scored": True, "deployed_finish": "stop", "gold": "1", "labels": None,
    })
    rows = [{"question_id": qid, "sample_idx": j, "text": "t", "answer": "1", "correct": j < c, "scored": True,
             "finish_reason": "stop", "n_tokens": 1, "mean_logprob": -1.0}
            for qid, c in zip(qids, n_correct) for j in range(k)]
    return AuditResult(protocol.resolved(load_task("arith", n=1)), {"spec": spec, "fingerprint": spec}, q,
                       pd.DataFrame(rows), {"generator": "fake_audit"})
