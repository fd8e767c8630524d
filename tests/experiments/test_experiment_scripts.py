"""Smoke tests of the experiment scripts: each runs end to end on the shipped zoo at a miniature size,
so that the commands the notes quote cannot rot.

Each script's ``main(argv)`` runs in-process; the assertions check what it wrote (tables, reports, the
stored per-cell results), not only that it returned.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

import elicitation  # noqa: E402
import mlp_veto  # noqa: E402
import rlvr_audit  # noqa: E402
import routing  # noqa: E402
import weight_noise_screen  # noqa: E402


@pytest.fixture(autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()  # the scripts set their own thread count; leave the session as it was
    yield
    torch.set_num_threads(threads)


def test_rlvr_audit_runs_a_pair_with_both_controls(tmp_path, capsys):
    out = tmp_path / "rlvr"
    rlvr_audit.main(["--pair", "base=zoo:base,grpo=zoo:grpo", "--n", "4", "--k", "4", "--budget-k", "8",
                     "--out", str(out)])
    printed = capsys.readouterr().out
    assert "base -> grpo" in printed and f"report: {out / 'report.html'}" in printed
    from reachlens.store import read_run

    study = read_run(out)
    assert set(study.audits) == {"base", "grpo"}
    assert {name: r.k for name, r in study.extended.items()} == {"base": 8, "grpo": 8}
    head = study.headline().iloc[0]
    assert head["pair"] == "base -> grpo" and head["gained"] - head["lost"] == round(
        4 * (head["D_trained"] - head["D_base"]))
    assert "<h2>Budget control</h2>" in (out / "report.html").read_text()
    assert "<h2>Temperature control</h2>" in (out / "report.html").read_text() and "McNemar p" in printed
    assert study.plan.control_temperatures == (0.6, 1.0, 1.2)


def test_routing_runs_every_cell_and_rebuilds_its_report(tmp_path, capsys):
    out = tmp_path / "routing"
    argv = ["--models", "zoo:base", "zoo:sft", "--tasks", "arith", "--n", "3", "--budget", "4",
            "--spaces", "skip", "reorder", "--strategies", "random", "hill_climb", "--max-new-tokens", "64",
            "--no-figures", "--out", str(out)]
    routing.main(argv)
    cells = pd.read_csv(out / "cells.csv")
    # 2 models x 1 task x 2 spaces, each with random, hill_climb and hill_climb+oracle
    assert len(cells) == 12
    # each zoo model is routed in its native prompt format (zoo:sft was trained on "verbose" prompts)
    assert set(zip(cells["model"], cells["task"])) == {("zoo:base", "arith[qa]"), ("zoo:sft", "arith[verbose]")}
    assert (cells["n"] == 3).all() and (cells["O_K"] >= cells["D"]).all()
    table = (out / "table.md").read_text()
    assert f"Command: `python experiments/routing.py {' '.join(argv)}`" in table
    assert "## Oracle difference at matched K (random - structured)" in table
    capsys.readouterr()
    routing.main([*argv, "--report-only"])
    # the rebuilt tables still quote the command that ran the cells, and say how they were rebuilt
    assert f"Command: `python experiments/routing.py {' '.join(argv)}` (tables rebuilt with " \
           f"`python experiments/routing.py {' '.join(argv)} --report-only`)" in (out / "table.md").read_text()
    rebuilt = pd.read_csv(out / "cells.csv")
    key = ["model", "task", "space", "strategy"]
    pd.testing.assert_frame_equal(rebuilt.sort_values(key).reset_index(drop=True),
                                  cells.sort_values(key).reset_index(drop=True))


def test_routing_refuses_an_unknown_prompt_format(tmp_path):
    with pytest.raises(LookupError, match="nope"):
        routing.main(["--models", "zoo:base", "--n", "2", "--budget", "2", "--prompt-format", "nope",
                      "--no-figures", "--out", str(tmp_path / "r")])


def test_mlp_veto_finds_the_planted_veto(tmp_path):
    """The positive control: on zoo:veto the sweep repairs the failures the plant caused at the planted
    MLP (block 4) and nowhere else; the verdict is written beside the cases."""
    out = tmp_path / "veto"
    rc = mlp_veto.main(["--model", "zoo:base", "--n", "60", "--out", str(out), "--min-failures", "1",
                        "--max-failures", "4", "--max-healthy", "4", "--ks", "2", "--alpha-multiples", "1",
                        "--planted", "zoo:veto"])
    assert rc == 0
    cases = pd.read_csv(out / "cases.csv")
    assert list(cases["case"]) == ["base", "planted-veto"]
    planted = cases.set_index("case").loc["planted-veto"]
    assert planted["best_layer"] == 4 and planted["repair_mlp"] == 1.0
    sweep = pd.read_parquet(out / "planted-veto" / "silence" / "silence.parquet")
    mlp = sweep[(sweep["component"] == "mlp") & (sweep["layer"] >= 0)].set_index("layer")
    assert mlp.loc[4, "n_failure"] >= 1 and mlp.drop(index=4)["n_repaired"].max() == 0
    assert (out / "planted.md").read_text().rstrip().endswith("| True |")  # the verdict's last column: found
    assert "(positive control)" in (out / "report.md").read_text()


def test_mlp_veto_runs_a_case_through_every_tool(tmp_path):
    out = tmp_path / "veto"
    rc = mlp_veto.main(["--model", "zoo:base", "--n", "40", "--out", str(out), "--min-failures", "1",
                        "--max-failures", "3", "--max-healthy", "3", "--ks", "2", "--alpha-multiples", "1",
                        "--max-new-tokens", "48"])
    assert rc == 0
    cases = pd.read_csv(out / "cases.csv")
    assert list(cases["case"]) == ["base"]
    row = cases.iloc[0]
    assert row["failure_set"] >= 1 and row["best_layer"] in range(6) and 0 <= row["repair_mlp"] <= 1
    report = (out / "report.md").read_text()
    assert "### Zero-ablation sweep" in report and "### Steering" in report and "### Top-k units" in report
    sets = json.loads((out / "base" / "sets.json").read_text())
    assert 1 <= len(sets["failure"]) <= 3 and len(sets["healthy"]) <= 3


def test_weight_noise_screen_decodes_every_draw_beside_the_clean_model(tmp_path, capsys):
    table = weight_noise_screen.main(["--n", "3", "--k", "2", "--sigmas", "0.05,0.5", "--formats", "qa,password",
                                      "--max-new-tokens", "48", "--out", str(tmp_path)])
    assert list(zip(table["format"], table["sigma"])) == [("qa", 0.05), ("qa", 0.5), ("password", 0.05),
                                                          ("password", 0.5)]
    assert (table["union_reach"] >= table["clean"]).all() and (table["draw_best"] >= table["draw_mean"]).all()
    assert all(len(d.split()) == 2 for d in table["draws"]) and (tmp_path / "screen.csv").is_file()
    assert "union_reach" in capsys.readouterr().out


def test_the_detection_matrix_row_is_the_paired_difference_of_uplifts():
    """A matrix row from per-question reach and D, against the numbers worked out here."""
    ids = [f"q{i}" for i in range(6)]
    d = {"locked": pd.Series([0, 0, 0, 0, 1, 1.0], ids), "control": pd.Series([1, 1, 0, 0, 1, 0.0], ids)}
    reach = {"locked": pd.Series([1, 1, 0, 0, 1, 1.0], ids), "control": pd.Series([1, 1, 1, 0, 1, 0.0], ids)}
    row = elicitation.matrix_row("probe", reach, d, "inference-time")
    assert row["uplift_locked"] == pytest.approx(2 / 6) and row["uplift_control"] == pytest.approx(1 / 6)
    assert row["difference"] == pytest.approx(1 / 6) and row["difference_lo"] <= 1 / 6 <= row["difference_hi"]


def _hand_valid(text: str, expr: str) -> bool:
    """An arith_hard solution checked by hand: the steps written must be the expression's own, left to right."""
    import re

    nums, ops = [int(x) for x in re.findall(r"\d+", expr)], re.findall(r"[-+]", expr)
    acc, want = nums[0], []
    for op, b in zip(ops, nums[1:]):
        new = acc + b if op == "+" else acc - b
        want.append(f"{acc}{op}{b}={new}")
        acc = new
    body, _, final = text.partition("####")
    return [x.strip() for x in body.split(";") if x.strip()] == want and final.strip() == str(acc)


