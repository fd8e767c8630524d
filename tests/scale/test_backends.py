"""Backends and executors without a cluster or vLLM: the run identity, the refusals, the local executor."""

from __future__ import annotations

import sys

import pandas as pd
import pytest

from conftest import StopAudit, fake_audit, stop_after
from reachlens.execution import ExecConfig
from reachlens import Protocol, ProtocolMismatch, ReachlensError, audit, load_task
from reachlens.cli import main
from reachlens.engine.backends import bind_backend
from reachlens.models import ModelSource, load_vllm
from reachlens.engine.backends.vllm_model import VLLMModel
from reachlens.runner import InProcessExecutor, ProcessPool, RayExecutor, run_jobs
from reachlens.studies import AuditJob
from reachlens.store import read_run
from reachlens.studies.compare import compare

PROTO = Protocol("arith", k=4, temperature=1.0, max_new_tokens=12)


def test_backend_is_part_of_the_protocol():
    engine, vllm = Protocol("arith", k=8), Protocol("arith", k=8, backend="vllm")
    assert engine.to_dict()["backend"] == "engine" and vllm.to_dict()["backend"] == "vllm"  # every field written
    assert Protocol.from_dict(engine.to_dict()) == engine and Protocol.from_dict(engine.to_dict()).hash == engine.hash
    assert Protocol.from_dict(vllm.to_dict()) == vllm and vllm.hash != engine.hash
    assert engine.diff(vllm) == {"backend": ("engine", "vllm")} and vllm.diff(engine) == {"backend": ("vllm", "engine")}
    with pytest.raises(ReachlensError, match="backend='hf' is not a backend; use one of engine, vllm"):
        Protocol("arith", backend="hf")


def test_a_comparison_across_backends_is_refused_unless_allowed_as_a_control():
    base = fake_audit([True, False], [2, 1])
    other = fake_audit([True, True], [3, 1], protocol=Protocol("arith", k=4, temperature=1.0, max_new_tokens=12,
                                                               backend="vllm"))
    with pytest.raises(ProtocolMismatch, match=r"backend: 'engine' != 'vllm'"):
        compare(base, other)
    assert compare(base, other, allow=("backend",)).summary()["gained"] == 1


def test_vllm_with_a_hooked_bridge_is_refused_naming_the_hooks(tiny_model):
    task = load_task("arith", n=2)
    with tiny_model.hooks(fwd_hooks=[("blocks.0.hook_mlp_out", lambda x, hook: x)]):
        with pytest.raises(ReachlensError, match=r"runs no TransformerLens hooks, but hooks are attached at "
                                                 r"blocks\.0\.(hook_mlp_out|mlp\.hook_out)"):
            audit(tiny_model, task, Protocol("arith", k=2, max_new_tokens=4, backend="vllm"))
    with pytest.raises(ReachlensError, match="pass the model spec instead"):
        bind_backend(tiny_model, Protocol("arith", backend="vllm"))


def test_a_vllm_model_refuses_hooks_by_name():
    model = object.__new__(VLLMModel)  # no worker needed to refuse
    with pytest.raises(ReachlensError, match=r"runs no TransformerLens hooks \(asked for: blocks\.1\.hook_resid_post\)"):
        with model.hooks(fwd_hooks=[("blocks.1.hook_resid_post", lambda x, hook: x)]):
            pass


def test_a_python_without_vllm_is_one_line_naming_the_install(monkeypatch):
    with pytest.raises(ReachlensError, match="cannot start the vLLM worker with '/nonexistent/python'"):
        load_vllm("zoo:base", python="/nonexistent/python")
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ReachlensError, match=r"No module named 'vllm'.*make \.venv-vllm/\.installed"):
            load_vllm("zoo:base", python=sys.executable)


def test_cli_backend_and_ray_flags_refuse_in_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("REACHLENS_VLLM_PYTHON", "/nonexistent/python")
    args = ["audit", "zoo:base", "--task", "arith", "--n", "2", "--k", "2", "--max-new-tokens", "6"]
    assert main([*args, "--out", str(tmp_path / "a"), "--backend", "vllm"]) == 2
    assert "cannot start the vLLM worker with '/nonexistent/python'" in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "b"), "--gpus-per-worker", "1"]) == 2
    assert "--gpus-per-worker goes with --ray" in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "c"), "--backend", "vllm", "--device", "cuda"]) == 2
    assert "vLLM places the model itself" in capsys.readouterr().err


