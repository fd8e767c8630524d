"""The causal sweeps decode their conditions as arms of one batch: the tables equal one condition at a time.

"One at a time" is the sweep's old way: each condition its own decode of the failure set and healthy
panel, its hooks (built without ``arm=``) acting on every row. "Arms" is the default: every condition's
per-arm hooks attached at once, each question's rows of every arm in one ``generate`` call. Run on
zoo:base (a trained model, so repair and break counts are not all zero) with small sets.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from reachlens.protocol import Protocol
from reachlens.runner import deploy_and_grade, deploy_arms_and_grade
from reachlens.interventions import zero_ablation
from reachlens.studies.causal import default_alphas, mean_difference_direction, silence_sweep, steer_sweep, units_sweep
from reachlens.studies.recognition import EvalSets, FailureRule, RecognitionConfig, TaskSpec, generation_protocol


@pytest.fixture(scope="module")
def study():
    """zoo:base, and sets made here from its greedy deployment alone (5 questions it gets wrong, 5 it gets
    right; no recognition pass: the sweeps only read the ids)."""
    from reachlens.models import identity_of, load_model

    torch.set_num_threads(1)
    task = TaskSpec("arith_mc", n=30).load()
    model = load_model("zoo:base")
    protocol = generation_protocol(task, Protocol.greedy("arith_mc", max_new_tokens=40))
    gen = deploy_and_grade(model, task, protocol)
    failure = tuple(gen.loc[~gen["realized"], "question_id"][:5])
    healthy = tuple(gen.loc[gen["realized"], "question_id"][:5])
    assert len(failure) == len(healthy) == 5
    sets = EvalSets(failure, healthy, FailureRule(), protocol, RecognitionConfig().resolved(task), identity_of(model))
    return model, task, sets


def assert_same_run(a, b) -> None:
    assert a.meta == b.meta
    pd.testing.assert_frame_equal(a.table, b.table, check_exact=True)
    pd.testing.assert_frame_equal(a.per_question, b.per_question, check_exact=True)
    assert a.extra.keys() == b.extra.keys()
    for name in a.extra:
        pd.testing.assert_frame_equal(a.extra[name], b.extra[name], check_exact=True)


def changed(run) -> int:
    """How many (condition, question) outputs differ from the plain model's."""
    pq = run.per_question
    first = pq[pq["condition"] == pq["condition"].iloc[0]].set_index("question_id")["deployed_text"]
    return int((pq["deployed_text"] != pq["question_id"].map(first)).sum())


def test_silence_sweep_arms_equal_one_at_a_time(study):
    model, task, sets = study
    kw = dict(layers=[0, 3, 5], components=["mlp", "layer"])
    arms = silence_sweep(model, task, sets, **kw)
    alone = silence_sweep(model, task, sets, one_at_a_time=True, **kw)
    assert_same_run(arms, alone)
    assert len(arms.table) == 7 and changed(arms) > len(arms.per_question) // 2  # the ablations bite
    assert arms.table.iloc[0].repair == 0.0 and arms.table.iloc[0]["break"] == 0.0  # 'none' is the plain model


def test_steer_sweep_arms_equal_one_at_a_time(study):
    model, task, sets = study
    direction = mean_difference_direction(model, task, sets, 2)
    kw = dict(alphas=default_alphas(direction, (0.0, 2.0)), direction=direction, control_seed=0)
    arms = steer_sweep(model, task, sets, 2, **kw)
    assert_same_run(arms, steer_sweep(model, task, sets, 2, one_at_a_time=True, **kw))
    assert len(arms.table) == 4 and changed(arms) > 0
    zero = arms.table[arms.table["alpha"] == 0.0]
    assert (zero["rescue"] == 0.0).all() and (zero["induction"] == 0.0).all()  # alpha 0 adds an exact zero


def test_units_sweep_arms_equal_one_at_a_time(study):
    model, task, sets = study
    kw = dict(ks=[8, 512], control_seed=0)
    arms = units_sweep(model, task, sets, 2, **kw)
    assert_same_run(arms, units_sweep(model, task, sets, 2, one_at_a_time=True, **kw))
    # all 512 units silenced is the whole-MLP ablation, run as its own arm on the failure set
    assert arms.table.iloc[1].repair == arms.table.iloc[1].block_repair
    assert set(arms.per_question[arms.per_question["condition"] == "zero L2 mlp"]["set"]) == {"failure"}


def test_deploy_arms_and_grade_is_each_arm_alone(study):
    """Arms over different question lists (one repeated, one empty) give what each gives alone."""
    model, task, sets = study
    protocol = generation_protocol(task, sets.protocol)
    fail, healthy = list(sets.failure), list(sets.healthy)
    plan = [(None, fail + healthy), ("L1", fail[:3] + fail[:1]), ("L4", []), ("L4 attn", healthy)]
    hooks = (zero_ablation(model, 1, "layer", arm="L1") + zero_ablation(model, 4, "mlp", arm="L4")
             + zero_ablation(model, 4, "attn", arm="L4 attn"))
    with model.hooks(fwd_hooks=hooks):
        got = deploy_arms_and_grade(model, task, protocol, plan)
    alone = [[], zero_ablation(model, 1, "layer"), zero_ablation(model, 4, "mlp"), zero_ablation(model, 4, "attn")]
    for (arm, ids), table, hooks in zip(plan, got, alone):
        with model.hooks(fwd_hooks=hooks):
            want = deploy_and_grade(model, task, protocol, ids)
        pd.testing.assert_frame_equal(table, want, check_exact=True)
    assert got[1]["question_id"].tolist() == fail[:3] + fail[:1] and got[2].empty


def test_silence_sweep_null_intervals_and_flips_against_scipy_and_a_hand_count(study):
    """Every zero row has its control (the same site moved as far along a random direction) beside it; the rates'
    intervals are scipy's Wilson intervals of the counts; flip is the share of answers that differ from 'none'."""
    from scipy.stats import binomtest

    model, task, sets = study
    run = silence_sweep(model, task, sets, layers=[1, 4], components=["mlp"], control_seed=0)
    pq = run.per_question
    plain = pq[pq["condition"] == "none"].set_index("question_id")["deployed_answer"].astype(str)
    for row in run.table[run.table["layer"] >= 0].itertuples():
        for prefix, condition in (("", row.condition), ("control_", row.condition.replace("zero", "control"))):
            mine = pq[pq["condition"] == condition]
            fail = mine[mine["set"] == "failure"]
            k = int(fail["realized"].sum())
            ci = binomtest(k, len(fail)).proportion_ci(method="wilson")
            assert getattr(row, f"{prefix}repair") == k / len(fail)
            assert getattr(row, f"{prefix}repair_lo") == pytest.approx(ci.low, abs=1e-12)
            assert getattr(row, f"{prefix}repair_hi") == pytest.approx(ci.high, abs=1e-12)
            flips = (mine.set_index("question_id")["deployed_answer"].astype(str) != plain).mean()
            assert getattr(row, f"{prefix}flip") == pytest.approx(flips)
    assert run.meta["control_seed"] == 0
    bare = silence_sweep(model, task, sets, layers=[1], components=["mlp"], control_seed=None)
    assert "control_repair" not in bare.table and set(bare.per_question["condition"]) == {"none", "zero L1 mlp"}
