"""Shared fixtures: seeded RNGs, a tiny random Llama built from a config (nothing is downloaded).

Every test runs on a fresh clone with nothing beside it. The few that need what only CI is sure to have
(the full benchmark files in ``../shared/data``, a headless Chromium) skip with a reason when it is
absent; under ``CI=true`` (how ``.ci/run`` runs) any skip is a failure instead, so CI keeps running them.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("REACHLENS_SHARED") or REPO.parent / "shared")
SHARED_DATA = SHARED / "data"
FIXTURE_DATA = Path(__file__).resolve().parent / "data"
"""Small files in each benchmark's exact format, made for the tests (see ``tests/data/README.md``)."""
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _fail_skips_in_ci(report) -> None:
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where nothing may skip: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_skips_in_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_skips_in_ci(outcome.get_result())

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
    """``../shared/data``: the full benchmark files (CI has them; a user's clone need not)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"needs the full benchmark files in {SHARED_DATA} (../shared/data beside the clone, or "
                    "REACHLENS_SHARED=DIR): absent")
    return SHARED_DATA


@pytest.fixture(scope="session")
def chromium() -> str:
    """The headless Chromium executable (``apt-get install chromium``; ``.ci/run`` installs it)."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        pytest.skip("needs headless Chromium to render the report (apt-get install chromium): absent")
    return exe


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
