"""The viewer's question sets of the runs that are not audits (issue 58, item 2): a probe run's candidates by probe
and arm with the selectors' picks, a routing run's routes, a recognition run's options, an elicitation's pairs;
the static export; the report's links into the viewer. Runs made by the CLI on the tiny model; every figure on a
page read back against the run's parquet tables with pandas."""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pandas as pd
import pytest

from reachlens import Protocol
from reachlens.cli import main
from reachlens.errors import ReachlensError
from reachlens.store import RunDir, RunRecord, read_run
from reachlens.studies import AuditResult
from reachlens.tasks import load_task
from reachlens.view import questions_of
from reachlens.view import render
from reachlens.view.query import find_set
from reachlens.view.source import question_sets

N = 4


@pytest.fixture(scope="module")
def runs(tiny_dir, tmp_path_factory) -> Path:
    """A probe run (sampling, a graft and its placebo), a routing run and a recognition run of the tiny model."""
    root = tmp_path_factory.mktemp("runs")
    model = str(tiny_dir)
    assert main(["probe", model, "--task", "arith", "--n", str(N), "--max-new-tokens", "6",
                 "--probe", "sampling:k=5:temperature=1", "--probe", "graft:kind=zero,noise:layer=1",
                 "--probe", "graft:kind=zero,noise:layer=1:placebo=true", "--out", str(root / "probe")]) == 0
    assert main(["route", model, "--task", "arith", "--n", "3", "--space", "skip", "--search", "random",
                 "--k", "4", "--max-new-tokens", "6", "--out", str(root / "route")]) == 0
    assert main(["recognize", model, "--task", "arith_mc", "--n", "6", "--max-new-tokens", "6",
                 "--min-failures", "1", "--out", str(root / "recognize")]) in (0, 2)
    return root


def _cells(fragment: str, selector: str) -> list[list[str]]:
    """The text of each cell of each row of the table whose opening tag holds ``selector``."""
    table = fragment[fragment.index(selector):]
    table = table[: table.index("</table>")]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table.split("<tbody>", 1)[1], re.S)
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
            for r in rows]


def test_a_probe_run_s_list_is_its_bank_read_with_pandas(runs) -> None:
    bank = pd.read_parquet(runs / "probe" / "candidates.parquet")
    got = questions_of(runs / "probe")
    hit = bank["correct"] & bank["scored"]
    family = bank["probe"].map(lambda p: "placebo" if "placebo=true" in p else p.split(":")[0])
    greedy = bank[bank["probe"] == "greedy"].set_index("question_id")
    assert got["question_id"].tolist() == greedy.index.tolist()
    assert got["gold"].tolist() == [q.gold for q in load_task("arith", n=N).questions]
    assert got["deployed_answer"].fillna("-").tolist() == greedy["answer"].fillna("-").tolist()
    assert got["realized"].tolist() == (greedy["correct"] & greedy["scored"]).tolist()
    for fam in ("sampling", "graft", "placebo"):
        want = hit[family == fam].groupby(bank["question_id"]).sum()
        assert got.set_index("question_id")[f"{fam}_n_correct"].to_dict() == want.to_dict()
    # "which questions did only the grafts reach?": the family filter the page offers, against pandas
    only = 'graft_reached and not realized and not sampling_reached and not placebo_reached'
    per = hit.groupby([bank["question_id"], family]).any().unstack(fill_value=False)
    want = per[per["graft"] & ~per["sampling"] & ~per["placebo"] & ~per["greedy"]].index.tolist()
    assert questions_of(runs / "probe", filter=only)["question_id"].tolist() == want
    assert only in render.controls_fragment(find_set(question_sets([runs / "probe"]), None))


