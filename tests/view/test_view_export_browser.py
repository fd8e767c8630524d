"""`reachlens view --export OUT` opened from file:// in Chromium (Playwright): the set list, a question list, a
question page with its samples' texts inlined; no script on the pages, no request beyond the export's own files
(issue 58)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from reachlens.cli import main

pytest.importorskip("playwright.sync_api", reason="needs Playwright for Python to drive Chromium "
                    "(pip install 'reachlens[test]'): absent")


def test_the_export_opens_from_file_urls(browser, tmp_path) -> None:
    from tests.view.test_view_runs import _hand_audit
    from reachlens.tasks import load_task

    task = load_task("arith", n=6)
    _hand_audit(task, 3, 0, "zoo:base").save(tmp_path / "runs" / "base")
    assert main(["view", str(tmp_path / "runs"), "--export", str(tmp_path / "out")]) == 0
    samples = pd.read_parquet(tmp_path / "runs" / "base" / "samples.parquet")
    context = browser.new_context(java_script_enabled=True)
    page = context.new_page()
    requests, errors = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto((tmp_path / "out" / "index.html").as_uri())
    page.click("#sets a")
    assert page.locator("#questions tbody tr").count() == 6
    qid = task.questions[2].question_id
    page.click(f"#questions a:text-is('{qid}')")
    page.locator("summary", has_text="texts").first.click()
    first = page.locator("details.sample[data-idx='0']")
    first.locator("summary").click()
    want = samples[(samples["question_id"] == qid) & (samples["candidate_idx"] == 0)]["text"].iloc[0]
    assert first.locator("pre").inner_text().startswith(want)
    assert page.evaluate("document.scripts.length") == 0
    assert all(u.startswith("file://") for u in requests) and not errors, (requests, errors)
    context.close()
