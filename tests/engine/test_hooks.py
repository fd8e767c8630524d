"""Hooks see what they expect: one batch row per sample whenever a user hook is attached."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch

from reachlens.execution import ExecConfig
from reachlens import Protocol
from reachlens.engine import Row, current_rows, generate, row_agnostic, user_hooks
from reachlens.interventions import steering, unit_ablation, zero_ablation
from reachlens.studies import audit
from reachlens.tasks import load_task


def decode(max_new_tokens: int, **fields) -> Protocol:
    """The engine's decode spec for these tests: a Protocol (sampled rows at temperature 1.0 unless given)."""
    fields.setdefault("temperature", 1.0)
    return Protocol("test", k=1, max_new_tokens=max_new_tokens, **fields)


def generate_to_length(*args, **kwargs):
    """:func:`generate` with EOS not stopping a row: every decode in these tests runs to its length."""
    return generate(*args, stop_at_eos=False, **kwargs)


HOOK = "blocks.0.hook_mlp_out"


class Recorder:
    """Records ``hook`` activations per sample, attributing batch rows with :func:`current_rows`.

    ``naive=True`` instead assumes batch row ``i`` of every forward is row ``i`` of the chunk (what
    a hook written for HF ``generate`` assumes) and records by that index."""

    def __init__(self, naive: bool = False) -> None:
        self.naive = naive
        self.seen: dict = defaultdict(list)
        self.batch_sizes: list[tuple[int, int]] = []

    def __call__(self, x: torch.Tensor, hook) -> None:
        rows = current_rows()
        self.batch_sizes.append((x.shape[0], sum(len(e) for e in rows.entries)))
        if self.naive:
            for i in range(x.shape[0]):
                if i < len(rows.chunk):
                    self.seen[rows.tags[rows.chunk[i]]].append(x[i].clone())
            return
        for entry, members in enumerate(rows.entries):
            for r in members:
                self.seen[rows.tags[r]].append(x[entry].clone())


def test_user_hooks_sees_foreign_hooks_but_not_reachlens_own(tiny_model):
    assert user_hooks(tiny_model) == []
    with tiny_model.hooks(fwd_hooks=[(HOOK, lambda x, hook: None)]):
        assert user_hooks(tiny_model) == ["blocks.0.mlp.hook_out"]  # hook_mlp_out is TransformerLens' alias of it
    own = zero_ablation(tiny_model, 1, "layer") + steering(tiny_model, 0, torch.ones(64), 1.0)
    own += unit_ablation(tiny_model, 2, [0, 3])
    with tiny_model.hooks(fwd_hooks=own):
        assert user_hooks(tiny_model) == []
    handle = tiny_model.blocks[0].mlp.register_forward_hook(lambda *a: None)  # a plain PyTorch hook counts
    try:
        assert user_hooks(tiny_model) == ["blocks.0.mlp"]
    finally:
        handle.remove()

    @row_agnostic
    def mine(x, hook):
        return x * 1.0

    with tiny_model.hooks(fwd_hooks=[(HOOK, mine)]):
        assert user_hooks(tiny_model) == []


def test_current_rows_is_only_defined_inside_a_forward():
    with pytest.raises(RuntimeError, match="only defined inside a hook"):
        current_rows()


@pytest.fixture(scope="module")
def setup():
    task = load_task("arith", n=3)
    return task, Protocol("arith", k=4, temperature=1.0, max_new_tokens=8, seed=3)


def record_audit(model, task, protocol, **kwargs):
    rec = Recorder(naive=kwargs.pop("naive", False))
    with model.hooks(fwd_hooks=[(HOOK, rec)]):
        result = audit(model, task, protocol, **kwargs)
    return rec, result


def test_a_recording_hook_during_a_k4_audit_sees_one_row_per_sample(tiny_model, setup):
    task, protocol = setup
    unshared, ref = record_audit(tiny_model, task, protocol, exec_config=ExecConfig(share_prefixes=False))
    default, res = record_audit(tiny_model, task, protocol)  # a user hook is attached: no sharing
    shared, res_shared = record_audit(tiny_model, task, protocol, exec_config=ExecConfig(share_prefixes=True))  # opt-in
    naive, _ = record_audit(tiny_model, task, protocol)  # the default is safe even for a naive hook

    keys = {(q.question_id, j) for q in task.questions for j in [None, 0, 1, 2, 3]}
    assert set(unshared.seen) == keys
    # every forward of the unshared run has one batch row per sample of the chunk
    assert all(n == len(task) * 5 for n, _ in unshared.batch_sizes)
    for name, rec in {"default": default, "shared (opt-in)": shared, "naive": naive}.items():
        assert set(rec.seen) == keys, name
        for key in keys:
            a, b = unshared.seen[key], rec.seen[key]
            if name == "naive":  # a finished row keeps its batch row (fed padding) to the end of the chunk
                assert len(b) >= len(a)
                b = b[: len(a)]
            assert len(a) == len(b), (name, key)
            for x, y in zip(a, b):
                # batch shapes differ between the runs: float32 rounding
                torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4, msg=f"{name} {key}")
    # sharing really shares (the prompt is prefilled once for its 5 rows), so a naive hook would misalign
    assert shared.batch_sizes[0][0] == len(task) < shared.batch_sizes[0][1]
    for r in (res, res_shared):
        assert r.samples["text"].tolist() == ref.samples["text"].tolist()
        assert r.questions["deployed_text"].tolist() == ref.questions["deployed_text"].tolist()


def test_reachlens_own_interventions_keep_sharing(tiny_model):
    sizes = []

    def count(x, hook):
        sizes.append(x.shape[0])

    assert user_hooks(tiny_model) == []
    rows = [Row(0, seed=s) for s in range(6)]
    params = decode(4, temperature=1.0)
    with tiny_model.hooks(fwd_hooks=zero_ablation(tiny_model, 2, "mlp")):
        with tiny_model.hooks(fwd_hooks=[(HOOK, row_agnostic(count))]):
            generate_to_length(tiny_model, ["Q: 1+2=?\nA:"], rows, params)
    assert sizes[0] == 1  # the prompt prefilled once for its six samples


def test_run_with_cache_leaves_no_hook_that_turns_sharing_off(tmp_path):
    """``run_with_cache`` makes HuggingFace install its output-capturing hooks for good; they record
    nothing in the engine's forwards, so they are not user hooks (sharing stays on after it)."""
    from reachlens.models import load_model
    from reachlens.models.testing import make_tiny_model

    model = load_model(str(make_tiny_model("llama", tmp_path / "llama")))
    model.run_with_cache(model.to_tokens("Q: 1+2=?"))
    assert any(fn.__module__ == "transformers.utils.output_capturing"
               for m in model.modules() for fn in m._forward_hooks.values()), "the hooks this test is about"
    assert user_hooks(model) == []
