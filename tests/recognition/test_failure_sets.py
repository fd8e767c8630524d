"""Failure-set selection is deterministic and saved; arith_mc options; the causal sweeps' bookkeeping."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from reachlens.store import read_run
from reachlens.errors import ReachlensError
from reachlens.protocol import Protocol
from reachlens.studies.causal import best_layer, outcome, silence_sweep, steer_sweep, units_sweep
from reachlens.studies.recognition import (
    EvalSets,
    FailureRule,
    FailureSetTooSmall,
    RecognitionConfig,
    RecognitionResult,
    TaskSpec,
    compare_modes,
    select_sets,
)
from reachlens.tasks import ARITH_ALPHABET
from reachlens.tasks.arith_mc import load_arith_mc


def _result(rec, gen, scored=None) -> RecognitionResult:
    n = len(rec)
    q = pd.DataFrame({
        "question_id": [f"q{i}" for i in range(n)], "gold": "1", "gold_index": 0, "rec_choice": "A",
        "rec_correct": rec, "rec_choice_norm": "A", "rec_correct_norm": [not r for r in rec], "rec_margin": 0.0,
        "deployed_text": "", "deployed_answer": None, "realized": gen, "deployed_scored": scored or [True] * n,
        "deployed_finish": "stop",
    })
    return RecognitionResult(Protocol.greedy("arith_mc"), RecognitionConfig(), {"spec": "m", "fingerprint": "f"},
                             pd.DataFrame(), q)


def test_selection_follows_the_rule_in_task_order():
    res = _result(rec=[True, True, False, True, True, True], gen=[False, True, False, False, True, False],
                  scored=[True, True, True, True, True, False])
    sets = select_sets(res, FailureRule(min_failures=2))
    assert sets.failure == ("q0", "q3")  # q5's generation was not graded: excluded, not counted wrong
    assert sets.healthy == ("q1", "q4")
    assert sets.counts["n_unscored_deployed"] == 1
    capped = select_sets(res, FailureRule(min_failures=1, max_failures=1, max_healthy=1))
    assert capped.failure == ("q0",) and capped.healthy == ("q1",)
    norm = select_sets(res, FailureRule(metric="acc_norm", min_failures=1))
    assert norm.failure == ("q2",)
    with pytest.raises(FailureSetTooSmall, match="only 2 of 6 questions .* at least 3"):
        select_sets(res, FailureRule(min_failures=3))


def test_sets_round_trip_through_json(tmp_path):
    res = dataclasses.replace(_result([True, True], [False, True]), protocol=Protocol.greedy("arith_mc", stop=("\n",)))
    sets = select_sets(res, FailureRule(min_failures=1), TaskSpec("arith_mc", n=2))
    path = sets.save(tmp_path / "sets.json")
    assert EvalSets.load(tmp_path) == EvalSets.load(path) == sets
    with pytest.raises(FileNotFoundError, match="reachlens recognize"):
        EvalSets.load(tmp_path / "none.json")


def test_selection_on_a_model_is_deterministic(tiny_model):
    task = load_arith_mc(n_test=10)
    greedy = Protocol.greedy("arith_mc", max_new_tokens=12)
    a = select_sets(compare_modes(tiny_model, task, greedy), FailureRule(min_failures=1))
    b = select_sets(compare_modes(tiny_model, task, greedy), FailureRule(min_failures=1))
    assert a == b and a.failure
    assert a.model["fingerprint"] != "unknown" and a.config.recognition_format == "qa"


def test_arith_mc_options_are_deterministic_and_plausible():
    a, b = load_arith_mc(n_test=40), load_arith_mc(n_test=40)
    assert a.questions == b.questions
    for q in a.questions:
        assert len(q.choices) == 4 and len(set(q.choices)) == 4
        answers = [c.rsplit("#### ", 1)[1] for c in q.choices]
        assert len(set(answers)) == 4 and answers[q.fields["gold_index"]] == q.gold
        assert " " + q.choices[q.fields["gold_index"]] == q.solution
        assert set("".join(q.choices)) <= set(ARITH_ALPHABET)
    assert {q.fields["gold_index"] for q in a.questions} == {0, 1, 2, 3}  # shuffled
    assert [q.question_id for q in a.questions][:3] == ["arith-test-00000", "arith-test-00001", "arith-test-00002"]


def test_best_layer_is_repair_net_of_breaks():
    t = pd.DataFrame({"layer": [-1, 0, 1, 2, 0], "component": ["none", "mlp", "mlp", "mlp", "attn"],
                      "repair": [0, 0.5, 0.6, 0.6, 0.9], "break": [0, 0.0, 0.3, 0.1, 0.0]})
    assert best_layer(t) == 0  # 0.5 - 0.0 beats 0.6 - 0.1 and 0.6 - 0.3
    assert best_layer(t, "attn") == 0


@pytest.fixture(scope="module")
def sweep_setup(tiny_model):
    """Sets on the tiny model: its generations are all wrong, so the healthy panel is made up here
    (ids only) to exercise the bookkeeping; the sweeps' numbers are not meaningful on a random model."""
    task = load_arith_mc(n_test=6)
    res = compare_modes(tiny_model, task, Protocol.greedy("arith_mc", max_new_tokens=10))
    sets = select_sets(res, FailureRule(min_failures=1))
    rest = tuple(q for q in res.questions["question_id"] if q not in sets.failure)
    return task, dataclasses.replace(sets, healthy=rest[:2]), res


