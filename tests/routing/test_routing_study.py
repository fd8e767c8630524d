"""One routing cell end to end on the tiny model: tables, storage, refusal, and the CLI."""

from __future__ import annotations

import dataclasses
import json

import pytest

from reachlens.cli.main import main
from reachlens.errors import ReachlensError
from reachlens.protocol import Protocol, ProtocolMismatch
from reachlens.routing import RouteEvaluator, RoutingConfig, RoutingResult, run_routing
from reachlens.tasks import load_task

CONFIG = RoutingConfig(budget=5)
GREEDY = Protocol.greedy("arith", max_new_tokens=8)


@pytest.fixture(scope="module")
def task():
    return load_task("arith", n=3)


def test_run_routing_tables_and_summary(tiny_model, task, tmp_path):
    r = run_routing(tiny_model, task, "native", "genetic", protocol=GREEDY, config=CONFIG, out=tmp_path / "cell")
    assert len(r.candidates) == 15 and set(r.candidates["question_id"]) == {q.question_id for q in task.questions}
    assert {"verify_logprob", "objective", "text", "route"} <= set(r.candidates.columns)
    assert list(r.questions["question_id"]) == [q.question_id for q in task.questions]
    s = r.summary()
    assert s["evaluations"] == 15 and s["budget"] == 5 and s["strategy"] == "genetic" and s["space_name"] == "native"
    assert 0 <= s["D"] <= s["O_K"] <= 1  # the identity route is in every pool
    assert {"realized", "reachable", "deployed_answer"} <= set(r.questions.columns)
    loaded = RoutingResult.load(tmp_path / "cell")
    assert loaded.record == r.record and len(loaded.candidates) == 15
    stored = json.loads((tmp_path / "cell" / "summary.json").read_text())
    assert stored["evaluations"] == 15
    with pytest.raises(ProtocolMismatch, match="holds another run"):
        run_routing(tiny_model, task, "skip", "genetic", protocol=GREEDY, config=CONFIG, out=tmp_path / "cell")
    _verified_reach(r, task)
    _lucky_null(r, task)


def _lucky_null(r: RoutingResult, task) -> None:
    """The cell's lucky-guess null (issue 56) with its golds built again, on hand-written answers: the first and third
    questions' routes answer each other's gold (339, 315: three digits), the second's (-16, alone in its kind, so
    pooled with them) nothing. Over the two derangements of the three, each question borrows either other's gold
    with probability 1/2: expected hits 1/2, 0, 1/2, and every derangement hits exactly one question."""
    from reachlens.cli.cmd_show import format_run

    golds = [q.gold for q in task.questions]
    assert golds == ["339", "-16", "315"]
    answer = dict(zip([q.question_id for q in task.questions], ["315", "7", "339"]))
    c = r.candidates.assign(answer=r.candidates["question_id"].map(answer), scored=True)
    s = dataclasses.replace(r, candidates=c).summary()
    assert s["O_K_null"] == pytest.approx(1 / 3) and s["O_K_null_p95"] == pytest.approx(1 / 3)
    assert s["O_K_minus_null"] == pytest.approx(r.questions["reachable"].astype(float).mean() - 1 / 3)
    assert s["O_K_minus_null_ci"][0] <= s["O_K_minus_null"] <= s["O_K_minus_null_ci"][1]
    assert "lucky-guess null O_5^null=0.333 (95th pct 0.333)" in format_run(r.record, s)


def _verified_reach(r: RoutingResult, task) -> None:
    """The cell's verified reach (issue 56) on hand-written pools: the gold worked solution solves, a right answer
    on a slipped solution or with no steps does not; against a direct count."""
    q = {x.question_id: x for x in task.questions}

    def slipped(solution: str) -> str:
        body, final = solution.split(" #### ")
        lhs, c = body.split(";")[0].split("=")
        return ";".join([f"{lhs}={int(c) + 1}", *body.split(";")[1:]]) + " #### " + final

    kinds = [lambda x: x.solution, lambda x: slipped(x.solution), lambda x: f" #### {x.gold}"]
    c = r.candidates.sort_values(["question_id", "candidate_idx"]).reset_index(drop=True)
    pick = [(i + j) % 3 if i != 1 else 1 + j % 2 for i, j in zip(c["question_id"].map(
        {qid: n for n, qid in enumerate(q)}), c.groupby("question_id").cumcount())]
    c["text"] = [kinds[k](q[qid]) for k, qid in zip(pick, c["question_id"])]
    c["correct"] = True
    s = dataclasses.replace(r, candidates=c).summary()
    solves = {qid: any(k == 0 for k, i in zip(pick, c["question_id"]) if i == qid) for qid in q}
    assert s["O_K_trace"] == pytest.approx(sum(solves.values()) / len(q)) and 0 < s["O_K_trace"] < 1
    first = c.groupby("question_id").head(1)
    graded = r.questions.set_index("question_id")["deployed_scored"]
    want = [k == 0 for k, i, idx in zip(pick, c["question_id"], c.index) if idx in first.index and graded[i]]
    assert s["D_trace"] == pytest.approx(sum(want) / len(want))