def test_a_probe_question_shows_each_probe_and_arm_grouped_with_the_selectors_picks(runs) -> None:
    bank = pd.read_parquet(runs / "probe" / "candidates.parquet")
    qs = find_set(question_sets([runs / "probe"]), None)
    qid = bank["question_id"].iloc[0]
    page = render.question_fragment(qs, qid)
    mine = bank[bank["question_id"] == qid].reset_index(drop=True)
    arms = mine[mine["probe"] != "greedy"].groupby(["probe", "arm"], sort=False)
    blocks = re.findall(r'<div class="probe" data-probe="([^"]*)" data-arm="([^"]*)">(.*?)</table></div>', page, re.S)
    assert [(html.unescape(p), html.unescape(a)) for p, a, _ in blocks] == list(arms.groups)
    for (probe, arm, block), (_, sub) in zip(blocks, arms):
        groups = {r[0]: (int(r[1]), int(r[2])) for r in _cells(block + "</table>", '<table class="groups">')}
        answers = sub["answer"].fillna("(no answer)")
        assert groups == {a: (int((answers == a).sum()), int((sub["correct"] & sub["scored"])[answers == a].sum()))
                          for a in answers.unique()}
        # the majority's pick: the answers with the most votes among graded candidates with an answer
        votes = Counter(sub.loc[sub["scored"] & sub["answer"].notna(), "answer"])
        top = {a for a, n in votes.items() if n == max(votes.values())} if votes else set()
        rows = re.findall(r'<tr class="(?:correct|wrong)"><td>(.*?)</td>(.*?)</tr>', block, re.S)
        marked = {html.unescape(answer) for answer, rest in rows if 'data-pick="majority' in rest}
        assert marked == top
    # a candidate's full text, by its place among the question's rows
    j = int(mine.index[mine["probe"] != "greedy"][2])
    text = render.sample_fragment(qs, qid, 0, str(j))
    assert text.startswith(html.escape(mine.loc[j, "text"], quote=True)[:20])


def test_a_routing_question_lists_its_routes_and_picks(runs) -> None:
    cand = pd.read_parquet(runs / "route" / "candidates.parquet")
    q = pd.read_parquet(runs / "route" / "questions.parquet")
    qs = find_set(question_sets([runs / "route"]), None)
    assert qs.kind == "routing"
    qid = q["question_id"].iloc[1]
    page = render.question_fragment(qs, qid)
    rows = _cells(page, '<table class="routes">')
    mine = cand[cand["question_id"] == qid]
    assert [(r[1], r[2]) for r in rows] == list(zip(mine["route"], mine["answer"].fillna("nan").astype(str)))
    row = q.set_index("question_id").loc[qid]
    for name in ("majority", "logprob"):
        assert f'<li data-selector="{name}">{name}: <b>{html.escape(str(row[f"{name}_answer"]), quote=True)}</b>' in page


def test_a_recognition_question_shows_each_option_s_log_likelihood(runs) -> None:
    opts = pd.read_parquet(runs / "recognize" / "options.parquet")
    q = pd.read_parquet(runs / "recognize" / "questions.parquet")
    qs = find_set(question_sets([runs / "recognize"]), None)
    listing = questions_of(runs / "recognize", filter="rec_correct and deployed_scored and not realized")
    assert listing["question_id"].tolist() == q.loc[q["rec_correct"] & q["deployed_scored"] & ~q["realized"],
                                                    "question_id"].tolist()
    qid = q["question_id"].iloc[0]
    rows = _cells(render.question_fragment(qs, qid), '<table class="options">')
    mine = opts[opts["question_id"] == qid].sort_values("option")
    assert [r[0] for r in rows] == mine["label"].tolist()
    assert [float(r[2]) for r in rows] == pytest.approx(mine["loglik"].round(3).tolist(), abs=1e-3)
    picked = [r[0] for r in rows if "recognition's pick" in r[5]]
    assert picked == [q.set_index("question_id").loc[qid, "rec_choice"]]
    assert [r[0] for r in rows if "gold" in r[5]] == mine.loc[mine["gold"], "label"].tolist()


def _hand_audit(task, k: int, seed: int, spec: str) -> AuditResult:
    rng = np.random.default_rng(seed)
    correct = rng.uniform(0, 1, (len(task.questions), k)) < 0.4
    realized = rng.uniform(0, 1, len(task.questions)) < 0.5
    samples = pd.DataFrame([{"question_id": q.question_id, "candidate_idx": j, "text": f"#### {j}",
                             "answer": q.gold if c else "0", "correct": bool(c), "scored": True,
                             "finish_reason": "stop", "n_tokens": 2, "mean_logprob": -0.1}
                            for q, row in zip(task.questions, correct) for j, c in enumerate(row)])
    nc = correct.sum(axis=1)
    questions = pd.DataFrame({"question_id": [q.question_id for q in task.questions], "realized": realized,
                              "reachable": nc > 0, "n_correct": nc, "n_scored": k, "k": k, "propensity": nc / k,
                              "deployed_answer": "1", "deployed_text": "#### 1", "deployed_scored": True,
                              "deployed_finish": "stop", "gold": [q.gold for q in task.questions], "labels": None})
    protocol = Protocol("arith", k=k, temperature=1.0, max_new_tokens=8).resolved(task)
    return AuditResult.new(protocol, {"spec": spec, "fingerprint": spec}, questions, samples, dict(task.data_identity))


