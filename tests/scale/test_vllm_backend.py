"""The vLLM backend against the engine on zoo:base: the same greedy text, the same pass@k within noise,
and K -> 2K extension that draws only the new samples.

vLLM runs isolated (a loopback-only network namespace); it needs the vLLM venv (``make
.venv-vllm/.installed``, which ``make test`` passes on as ``REACHLENS_VLLM_PYTHON``). Without it this
file skips with that reason, and under ``CI=true`` the skip is a failure.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import special, stats

import reachlens
from reachlens import AuditResult, Protocol, ProtocolMismatch
from reachlens.engine import row_seed
from reachlens.studies.compare import compare
from vllm_driver import K, MAX_NEW_TOKENS, N, NE

DRIVER = str(Path(__file__).with_name("vllm_driver.py"))


@pytest.fixture(scope="module")
def runs(isolated, vllm_python, tmp_path_factory):
    out = tmp_path_factory.mktemp("vllm")
    run = isolated([sys.executable, DRIVER, str(out)], Path(tempfile.mkdtemp(prefix="rl-vllm-")), timeout=1200)
    assert run.returncode == 0, run.stderr[-4000:]
    info = json.loads(run.stdout.strip().splitlines()[-1])
    return out, info


@pytest.fixture(scope="module")
def engine_audit() -> AuditResult:
    model = reachlens.load_model("zoo:base")
    return reachlens.audit(model, reachlens.load_task("arith", n=N), Protocol("arith", k=K, max_new_tokens=MAX_NEW_TOKENS))


def test_vllm_greedy_text_equals_the_engines_on_every_question(runs, engine_audit):
    v = AuditResult.load(runs[0] / "k200")
    assert v.protocol.backend == "vllm" and engine_audit.protocol.backend == "engine"
    assert list(v.questions["question_id"]) == list(engine_audit.questions["question_id"])
    assert list(v.questions["deployed_text"]) == list(engine_audit.questions["deployed_text"])
    assert list(v.questions["deployed_finish"]) == list(engine_audit.questions["deployed_finish"])
    assert len(v.samples) == N * K and v.samples["text"].str.len().gt(0).all()


def _pass_at_k(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass@k per question with scipy's binomials (an independent reference)."""
    return 1.0 - special.comb(n - c, k, exact=False) / special.comb(n, k, exact=False)


def test_vllm_pass_at_k_is_the_engines_within_a_paired_95_interval(runs, engine_audit):
    v = AuditResult.load(runs[0] / "k200")
    with pytest.raises(ProtocolMismatch, match="backend"):
        compare(engine_audit, v)  # two backends' draws differ: only a control may compare them
    curve = compare(engine_audit, v, allow=("backend",)).pass_at_k_curve()
    assert list(curve["k"]) == [1, 2, 4, 8, 16, 32, 64, 128, 200]
    assert ((curve["delta_lo"] <= 0) & (curve["delta_hi"] >= 0)).all(), curve
    # the same, recomputed with scipy: a paired t interval over questions of the per-question difference
    e = engine_audit.questions.set_index("question_id")
    w = v.questions.set_index("question_id").loc[e.index]
    for k in curve["k"]:
        diff = _pass_at_k(w["n_scored"].to_numpy(), w["n_correct"].to_numpy(), k) - \
            _pass_at_k(e["n_scored"].to_numpy(), e["n_correct"].to_numpy(), k)
        assert np.isclose(diff.mean(), curve.set_index("k").loc[k, "delta"])
        if diff.std() > 0:
            lo, hi = stats.t.interval(0.95, len(diff) - 1, loc=diff.mean(), scale=stats.sem(diff))
            assert lo <= 0 <= hi, (k, lo, hi)


def test_vllm_extension_to_2k_draws_only_the_new_samples_and_equals_a_fresh_2k_audit(runs):
    out, info = runs
    k8, k16, fresh = (AuditResult.load(out / name) for name in ("k8", "k8--k=16", "k16-fresh"))
    ids = list(k8.questions["question_id"])
    assert len(ids) == NE and k16.k == 16
    # the extension sent vLLM the deployed answers (greedy) and samples 8..15 only, each with its own seed
    sampled = sorted(s for s in info["extension_seeds"] if s is not None)
    assert sampled == sorted(row_seed(0, q, j) for q in ids for j in range(8, 16))
    first = k16.samples[k16.samples["candidate_idx"] < 8].reset_index(drop=True)
    pd.testing.assert_frame_equal(first, k8.samples)
    # seeded per sample: a fresh K=16 audit draws the same 16 samples
    pd.testing.assert_frame_equal(k16.samples, fresh.samples)
    pd.testing.assert_frame_equal(k16.questions, fresh.questions)