def test_a_shared_evaluator_decodes_each_pair_once(tiny_model, task):
    ev = RouteEvaluator(tiny_model, task, GREEDY)
    a = run_routing(tiny_model, task, "skip", "random", config=CONFIG, evaluator=ev)
    spent = ev.n_decoded
    b = run_routing(tiny_model, task, "skip", "random", config=CONFIG, evaluator=ev)
    assert ev.n_decoded == spent  # same seed, same routes: nothing new to decode
    assert a.candidates.equals(b.candidates)
    with pytest.raises(ReachlensError, match="the evaluator decodes with"):
        run_routing(tiny_model, task, "skip", "random", protocol=Protocol.greedy("arith", max_new_tokens=9), config=CONFIG,
                    evaluator=ev)


def test_cli_route(tiny_dir, tmp_path, capsys):
    out = tmp_path / "run"
    rc = main([
        "route", str(tiny_dir), "--task", "arith", "--n", "2", "--space", "reorder", "--search", "mcts",
        "--k", "4", "--max-new-tokens", "6", "--out", str(out),
    ])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "O_4=" in printed and "majority" in printed and "gap recovery" in printed
    assert "lucky-guess null: O_4^null=" in printed  # arith is built again for its golds
    assert (out / "candidates.parquet").is_file() and (out / "summary.json").is_file()


@pytest.mark.parametrize("args, message", [
    (["--space", "loop", "--search", "mcts"], "unknown route space 'loop'; known: native, reorder, skip"),
    (["--space", "skip", "--search", "beam"], "unknown --search 'beam'; known: genetic, hill_climb, mcts, random"),
    (["--space", "skip", "--search", "mcts", "--window", "3"], "the skip space has no option(s) ['window']"),
])
def test_cli_route_bad_arguments_exit_2(tiny_dir, tmp_path, capsys, args, message):
    rc = main(["route", str(tiny_dir), "--task", "arith", "--n", "2", "--k", "4", "--out", str(tmp_path / "x"),
               *args])
    assert rc == 2
    assert message in capsys.readouterr().err


def test_prefetch_covers_a_whole_space(tiny_model, task):
    from reachlens.routing import SkipSpace

    ev = RouteEvaluator(tiny_model, task, GREEDY)
    space = SkipSpace(3, max_skip=1)
    ev.prefetch(list(space.enumerate()))
    assert ev.n_decoded == len(task) * space.size()
    r = run_routing(tiny_model, task, space, "hill_climb", config=CONFIG, evaluator=ev)
    assert ev.n_decoded == len(task) * space.size()  # every evaluation was already decoded
    assert len(r.candidates) == 15  # but each was still charged against the budget


@pytest.mark.parametrize("strategy", ["random", "mcts"])
def test_a_search_decoded_in_one_batch_equals_one_route_at_a_time(tiny_model, strategy, monkeypatch):
    """The search's answers decode as rows on their routes in one engine call per round; decoded instead one
    ``generate(route=r)`` per distinct route (what reachlens did before), the candidates are the same: every
    route, text, answer and grade, the confidences to float32 rounding (another batch composition)."""
    import pandas as pd

    import reachlens.routing.evaluation as evaluation
    from reachlens.engine import Row, generate

    def one_call_per_route(model, prompts, requests, protocol, **kwargs):
        out = [None] * len(requests)
        for route in dict.fromkeys(tuple(r.route) for r in requests):
            members = [i for i, r in enumerate(requests) if tuple(r.route) == route]
            comps = generate(model, prompts, [Row(requests[i].prompt, requests[i].seed) for i in members], protocol,
                             route=route, **kwargs)
            for i, c in zip(members, comps):
                out[i] = c
        return out

    task = load_task("arith", n=6)
    config = RoutingConfig(budget=8)
    batched = run_routing(tiny_model, task, "native", strategy, protocol=GREEDY, config=config).candidates
    assert batched.groupby("candidate_idx")["route"].nunique().max() > 1  # rounds mix routes
    monkeypatch.setattr(evaluation, "generate_along_routes", one_call_per_route)
    apart = run_routing(tiny_model, task, "native", strategy, protocol=GREEDY, config=config).candidates
    floats = ["mean_logprob", "lowest_window_logprob", "objective", "verify_logprob"]
    pd.testing.assert_frame_equal(batched.drop(columns=floats), apart.drop(columns=floats))
    pd.testing.assert_frame_equal(batched[floats], apart[floats], check_exact=False, rtol=0, atol=1e-4)
