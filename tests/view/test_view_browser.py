"""`reachlens view` in a real browser (Playwright driving the system Chromium), on a training audit of zoo:base
and zoo:grpo at a small n and K (made by hand, as the report tests make theirs): the list, the fate filter, one question and its base samples that were correct,
every number on the page read back against the parquet tables (issue 58)."""

from __future__ import annotations

import dataclasses

import re
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import numpy as np
import pandas as pd
import pytest

from reachlens import Protocol
from reachlens.store import RunDir, RunRecord, read_run
from reachlens.studies import AuditResult, compare
from reachlens.studies.training_audit import StudyLayout, StudyPlan
from reachlens.tasks import load_task
from reachlens.view import serve

expect = pytest.importorskip("playwright.sync_api", reason="needs Playwright for Python to drive Chromium "
                             "(pip install 'reachlens[test]'): absent").expect

N, K = 40, 16
"""The study's size: small, so the test stays fast; its audits are made by hand, as the report tests make theirs."""


def _audit(task, protocol, spec: str, rate, realized, seed: int) -> AuditResult:
    """An audit of ``task`` by hand: question i's K samples correct at ``rate[i]`` (drawn), its deployment as
    ``realized[i]``; a wrong sample answers gold + 1 or gold - 10 (two wrong answers to group), texts as the zoo
    writes them."""
    rng = np.random.default_rng(seed)
    rows, questions = [], []
    for q, r, dep in zip(task.questions, rate, realized):
        gold = int(q.gold)
        correct = rng.uniform(0, 1, K) < r
        for j, c in enumerate(correct):
            answer = gold if c else gold + 1 if j % 3 else gold - 10
            rows.append({"question_id": q.question_id, "candidate_idx": j, "text": f"{q.fields['question']} "
                         f"#### {answer}", "answer": str(answer), "correct": bool(c), "scored": True,
                         "finish_reason": "stop", "n_tokens": 30 + j, "mean_logprob": -0.3})
        questions.append({"question_id": q.question_id, "realized": bool(dep), "reachable": bool(correct.any()),
                          "n_correct": int(correct.sum()), "n_scored": K, "k": K, "propensity": correct.mean(),
                          "deployed_answer": str(gold if dep else gold + 1),
                          "deployed_text": f"#### {gold if dep else gold + 1}", "deployed_scored": True,
                          "deployed_finish": "stop", "gold": q.gold, "labels": None})
    return AuditResult.new(protocol, {"spec": spec, "fingerprint": spec}, pd.DataFrame(questions),
                           pd.DataFrame(rows), dict(task.data_identity))


@pytest.fixture(scope="module")
def zoo_study(tmp_path_factory) -> Path:
    """A training audit zoo:base -> zoo:grpo on the first 40 arith_hard test questions, K=16, as the report tests
    build theirs: the audits made by hand (grpo realizes more, the base reaches some of those), written where the
    study keeps them, the comparison saved beside them, the study completed."""
    out = tmp_path_factory.mktemp("view") / "study"
    task = load_task("arith_hard", n=N)
    protocol = Protocol("arith_hard", k=K, temperature=0.8, max_new_tokens=128).resolved(task)
    rng = np.random.default_rng(0)
    rate = rng.uniform(0, 0.6, N) ** 2
    base_dep = rng.uniform(0, 1, N) < rate * 1.5
    grpo_dep = base_dep | (rng.uniform(0, 1, N) < 0.4)
    plan = StudyPlan({"base": "zoo:base", "grpo": "zoo:grpo"}, (("base", "grpo"),), protocol, n=N)
    record = RunRecord.new("training_audit", plan.protocol, dict(plan.models), None,
                           {k: v for k, v in plan.to_dict().items() if k != "protocol"})
    run = RunDir(out)
    run.begin(record)
    layout = StudyLayout(out)
    _audit(task, protocol, "zoo:base", rate, base_dep, 1).save(layout.audit("base"))
    _audit(task, protocol, "zoo:grpo", np.minimum(rate * 1.8, 1), grpo_dep, 2).save(layout.audit("grpo"))
    compare(layout.audit("base"), layout.audit("grpo")).save(layout.comparison("base", "grpo"))
    with run.writer():
        run.start(dataclasses.replace(record, children={"audit:base": "audits/base", "audit:grpo": "audits/grpo"}))
        run.finish({"wall_seconds": {}})
    return out


@pytest.fixture()
def page(browser, zoo_study):
    """A page of the viewer over the study, with every request it makes recorded."""
    server = serve([zoo_study])
    context = browser.new_context()
    pg = context.new_page()
    pg.requests = []
    pg.on("request", lambda r: pg.requests.append(r.url))
    pg.goto(server.url)
    pg.wait_for_selector("body[data-ready='1']")
    yield pg, server
    context.close()
    server.shutdown()


