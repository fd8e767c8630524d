"""A probe run on the tiny model: its candidates are what the audit, the route search and each intervention
decoded alone give; it is deterministic, resumes after ``kill -9`` to the same bank, and its report renders."""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess

import pandas as pd
import pytest
from conftest import kill_after_first_part

from reachlens import ExecConfig, Protocol, audit, load_task, probe, read_run
from reachlens.cli import main
from reachlens.engine import Row, generate, intervention_seed
from reachlens.grading import question_grader
from reachlens.interventions import EmbeddingNoise, Graft, embedding_noise, grafting, steering
from reachlens.probes import BANK_COLUMNS, parse_probe
from reachlens.routing import RoutingConfig, run_routing

N, TOKENS = 3, 8
GREEDY = Protocol.greedy("arith", max_new_tokens=TOKENS)
EXEC = ExecConfig(max_batch_rows=8)
SPECS = ["sampling:k=3:temperature=1", "graft:kind=zero,noise:layer=1", "graft:kind=zero,noise:layer=1:placebo=true",
         "embedding_noise:ratio=0.5:k=1", "steer:layer=1:alphas=-2,2", "routes:budget=2"]


@pytest.fixture(scope="module")
def task():
    return load_task("arith", n=N)


@pytest.fixture(scope="module")
def run(tiny_model, task, tmp_path_factory):
    return probe(tiny_model, task, SPECS, protocol=GREEDY, exec_config=EXEC, out=tmp_path_factory.mktemp("p") / "run")


def rows_of(bank: pd.DataFrame, probe_label: str) -> pd.DataFrame:
    return bank[bank["probe"] == probe_label].reset_index(drop=True)


def test_the_bank_holds_every_candidate_once_with_its_compute_and_its_kind(run):
    bank = run.candidates
    assert list(bank.columns) == BANK_COLUMNS and not bank.duplicated(["question_id", "probe", "candidate_idx"]).any()
    sizes = bank.groupby("probe").size().to_dict()
    assert sizes == {"greedy": N, **{parse_probe(s).label: N * parse_probe(s).budget for s in SPECS}}
    assert (bank["n_tokens"].between(1, TOKENS)).all()
    assert set(bank.loc[bank["intervention"], "probe"].map(lambda p: p.split(":")[0])) == {"graft", "embedding_noise",
                                                                                            "steer"}
    assert run.record.kind == "probe" and run.record.status == "complete"
    pd.testing.assert_frame_equal(read_run(run.location).candidates, bank)


def test_sampling_candidates_are_the_audit_samples_and_greedy_is_its_deployment(tiny_model, task, run):
    result = audit(tiny_model, task, Protocol("arith", k=3, temperature=1.0, max_new_tokens=TOKENS), exec_config=EXEC)
    mine = rows_of(run.candidates, "sampling:k=3:temperature=1")
    want = result.samples
    assert mine["candidate_idx"].tolist() == want["candidate_idx"].tolist()
    for col in ("text", "answer", "correct", "finish_reason", "n_tokens"):
        assert mine[col].tolist() == want[col].tolist(), col
    # decoded without the deployment's row beside them: the same tokens, log-probabilities up to float32 rounding
    # of another batch
    assert mine["mean_logprob"].to_numpy() == pytest.approx(want["mean_logprob"].to_numpy(), rel=1e-5, abs=1e-6)
    greedy = rows_of(run.candidates, "greedy")
    assert greedy["text"].tolist() == result.questions["deployed_text"].tolist()
    assert greedy["correct"].tolist() == result.questions["realized"].tolist()


def test_routes_candidates_are_the_route_search(tiny_model, task, run):
    routed = run_routing(tiny_model, task, "skip", "random", protocol=GREEDY, config=RoutingConfig(budget=2))
    mine, want = rows_of(run.candidates, "routes:budget=2"), routed.candidates
    assert mine["detail"].tolist() == ("route=" + want["route"]).tolist()
    for col in ("text", "answer", "correct", "mean_logprob"):
        assert mine[col].tolist() == want[col].tolist(), col


def alone(model, task, question_id: str, hooks) -> str:
    """The greedy completion of one question with one intervention on every row, in a call of its own."""
    q = next(q for q in task.questions if q.question_id == question_id)
    with model.hooks(fwd_hooks=hooks):
        return generate(model, [task.prompt(q)], [Row(0)], GREEDY.resolved(task))[0].text


def test_every_arm_equals_its_intervention_decoded_alone(tiny_model, task, run):
    bank = run.candidates
    v = parse_probe("steer:layer=1:alphas=-2,2").vector(tiny_model, 0)
    assert float(v.norm()) == pytest.approx(1.0)
    first = {q.question_id for q in task.questions[:2]}
    for r in bank[bank["intervention"] & bank["question_id"].isin(first)].itertuples():
        family = r.probe.split(":")[0]
        seed = intervention_seed(0, r.question_id, r.candidate_idx)
        if family == "graft":
            kind = r.arm.split(":graft:" if r.arm.startswith("placebo") else "graft:")[1].split("@")[0]
            pos = int(r.detail.removeprefix("pos=")) if r.detail else -1
            hooks = grafting(tiny_model, Graft(kind, 1, position=pos, seed=seed if kind == "noise" else 0))
        elif family == "embedding_noise":
            hooks = embedding_noise(tiny_model, EmbeddingNoise(0.5, seed))
        else:
            hooks = steering(tiny_model, 1, v, float(r.arm.split("alpha=")[1]), "resid_post")
        assert r.text == alone(tiny_model, task, r.question_id, hooks), (r.probe, r.arm, r.question_id)
        q = next(q for q in task.questions if q.question_id == r.question_id)
        answer = r.answer if isinstance(r.answer, str) else None  # a missing answer is stored as NaN
        assert answer == question_grader(str(GREEDY.resolved(task).grader), q).grade(r.text, q.gold).answer