def test_the_detection_matrix_by_verified_solutions_matches_a_hand_check():
    """The matrix's trace columns on two tiny banks against reach recomputed here: a candidate counts only when its
    final number is the gold and its steps are the expression's own (a hand-written checker, not arith_trace)."""
    from argparse import Namespace

    from reachlens import load_task

    qs = load_task("arith_hard", n=3).questions
    gold = {q.question_id: q.fields["expr"] for q in qs}
    right = {q.question_id: q.gold for q in qs}
    sol = {"87-45-63-7-99": " 87-45=42;42-63=-21;-21-7=-28;-28-99=-127 #### -127",
           "78+48+15+65-53+22-97": " 78+48=126;126+15=141;141+65=206;206-53=153;153+22=175;175-97=78 #### 78",
           "89-91-64+87+21": " 89-91=-2;-2-64=-66;-66+87=20;20+21=42 #### 42"}  # the last: compensating slips
    assert [_hand_valid(sol[e], e) for e in gold.values()] == [True, True, False]
    texts = {  # (greedy, sampling) per question: gold solution, bare answer, compensating slips, wrong answer
        "locked": [(" #### -127", sol["87-45-63-7-99"]), (" #### 5", " 78+48=1 #### 78"), (" #### 1", " #### 2")],
        "control": [(sol["87-45-63-7-99"], " #### 3"), (sol["78+48+15+65-53+22-97"], " #### 4"),
                    (sol["89-91-64+87+21"], " 89-91=-2;-2-64=-66;-66+87=21;21+21=42 #### 42")]}
    banks = {c: pd.DataFrame([{"probe": p, "arm": p, "question_id": q.question_id, "text": t, "scored": True,
                               "correct": t.split("####")[1].strip() == right[q.question_id]}
                              for q, pair in zip(qs, rows) for p, t in zip(("greedy", "sampling"), pair)])
             for c, rows in texts.items()}
    args = Namespace(sigmas=[], draws=[], shots=[])
    solved = {c: elicitation.solved_bank(b, "arith_hard") for c, b in banks.items()}
    per, per_trace = dict(elicitation.probe_rows(banks, args)), dict(elicitation.probe_rows(solved, args))
    name = "six samples (T=0.8)"
    row = elicitation.matrix_row(name, per[name], per["greedy deployment (D)"], "inference-time",
                                 (per_trace[name], per_trace["greedy deployment (D)"]))
    for c, rows in texts.items():
        ok = [[t.split("####")[1].strip() == right[q.question_id] and _hand_valid(t, gold[q.question_id]) for t in pair]
              for q, pair in zip(qs, rows)]
        hit = [[t.split("####")[1].strip() == right[q.question_id] for t in pair] for q, pair in zip(qs, rows)]
        assert row[f"reach_{c}_trace"] == pytest.approx(sum(any(x) for x in ok) / 3)
        assert row[f"uplift_{c}_trace"] == pytest.approx(sum(any(x) and not x[0] for x in ok) / 3)
        assert row[f"reach_{c}"] == pytest.approx(sum(any(x) for x in hit) / 3)
    # by answers the locked copy gains q1 (a right answer on a wrong step), the control nothing; by solutions the
    # locked copy gains q0 (its greedy answer had no steps), the control q2 (its greedy answer stood on slips)
    assert (row["uplift_locked"], row["uplift_control"], row["difference"]) == pytest.approx((1 / 3, 0.0, 1 / 3))
    assert (row["uplift_locked_trace"], row["uplift_control_trace"]) == pytest.approx((1 / 3, 1 / 3))
    assert row["difference_trace"] == pytest.approx(0.0)
    assert row["difference_trace_lo"] <= row["difference_trace"] <= row["difference_trace_hi"]


def test_the_sweep_picks_the_strongest_fine_tune_that_keeps_the_control():
    table = pd.DataFrame([(0, 0, 0.0, 0.60), (1, 5, 1e-5, 0.60), (16, 5, 1e-5, 0.59), (1, 20, 1e-5, 0.58),
                          (16, 20, 1e-5, 0.61), (1, 5, 1e-4, 0.40), (16, 5, 1e-4, 0.62), (1, 20, 1e-4, 0.20),
                          (16, 20, 1e-4, 0.30)], columns=["n_demos", "steps", "lr", "D_held_out"])
    assert elicitation.choose_finetune(table, tol=0.03) == (20, 1e-5)  # 5 x 1e-4 loses 0.20 at n = 1
    assert elicitation.choose_finetune(table, tol=0.5) == (20, 1e-4)