def _rows(pg) -> list[str]:
    return pg.eval_on_selector_all("#questions tbody tr", "rows => rows.map(r => decodeURIComponent(r.dataset.qid))")


def test_list_filter_question_and_the_base_samples_that_were_correct(page, zoo_study) -> None:
    pg, server = page
    cmp = read_run(zoo_study / "comparisons" / "base--grpo")
    q = cmp.questions
    # the list: the comparison first, every question of it, in task order
    assert pg.input_value("#set-menu") == "0/comparisons/base--grpo"
    assert pg.inner_text("#count") == f"{N} of {N} questions"
    assert _rows(pg) == q["question_id"].tolist()
    # filter to "gained, already base-reachable": the address holds the expression
    pg.select_option("select[data-menu='fate']", label="fate: gained, already base-reachable")
    want = q[(q["realized_fate"] == "gained") & q["base_reachable"]]
    assert len(want) >= 1
    expect(pg.locator("#count")).to_have_text(f"{len(want)} of {N} questions")  # (the page forbids eval: no
    # wait_for_function with a string)
    assert _rows(pg) == want["question_id"].tolist()
    expr = parse_qs(urlsplit(pg.url).query)["filter"][0]
    assert expr == 'realized_fate == "gained" and base_reachable'
    assert pg.inner_text("dd[data-stat='gained']") == str(len(want))
    assert pg.inner_text("dd[data-stat='lost']") == "0" and "post hoc" in pg.inner_text("#paired")
    # open the first question: its base samples that were correct, as the samples table holds them
    qid = want["question_id"].iloc[0]
    pg.locator("#questions tbody tr").first.locator("td").first.click()
    pg.wait_for_selector(".side[data-side='1']")
    pg.wait_for_selector("pre.prompt")  # asked for apart, after the question
    assert parse_qs(urlsplit(pg.url).query)["question"][0] == qid
    question = next(x for x in load_task("arith_hard", n=N).questions if x.question_id == qid)
    assert pg.inner_text("pre.prompt") == f"Q: {question.fields['question']}\nA:"  # the zoo's format, no BOS
    base = cmp.base.samples[cmp.base.samples["question_id"] == qid]
    right = base[base["correct"] & base["scored"]]
    assert len(right) == want["base_n_correct"].iloc[0] >= 1
    side = pg.locator(".side[data-side='0']")
    assert f"{len(right)} of {K} samples correct" in side.inner_text()
    shown = side.locator("table.groups tr.correct")
    assert shown.count() == right["answer"].nunique()
    counts = {r["answer"]: int(r["n"]) for r in _groups(side)}
    assert counts == base.groupby(base["answer"].fillna("(no answer)")).size().to_dict()
    # a correct sample's full text, on demand
    j = int(right["candidate_idx"].iloc[0])
    row = side.locator("table.groups tr.correct").filter(has_text=str(right["answer"].iloc[0]))
    row.locator("summary", has_text="texts").click()
    row.locator(f"details.sample[data-idx='{j}'] summary").click()
    pre = row.locator(f"details.sample[data-idx='{j}'] pre")
    pre.locator(".meta").wait_for()
    assert pre.inner_text().startswith(right["text"].iloc[0].strip()[:40])
    # the deployed answers: base wrong, grpo right (a gain), each its audit's
    trained = cmp.trained.questions.set_index("question_id").loc[qid]
    assert f"deployed (greedy): {trained['deployed_answer']} (correct" in pg.inner_text(".side[data-side='1']")
    assert all(u.startswith(server.url) for u in pg.requests), pg.requests


def _groups(side) -> list[dict]:
    return side.locator("table.groups tbody tr").evaluate_all(
        "rows => rows.map(r => ({answer: r.cells[0].textContent, n: r.cells[1].textContent}))")


def test_sort_by_propensity_and_search(page, zoo_study) -> None:
    pg, _ = page
    q = read_run(zoo_study / "comparisons" / "base--grpo").questions
    pg.select_option("#sort-menu", "-base_propensity")
    pg.wait_for_url(re.compile(r"sort=-base_propensity"))
    want = q.sort_values("base_propensity", ascending=False, kind="stable")["question_id"].tolist()
    expect(pg.locator("#questions tbody tr").first).to_have_attribute("data-qid", quote(want[0], safe=""))
    assert _rows(pg) == want
    pg.fill("#search", q["question_id"].iloc[3])
    pg.click("button[type=submit]")
    expect(pg.locator("#count")).not_to_have_text(f"{N} of {N} questions")
    assert q["question_id"].iloc[3] in _rows(pg)