def test_silence_sweep_table(tiny_model, sweep_setup):
    task, sets, res = sweep_setup
    sweep = silence_sweep(tiny_model, task, sets, layers=[0, 2], components=["mlp", "layer"])
    assert sweep.table["condition"].tolist() == ["none", "zero L0 mlp", "zero L0 layer", "zero L2 mlp", "zero L2 layer"]
    base = sweep.table.iloc[0]
    assert base.repair == 0.0 and base.n_failure == len(sets.failure)  # unhooked: the failures still fail
    none = sweep.per_question[sweep.per_question.condition == "none"].set_index("question_id")
    again = res.questions.set_index("question_id").loc[none.index]
    assert (none["deployed_text"] == again["deployed_text"]).all()  # same greedy text as when the sets were chosen
    with pytest.raises(ReachlensError, match="layer 5 is out of range"):
        silence_sweep(tiny_model, task, sets, layers=[5])


def test_steer_and_units_sweeps(tiny_model, sweep_setup, tmp_path):
    task, sets, _ = sweep_setup
    steer = steer_sweep(tiny_model, task, sets, 1, alphas=[0.0, 2.0])
    zero = steer.table.iloc[0]
    assert zero.rescue == 0.0 and steer.meta["direction_source"] == "mean_difference"
    units = units_sweep(tiny_model, task, sets, 1, ks=[4, 128])
    assert units.table["k"].tolist() == [4, 128] and len(units.extra["ranking"]) == 128
    # silencing all 128 units is the whole-MLP ablation, so it repairs what the block does
    assert units.table.iloc[1].repair == units.table.iloc[1].block_repair
    units.save(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} >= {"units.parquet", "units_per_question.parquet",
                                                    "units_ranking.parquet", "run.json"}
    again = read_run(tmp_path)
    assert again.kind == "units" and again.meta == units.meta
    pd.testing.assert_frame_equal(again.extra["ranking"], units.extra["ranking"])
    other = dataclasses.replace(sets, model={"spec": "x", "fingerprint": "0"})
    with pytest.raises(ReachlensError, match="chosen on 'x'"):
        silence_sweep(tiny_model, task, other)


def test_outcome_counts():
    pq = pd.DataFrame({"set": ["failure", "failure", "healthy"], "realized": [True, False, False]})
    got = outcome(pq)
    assert {k: got[k] for k in ("repair", "break", "n_repaired", "n_failure", "n_broken", "n_healthy")} == {
        "repair": 0.5, "break": 1.0, "n_repaired": 1, "n_failure": 2, "n_broken": 1, "n_healthy": 1}
    z2 = 1.959963984540054 ** 2  # the 95 % Wilson interval of 1 in 2, and of 1 in 1, by its formula
    half = 1.959963984540054 * (0.25 / 2 + z2 / 16) ** 0.5 / (1 + z2 / 2)
    assert got["repair_lo"] == pytest.approx(0.5 - half) and got["repair_hi"] == pytest.approx(0.5 + half)
    assert got["break_lo"] == pytest.approx(1 / (1 + z2)) and got["break_hi"] == pytest.approx(1.0)