def test_an_elicitation_s_pairs_are_comparisons_of_each_source_and_its_copy(tmp_path) -> None:
    task = load_task("arith", n=12)
    out = tmp_path / "eli"
    record = RunRecord.new("elicitation", Protocol("arith", k=4, temperature=1.0, max_new_tokens=8).resolved(task),
                           {"model": {"spec": "zoo:locked"}}, None,
                           {"demos": [2], "control": "zoo:base", "finetune": {}})
    run = RunDir(out)
    run.begin(record)
    for i, name in enumerate(("model", "model-n2")):
        _hand_audit(task, 4, i, name).save(out / "audits" / name)
    sets = question_sets([out])
    pair = find_set(sets, "0/model--model-n2")
    assert pair.kind == "comparison" and "control--control-n2" not in [s.key for s in sets]
    got = questions_of(out, "0/model--model-n2")
    a, b = read_run(out / "audits" / "model").questions, read_run(out / "audits" / "model-n2").questions
    fate = np.where(a["realized"] & b["realized"], "kept", np.where(~a["realized"] & b["realized"], "gained",
                    np.where(a["realized"] & ~b["realized"], "lost", "never")))
    assert got["realized_fate"].tolist() == fate.tolist()
    assert "unfinished" in (pair.problem or "") or "not complete" in (pair.problem or "")


def test_the_export_writes_a_static_copy_and_never_into_a_run(runs, tmp_path) -> None:
    with pytest.raises(ReachlensError, match="inside the run directory"):
        from reachlens.view.export import export

        export([runs], runs / "probe" / "view")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert main(["view", str(runs / "route"), "--export", str(tmp_path / "full")]) == 2
    assert main(["view", str(runs / "route"), "--export", str(tmp_path / "ex")]) == 0
    q = pd.read_parquet(runs / "route" / "questions.parquet")
    listing = (tmp_path / "ex" / "sets" / "0" / "index.html").read_text()
    assert "<script" not in listing and "default-src 'none'" in html.unescape(listing)
    links = re.findall(r'<a href="(q/\d+\.html)">([^<]*)</a>', listing)
    assert [html.unescape(t) for _, t in links] == q["question_id"].tolist()
    page = (tmp_path / "ex" / "sets" / "0" / links[0][0]).read_text()
    cand = pd.read_parquet(runs / "route" / "candidates.parquet")
    first = cand[cand["question_id"] == q["question_id"].iloc[0]]
    assert all(html.escape(t, quote=True) in page for t in first["text"])  # every text inlined, escaped


def test_reports_link_into_the_viewer(runs, tmp_path) -> None:
    from reachlens.store.view_address import VIEW_PORT

    assert main(["report", str(runs / "route"), "--out", str(tmp_path / "r")]) == 0
    page = (tmp_path / "r" / "report.html").read_text()
    urls = [html.unescape(u) for u in re.findall(r'<a href="(http://127\.0\.0\.1:\d+/\?[^"]*)">', page)]
    q = pd.read_parquet(runs / "route" / "questions.parquet")
    assert [parse_qs(urlsplit(u).query)["question"][0] for u in urls] == q["question_id"].tolist()
    assert all(urlsplit(u).port == VIEW_PORT and parse_qs(urlsplit(u).query)["set"] == ["0"] for u in urls)
    find_set(question_sets([runs / "route"]), "0")  # the set the links name is the viewer's of that directory
    assert main(["report", str(runs / "probe"), "--out", str(tmp_path / "p")]) == 0
    page = (tmp_path / "p" / "report.html").read_text()
    for u in re.findall(r'<a href="(http://127\.0\.0\.1:\d+/\?[^"]*)">', page):
        expr = parse_qs(urlsplit(html.unescape(u)).query)["filter"][0]
        questions_of(runs / "probe", "0", expr)  # every filter a report links reads on the viewer's set
