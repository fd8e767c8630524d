"""`reachlens view` of hostile runs in a real browser (issue 58): the payloads of the hardening tests in question
ids, answers, golds, model output, model specs and folder names; no script runs and no request leaves the server,
as Playwright records them. The control shows the probe sees a payload that runs where no escaping and no policy
stop it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hostile import IMG, SCRIPT, hostile_audit

from reachlens.cli import main
from reachlens.view import serve


@pytest.fixture(scope="module")
def hostile_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hostile-view")
    base = hostile_audit("base").save(root / f"base {IMG}")
    trained = hostile_audit("trained", realized=(True, True, False), n_correct=(2, 1, 0)).save(root / f"t {IMG}")
    assert main(["compare", str(base), str(trained), "--out", str(root / f"cmp {IMG}")]) == 0
    return root


def _pwned(pg) -> dict:
    return pg.evaluate("() => ({pwned: window.__pwned === undefined ? null : window.__pwned, title: document.title,"
                       " images: document.images.length})")


def test_no_payload_runs_and_no_request_leaves_the_server(browser, hostile_root) -> None:
    server = serve([hostile_root])
    context = browser.new_context()
    pg = context.new_page()
    requests, violations = [], []
    pg.on("request", lambda r: requests.append(r.url))
    pg.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    try:
        pg.goto(server.url + "?filter=" + SCRIPT)  # a payload in the address too: one escaped line
        pg.wait_for_selector("body[data-ready='1']")
        assert SCRIPT in pg.inner_text("#list")
        for key in pg.eval_on_selector_all("#set-menu option", "os => os.map(o => o.value)"):
            pg.select_option("#set-menu", key)
            pg.wait_for_selector("#questions tbody tr")
            for i in range(pg.locator("#questions tbody tr").count()):
                pg.evaluate("document.getElementById('question').innerHTML = ''")  # the next one, not this one
                pg.locator("#questions tbody tr").nth(i).locator("td").first.click()
                pg.wait_for_selector("#question .side")
                for summary in pg.locator("#question summary").all():
                    summary.click()
                pg.wait_for_selector("#question pre .meta")
        assert SCRIPT in pg.inner_text("#question") and "=HYPERLINK(1)<img src=x" in pg.inner_text("#question")
        seen = _pwned(pg)
        assert seen == {"pwned": None, "title": "reachlens view", "images": 0}, seen
        assert requests and all(u.startswith(server.url) for u in requests), requests
        assert not violations, violations  # nothing even tried: every payload is text
    finally:
        context.close()
        server.shutdown()


def test_the_probe_sees_a_payload_that_runs(browser) -> None:
    """The control: the same payloads put in a page raw, with no policy, run; the probe reports them."""
    context = browser.new_context()
    pg = context.new_page()
    requests = []
    pg.on("request", lambda r: requests.append(r.url))
    tracker = "<img src='http://tracker.invalid/p.png'>"
    pg.set_content(f"<!DOCTYPE html><html><head><title>raw</title></head><body>{SCRIPT}{IMG}{tracker}</body></html>")
    pg.wait_for_timeout(300)
    seen = _pwned(pg)
    context.close()
    assert seen["pwned"] == 1 and seen["title"] == "PWNED" and seen["images"] == 2, seen
    assert "http://tracker.invalid/p.png" in requests  # the recorder sees a request leave: the viewer's page makes none
