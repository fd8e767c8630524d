"""A route search, a recognition run and a causal sweep run on the runner (issue 55, item 3).

Each is a job of the runner (:class:`~reachlens.runner.tables_job.TablesJob`): its slices decode anywhere and are
written as parts, so

* the tables of a run cut into many slices equal those of the whole task decoded at once, the way these studies
  decoded before they ran on the runner (the reference is computed here from the lower-level functions: the search
  of every question in lockstep, :func:`compare_modes` of the whole task, each condition decoded alone): every
  route, text, answer, grade and pick exactly, the log-probabilities to 1e-5 (a batch of other rows rounds a
  float32 logit in its last bits);
* ``kill -9`` of the command mid-run, then the same command again, and ``--workers 2`` (two processes) give the
  tables of an uninterrupted run of the same slices in this process, exactly.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from reachlens import ExecConfig, Protocol, load_task, read_run
from reachlens.cli import main
from reachlens.routing import (
    RouteEvaluator,
    RoutingConfig,
    RoutingResult,
    make_space,
    question_table,
    run_routing,
    run_search,
)
from reachlens.selectors import verification_scores
from reachlens.studies.causal import silence_sweep
from reachlens.studies.recognition import FailureRule, RecognitionConfig, TaskSpec, compare_modes, select_sets
from reachlens.studies.recognition_job import recognize
from conftest import kill_after_first_part

TOKENS = 6
GREEDY = Protocol.greedy("arith", max_new_tokens=TOKENS)
CONFIG = RoutingConfig(budget=3)


def assert_same_tables(a, b, *, exact: bool = True) -> None:
    """Every table of runs ``a`` and ``b`` equal: exactly, or (``exact=False``) the float columns to 1e-5."""
    assert set(a.tables()) == set(b.tables())
    for name, df in b.tables().items():
        mine, theirs = a.tables()[name].reset_index(drop=True), df.reset_index(drop=True)
        floats = [] if exact else [c for c in theirs.columns if pd.api.types.is_float_dtype(theirs[c])]
        pd.testing.assert_frame_equal(mine.drop(columns=floats), theirs.drop(columns=floats), check_exact=True,
                                      check_dtype=False, obj=name)
        if floats:
            pd.testing.assert_frame_equal(mine[floats], theirs[floats], check_exact=False, rtol=0, atol=1e-5, obj=name)


# --- routing -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def arith():
    return load_task("arith", n=6)


@pytest.fixture(scope="module")
def lockstep(tiny_model, arith):
    """The search of every question at once (one evaluator, one lockstep), scored: the reference."""
    evaluator = RouteEvaluator(tiny_model, arith, GREEDY, window=CONFIG.window)
    space = make_space("skip", len(tiny_model.blocks))
    candidates = run_search(evaluator, space, "random", CONFIG)
    at = {q.question_id: i for i, q in enumerate(arith.questions)}
    items = [(evaluator.prompts[at[r.question_id]], r.text, None if pd.isna(r.answer) else r.answer)
             for r in candidates.itertuples()]
    candidates["verify_logprob"] = verification_scores(tiny_model, items, CONFIG.verification)
    deployment = evaluator.deployment(range(len(arith)))
    deployed = pd.DataFrame({"question_id": list(at), "realized": [bool(e.correct and e.scored) for e in deployment],
                             "deployed_answer": [e.answer for e in deployment],
                             "deployed_scored": [bool(e.scored) for e in deployment]})
    return candidates, question_table(candidates, deployed, CONFIG.selectors)


def test_a_search_in_slices_equals_the_lockstep_search_of_every_question(tiny_model, arith, lockstep):
    sliced = run_routing(tiny_model, arith, "skip", "random", protocol=GREEDY, config=CONFIG,
                         exec_config=ExecConfig(max_batch_rows=CONFIG.budget * 2))  # three slices of two
    assert_same_tables(sliced, RoutingResult(*lockstep, record=sliced.record), exact=False)


def route_argv(model, out, *extra) -> list[str]:
    return ["route", str(model), "--task", "arith", "--n", "6", "--space", "skip", "--search", "random", "--k", "3",
            "--max-new-tokens", str(TOKENS), "--max-batch-rows", "3", "--out", str(out), *extra]


# --- recognition ---------------------------------------------------------------------------------
MC = TaskSpec("arith_mc", n=6)
MC_GREEDY = Protocol.greedy("arith_mc", max_new_tokens=TOKENS)


@pytest.fixture(scope="module")
def whole_recognition(tiny_model):
    """compare_modes of the whole task at once (the reference), its sets chosen by the rule."""
    result = dataclasses.replace(compare_modes(tiny_model, MC.load(), MC_GREEDY), rule=FailureRule(min_failures=1),
                                 task=MC)
    return dataclasses.replace(result, sets=select_sets(result, FailureRule(min_failures=1), MC))


def test_a_recognition_run_in_slices_equals_the_whole_task_at_once(tiny_model, whole_recognition):
    sliced = recognize(tiny_model, MC.load(), MC_GREEDY, RecognitionConfig(max_batch_rows=2),
                       rule=FailureRule(min_failures=1), spec=MC)
    assert_same_tables(sliced, whole_recognition, exact=False)
    assert sliced.sets.failure == whole_recognition.sets.failure
    assert sliced.sets.healthy == whole_recognition.sets.healthy


def recognize_argv(model, out, *extra) -> list[str]:
    return ["recognize", str(model), "--task", "arith_mc", "--n", "6", "--max-new-tokens", str(TOKENS),
            "--max-batch-rows", "1", "--min-failures", "1", "--out", str(out), *extra]


# --- a silencing sweep ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sets(tiny_model, whole_recognition, tmp_path_factory):
    """The sets of the reference recognition run, with a healthy panel made up (the tiny model realizes nothing),
    saved where ``--sets`` reads them."""
    rest = tuple(q for q in whole_recognition.questions["question_id"] if q not in whole_recognition.sets.failure)
    made = dataclasses.replace(whole_recognition.sets, healthy=rest[:3],
                               config=dataclasses.replace(whole_recognition.sets.config, max_batch_rows=4))
    path = made.save(tmp_path_factory.mktemp("sets") / "sets.json")
    return made, path


def test_a_sweep_in_slices_equals_each_condition_decoded_alone(tiny_model, sets):
    made, _ = sets
    kw = {"layers": [0, 2], "components": ["mlp", "layer"]}
    sliced = silence_sweep(tiny_model, MC.load(), made, **kw)  # 5 conditions, 4 rows a slice: one question each
    alone = silence_sweep(tiny_model, MC.load(), made, one_at_a_time=True, **kw)
    assert sliced.meta == alone.meta
    assert_same_tables(sliced, alone, exact=False)


def silence_argv(model, sets_path, out, *extra) -> list[str]:
    return ["silence", str(model), "--sets", str(sets_path), "--layers", "0,2", "--sites", "mlp,layer",
            "--max-batch-rows", "5", "--out", str(out), *extra]


# --- kill -9 and resume, and two workers, for each ------------------------------------------------
def _search(request):
    whole = run_routing(request.getfixturevalue("tiny_model"), request.getfixturevalue("arith"), "skip", "random",
                        protocol=GREEDY, config=CONFIG, exec_config=ExecConfig(max_batch_rows=3))  # the command's slices
    return whole, route_argv, lambda run: not (run.location / "parts").exists()


def _recognition(request):
    whole = recognize(request.getfixturevalue("tiny_model"), MC.load(), MC_GREEDY,
                      RecognitionConfig(max_batch_rows=1), rule=FailureRule(min_failures=1), spec=MC)
    return whole, recognize_argv, lambda run: (run.sets.failure, run.sets.healthy) == (whole.sets.failure,
                                                                                         whole.sets.healthy)


def _sweep(request):
    made, path = request.getfixturevalue("sets")
    five = dataclasses.replace(made, config=dataclasses.replace(made.config, max_batch_rows=5))  # the command's slices
    whole = silence_sweep(request.getfixturevalue("tiny_model"), MC.load(), five, layers=[0, 2],
                          components=["mlp", "layer"])
    return whole, lambda model, out, *extra: silence_argv(model, path, out, *extra), lambda run: run.meta == whole.meta


@pytest.mark.parametrize("case", [_search, _recognition, _sweep], ids=["search", "recognition", "sweep"])
def test_kill_9_mid_run_then_resume_and_two_workers_equal_an_uninterrupted_run(case, tiny_dir, tmp_path, capsys,
                                                                               request):
    whole, argv, same = case(request)
    kill_after_first_part(argv(tiny_dir, tmp_path / "cut"), tmp_path / "cut")
    assert main(argv(tiny_dir, tmp_path / "cut")) == 0
    assert main(argv(tiny_dir, tmp_path / "two", "--workers", "2")) == 0
    capsys.readouterr()
    for name in ("cut", "two"):
        run = read_run(tmp_path / name)
        assert run.record.status == "complete" and same(run)
        assert_same_tables(run, whole)