def test_a_placebo_grafts_at_a_seeded_position_inside_the_prompt(run, tiny_model, task):
    placebo = rows_of(run.candidates, "graft:kind=zero,noise:layer=1:placebo=true")
    n_tokens = {q.question_id: len(tiny_model.tokenizer(task.prompt(q))["input_ids"]) for q in task.questions}
    positions = [int(d.removeprefix("pos=")) for d in placebo["detail"]]
    assert all(1 <= p <= n_tokens[q] - 2 for p, q in zip(positions, placebo["question_id"]))
    assert len(set(positions)) > 1


def test_the_same_run_twice_gives_the_same_bank(tiny_model, task, run):
    again = probe(tiny_model, task, SPECS, protocol=GREEDY, exec_config=EXEC)
    pd.testing.assert_frame_equal(again.candidates, run.candidates)
    assert again.summary() == run.summary()


def test_a_run_killed_with_sigkill_resumes_to_the_same_bank(tiny_dir, run, tmp_path):
    out = tmp_path / "killed"
    argv = ["probe", str(tiny_dir), "--task", "arith", "--n", str(N), "--max-new-tokens", str(TOKENS),
            "--max-batch-rows", str(EXEC.max_batch_rows), "--out", str(out), *sum((["--probe", s] for s in SPECS), [])]
    kill_after_first_part(argv, out)
    assert main(argv) == 0
    resumed = read_run(out)
    pd.testing.assert_frame_equal(resumed.candidates, run.candidates)
    assert not (out / "parts").exists()


def test_the_cli_refuses_a_bad_spec_in_one_line(tiny_dir, tmp_path, capsys):
    code = main(["probe", str(tiny_dir), "--task", "arith", "--n", "2", "--probe", "graft:kind=zero:layr=1",
                 "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "unknown key 'layr' for graft" in err
    assert not (tmp_path / "x").exists()


def test_the_report_names_interventions_and_every_section(run, tmp_path, chromium):
    from reachlens.report import report_run

    html_path, md_path = report_run(run, tmp_path)
    page = html_path.read_text()
    for section in ("Reach", "Selectors", "Overlap", "Recovery", "Budget-matched", "Placebo"):
        assert f"<h2>{section}</h2>" in page
    assert "[intervention]" in page and "graft:kind=zero,noise:layer=1 [intervention]" in md_path.read_text()
    md = md_path.read_text()  # arith has a trace grader: each comparison by verified solutions beside its answers
    for section, column in (("Recovery", "rate_trace"), ("Budget-matched", "majority_trace"), ("Placebo", "dO_trace")):
        table = md.split(f"## {section}\n")[1].split("\n## ")[0]
        assert f"| {column} " in table and "each column c_trace beside c" in table
    from reachlens.report.probe_report import CAPTIONS

    assert page.count('class="plotly-graph-div"') == len(CAPTIONS) == 4  # reach, selection, overlap, budget-matched
    for caption in CAPTIONS.values():
        assert caption.startswith("One ") and f"<p class=note>{html.escape(caption)}</p>" in page
    shot = tmp_path / "report.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'chrome'}",
                    "--window-size=1400,4000", "--virtual-time-budget=10000", f"--screenshot={shot}",
                    html_path.as_uri()], capture_output=True, timeout=180)
    assert shot.stat().st_size > 50_000  # a drawn page, not a blank one
    if os.environ.get("REACHLENS_SCREENSHOT_DIR"):
        shutil.copy(shot, os.environ["REACHLENS_SCREENSHOT_DIR"])


def test_show_prints_the_comparisons_by_verified_solutions_beside_the_answers(run, capsys):
    assert main(["show", str(run.location)]) == 0
    lines = capsys.readouterr().out.splitlines()
    for key, pair in (("recovery", ("rate", "rate_trace")), ("budget_matched", ("O", "O_trace")),
                      ("placebo", ("O_graft", "O_graft_trace"))):
        header = lines[lines.index(f"  {key}:") + 1]
        names = [c.strip() for c in header.split("|")]
        assert names.index(pair[1]) > names.index(pair[0])


def test_arm_hooks_keep_prefix_sharing_on(tiny_model):
    from reachlens.engine.hooks import user_hooks
    from reachlens.probes.activation import arm_hooks

    probes = [parse_probe(s) for s in SPECS[1:5]]
    keyed = [(p, {c.key: c.value for c in p.candidates("q", 12, 0)}) for p in probes]
    with tiny_model.hooks(fwd_hooks=arm_hooks(tiny_model, keyed, GREEDY)):
        assert user_hooks(tiny_model) == []  # every hook per-arm: the engine shares prefixes under them


def test_a_finished_run_given_again_is_read_not_decoded(tiny_model, task, run, monkeypatch):
    from reachlens.probes.job import ProbeShard

    def refuse(*args, **kwargs):
        raise AssertionError("decoded a finished run again")

    monkeypatch.setattr(ProbeShard, "decode", refuse)
    import reachlens.probes.run as run_module

    computed = []
    tables = run_module.probe_tables
    monkeypatch.setattr(run_module, "probe_tables", lambda *a, **k: computed.append(1) or tables(*a, **k))
    again = probe(tiny_model, task, SPECS, protocol=GREEDY, exec_config=EXEC, out=run.location)
    pd.testing.assert_frame_equal(again.candidates, run.candidates)
    assert again.summary()["D"] == json.loads((run.location / "summary.json").read_text())["D"]
    assert len(computed) == 1, "the summary's tables (bootstraps, budget-matched subsets) were computed again"
