"""Shared fixtures: seeded RNGs, a tiny random Llama built from a config (nothing is downloaded).

Every test runs on a fresh clone with nothing beside it. The few that need what only CI is sure to have
(the full benchmark files in ``../shared/data``, a headless Chromium) skip with a reason when it is
absent; under ``CI=true`` (how ``.ci/run`` runs) any skip is a failure instead, so CI keeps running them.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
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
collect_ignore_glob = ["gpu/test_*.py"] if IN_CI and not torch.cuda.is_available() else []
"""The GPU suite (``tests/gpu``) is for a machine with CUDA (``benchmarks/gpu/run.sh`` runs it there). Elsewhere its
tests skip with their reason; under ``CI=true``, where any skip fails, a machine without CUDA leaves them out of the
collection instead (the CI machine has no GPU). Here, not in a ``tests/gpu/conftest.py``: a second module named
``conftest`` would hide this one from the tests that import from it."""


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

# model fingerprints are cached on disk; tests keep theirs away from the user's cache, but the real checkpoints'
# dequantized folders (content-addressed: a changed file makes a new one) are kept where a user's would be, so a
# second session does not dequantize them again (tests of the cache itself point it elsewhere)
from reachlens.models.cache import model_cache_root  # noqa: E402

os.environ.setdefault("REACHLENS_MODEL_CACHE", str(model_cache_root()))
os.environ.setdefault("REACHLENS_CACHE", tempfile.mkdtemp(prefix="reachlens-test-cache-"))


@pytest.fixture(autouse=True)
def _seed_everything():
    """Every test starts from the same seeds and leaves torch's thread count as it found it (the zoo's scripts
    and the card audits set one thread)."""
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


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
def shared_tokenizers() -> Path:
    """``../shared/tokenizers``: real tokenizers of five families with tiny configs of their vocabulary
    sizes (CI has them; a user's clone need not)."""
    folder = SHARED / "tokenizers"
    if not folder.is_dir():
        pytest.skip(f"needs the real tokenizers in {folder} (../shared/tokenizers beside the clone, or "
                    "REACHLENS_SHARED=DIR): absent")
    return folder


@pytest.fixture(scope="session")
def real_checkpoint(shared_tokenizers, tmp_path_factory):
    """``real_checkpoint(name, seed=0)``: a tiny random model (2 layers, d=64) of the real vocabulary of
    ``../shared/tokenizers/NAME``, beside that folder's tokenizer and chat template, built once per session.
    Weights drawn with std 0.3 (varied, multi-byte greedy text); Gemma's head untied (a tied one with its
    sqrt(d) embedding scale echoes the input)."""
    from reachlens.models.testing import make_tiny_from_folder

    built: dict[tuple[str, int], Path] = {}

    def get(name: str, seed: int = 0) -> Path:
        if (name, seed) not in built:
            untie = {"tie_word_embeddings": False} if name.startswith("gemma") else {}
            built[name, seed] = make_tiny_from_folder(shared_tokenizers / name,
                                                      tmp_path_factory.mktemp("real") / f"{name}-{seed}",
                                                      seed=seed, init_std=0.3, **untie)
        return built[name, seed]

    return get


@pytest.fixture(scope="session")
def chromium() -> str:
    """The headless Chromium executable (``apt-get install chromium``; ``.ci/run`` installs it)."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        pytest.skip("needs headless Chromium to render the report (apt-get install chromium): absent")
    return exe


@pytest.fixture(scope="session")
def browser(chromium):
    """Playwright for Python driving the system Chromium (``executable_path``: no browser download; ``pip install
    'reachlens[test]'`` installs Playwright), one browser per session."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("needs Playwright for Python to drive Chromium (pip install 'reachlens[test]'): absent")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture(scope="session")
def isolated():
    """Run a command where Ray and vLLM cannot reach outside: :func:`run_isolated` (needs root and
    ``unshare``/``ip``, which CI has)."""
    missing = [tool for tool in ("unshare", "ip") if shutil.which(tool) is None]
    if os.geteuid() != 0 or missing:
        why = f"{', '.join(missing)} missing" if missing else "not root"
        pytest.skip(f"needs root with unshare (util-linux) and ip (iproute2) to run Ray/vLLM in a loopback-only "
                    f"network namespace: {why}")
    return run_isolated


def isolated_env(scratch: Path) -> dict[str, str]:
    """The environment of a Ray or vLLM run in a test (../shared/notes/scale-out.md): scratch HOME and temp
    folders, Ray's auth and usage stats off, vLLM's host address pinned to loopback."""
    for sub in ("home", "tmp", "ray", "vllm"):
        (scratch / sub).mkdir(parents=True, exist_ok=True)
    return {**os.environ, "HOME": str(scratch / "home"), "TMPDIR": str(scratch / "tmp"), "RAY_TMPDIR": str(scratch / "ray"),
            "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "VLLM_HOST_IP": "127.0.0.1",
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "VLLM_CACHE_ROOT": str(scratch / "vllm"),
            "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}


def isolated_command(cmd: list[str]) -> list[str]:
    """``cmd`` in a new loopback-only network namespace and a new pid namespace (``cmd`` runs as its pid 1
    after ``ip link set lo up``): when it ends or is killed, the kernel ends every process it started
    (Ray's daemons, vLLM's engine), and nothing else on the machine is touched."""
    return ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child",
            "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *cmd]


def run_isolated(cmd: list[str], scratch: Path, *, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``cmd`` isolated (:func:`isolated_command`) with :func:`isolated_env`; its output is captured."""
    return subprocess.run(isolated_command(cmd), env=isolated_env(scratch), capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """A python that can import vLLM: ``$REACHLENS_VLLM_PYTHON`` (``make test`` sets it to ``.venv-vllm``'s
    when that venv exists), else this interpreter if it has vLLM."""
    from reachlens.engine.backends.vllm_model import vllm_python as which

    python = which()
    probe = subprocess.run([python, "-c", "import vllm"], capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        pytest.skip(f"needs vLLM (`make .venv-vllm/.installed`, then REACHLENS_VLLM_PYTHON=.venv-vllm/bin/python; "
                    f"or pip install 'reachlens[vllm]'): {python} cannot import it")
    return python


@pytest.fixture(scope="session")
def zoo_audit_dirs(tmp_path_factory) -> Path:
    """Audits of ``zoo:base`` and ``zoo:sft`` made by the CLI (arith, 10 questions, K=4, 40 new tokens): the input of
    the ``reachlens control`` tests. ``ROOT/base`` and ``ROOT/sft``."""
    from reachlens.cli import main

    root = tmp_path_factory.mktemp("zoo-audits")
    for name in ("base", "sft"):
        assert main(["audit", f"zoo:{name}", "--task", "arith", "--n", "10", "--k", "4", "--max-new-tokens", "40",
                     "--out", str(root / name)]) == 0
    return root


@pytest.fixture(scope="session")
def audit_setup():
    """(task, protocol, exec config) of the session's tiny audit: 3 arith questions, K=2, one question per batch."""
    from reachlens import Protocol, load_task
    from reachlens.execution import ExecConfig

    return load_task("arith", n=3), Protocol("arith", k=2, temperature=1.0, max_new_tokens=4), ExecConfig(max_batch_rows=3)


@pytest.fixture(scope="session")
def finished_audit(tiny_model, audit_setup, tmp_path_factory) -> Path:
    """A finished audit of the tiny model under ``audit_setup`` (shared: copy it before changing it)."""
    from reachlens import audit

    task, protocol, ex = audit_setup
    out = tmp_path_factory.mktemp("hardening") / "audit"
    audit(tiny_model, task, protocol, out=out, exec_config=ex)
    return out


class StopAudit(Exception):
    """Raised by :func:`stop_after` to interrupt an audit from its progress callback."""


def stop_after(batches: int):
    """A ``progress=`` callback that interrupts an audit once ``batches`` questions are done."""

    def progress(done: int, total: int) -> None:
        if done >= batches:
            raise StopAudit

    return progress


def kill_after_first_part(argv: list[str], out: Path) -> None:
    """Run ``reachlens ARGV`` in a child and ``kill -9`` it once the run in ``out`` has written its first part;
    the run must then read ``interrupted`` (killed mid-run, not after it completed)."""
    from reachlens.store import read_record

    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "reachlens", *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while not list((out / "parts").glob("*.parquet")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert list((out / "parts").glob("*.parquet")), "killed before its first slice was written"
    assert read_record(out).status == "interrupted"


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
    rows = [{"question_id": qid, "candidate_idx": j, "text": "t", "answer": "1", "correct": j < c, "scored": True,
             "finish_reason": "stop", "n_tokens": 1, "mean_logprob": -1.0}
            for qid, c in zip(qids, n_correct) for j in range(k)]
    return AuditResult.new(protocol.resolved(load_task("arith", n=1)), {"spec": spec, "fingerprint": spec}, q,
                       pd.DataFrame(rows), {"generator": "fake_audit"})
