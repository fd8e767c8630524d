"""`reachlens view` in a real browser (Playwright driving the system Chromium), on a training audit of the zoo
decoded here at a small n and K: the list, the fate filter, one question and its base samples that were correct,
every number on the page read back against the parquet tables (issue 58)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pandas as pd
import pytest

from reachlens import Protocol
from reachlens.store import read_run
from reachlens.studies.training_audit import StudyPlan, run_training_audit
from reachlens.view import serve

N, K = 30, 8
"""Questions and samples of the zoo's study here: enough for base-reachable gains of grpo (6 at this size)."""


@pytest.fixture(scope="module")
def zoo_study(tmp_path_factory) -> Path:
    """base -> grpo of the shipped zoo on arith_hard, n=30, K=8 (no controls)."""
    out = tmp_path_factory.mktemp("view") / "study"
    plan = StudyPlan({"base": "zoo:base", "grpo": "zoo:grpo"}, (("base", "grpo"),),
                     Protocol("arith_hard", k=K, temperature=0.8, max_new_tokens=128), n=N)
    run_training_audit(plan, out, log=lambda s: None)
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
    pg.wait_for_function(f"document.getElementById('count').textContent.startsWith('{len(want)} of')")
    assert _rows(pg) == want["question_id"].tolist()
    expr = parse_qs(urlsplit(pg.url).query)["filter"][0]
    assert expr == 'realized_fate == "gained" and base_reachable'
    assert pg.inner_text("dd[data-stat='gained']") == str(len(want))
    assert pg.inner_text("dd[data-stat='lost']") == "0" and "post hoc" in pg.inner_text("#paired")
    # open the first question: its base samples that were correct, as the samples table holds them
    qid = want["question_id"].iloc[0]
    pg.locator("#questions tbody tr").first.locator("td").first.click()
    pg.wait_for_selector(".side[data-side='1']")
    assert parse_qs(urlsplit(pg.url).query)["question"][0] == qid
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
    pg.wait_for_function("document.querySelector('#questions tbody tr') !== null")
    want = q.sort_values("base_propensity", ascending=False, kind="stable")["question_id"].tolist()
    pg.wait_for_function(f"document.querySelector('#questions tbody tr').dataset.qid === "
                         f"encodeURIComponent({want[0]!r})")
    assert _rows(pg) == want
    pg.fill("#search", q["question_id"].iloc[3])
    pg.click("button[type=submit]")
    pg.wait_for_function("document.getElementById('count').textContent.endsWith('of 30 questions') && "
                         "!document.getElementById('count').textContent.startsWith('30')")
    assert q["question_id"].iloc[3] in _rows(pg)