def test_ray_missing_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ReachlensError, match=r"pip install 'reachlens\[ray\]'"):
        RayExecutor()._ray()


def test_local_executor_equals_the_plain_audit_and_holds_several_audits(tiny_model, tiny_dir, tmp_path):
    task = load_task("arith", n=5)
    plain = audit(tiny_model, task, PROTO, exec_config=ExecConfig(max_batch_rows=10))
    other = Protocol("arith", k=2, temperature=0.7, max_new_tokens=12)
    plain2 = audit(tiny_model, task, other, exec_config=ExecConfig(max_batch_rows=10))
    a, b = run_jobs([AuditJob(str(tiny_dir), task, PROTO, tmp_path / "a", exec_config=ExecConfig(max_batch_rows=10)),
                       AuditJob(ModelSource(str(tiny_dir)), task, other, None, exec_config=ExecConfig(max_batch_rows=10))], InProcessExecutor())
    for got, want in ((a, plain), (b, plain2)):
        pd.testing.assert_frame_equal(got.questions, want.questions)
        pd.testing.assert_frame_equal(got.samples, want.samples)
    assert a.model["fingerprint"] == tiny_model.reachlens_identity.fingerprint
    # an executor resumes a directory another run left half done
    cut = tmp_path / "cut"

    with pytest.raises(StopAudit):
        audit(tiny_model, task, PROTO, out=cut, exec_config=ExecConfig(max_batch_rows=10), progress=stop_after(2))
    resumed = audit(str(tiny_dir), task, PROTO, out=cut, exec_config=ExecConfig(max_batch_rows=10), executor=InProcessExecutor())
    pd.testing.assert_frame_equal(resumed.samples, plain.samples)
    # a pool of two local processes (one torch thread each) fills the same runs, slices in any order
    with ProcessPool(2) as pool:
        c, d = run_jobs([AuditJob(str(tiny_dir), task, PROTO, tmp_path / "c", exec_config=ExecConfig(max_batch_rows=4)),
                         AuditJob(tiny_model, task, other, tmp_path / "d", exec_config=ExecConfig(max_batch_rows=4))],
                        pool)
    pd.testing.assert_frame_equal(c.samples, audit(tiny_model, task, PROTO, exec_config=ExecConfig(max_batch_rows=4)).samples)
    pd.testing.assert_frame_equal(d.questions, audit(tiny_model, task, other, exec_config=ExecConfig(max_batch_rows=4)).questions)
    assert read_run(tmp_path / "c").record.status == "complete" and c.location == tmp_path / "c"


def test_hooks_cannot_travel_to_an_executor(tiny_model):
    with tiny_model.hooks(fwd_hooks=[("blocks.0.hook_attn_out", lambda x, hook: x)]):
        with ProcessPool(2) as pool, pytest.raises(
                ReachlensError, match=r"hooks attached at blocks\.0\.(hook_attn_out|attn\.hook_out) cannot travel"):
            audit(tiny_model, load_task("arith", n=2), PROTO, executor=pool)


def test_a_probe_run_through_a_pool_of_two_gives_the_single_process_bank(tiny_model, tiny_dir, tmp_path):
    """workers=2 means the same for a probe run as for an audit: two local processes, each its own replica; the
    bank equals the one this process decodes, and the run records the execution settings it ran with."""
    from reachlens.probes import probe

    task, greedy = load_task("arith", n=4), Protocol.greedy("arith", max_new_tokens=8)
    specs = ["sampling:k=3:temperature=1", "graft:kind=zero,noise:layer=1", "routes:budget=2"]
    single = probe(tiny_model, task, specs, protocol=greedy, exec_config=ExecConfig(max_batch_rows=8))
    pooled = probe(str(tiny_dir), task, specs, protocol=greedy, out=tmp_path / "p",
                   exec_config=ExecConfig(max_batch_rows=8, workers=2))
    pd.testing.assert_frame_equal(pooled.candidates, single.candidates)
    assert pooled.record.exec == {"max_batch_rows": 8, "dtype": "float32", "device": "cpu"}
    assert read_run(tmp_path / "p").record.status == "complete" and not (tmp_path / "p" / "parts").exists()
