"""A hostile report, rendered by headless Chromium: no script a run carries ever runs (issue 25).

Every field that reaches a page holds a ``<script>`` payload and an ``<img onerror>`` one: question ids,
answers, gold answers and labels, the model spec and fingerprint, the protocol's strings (task, split, prompt
format, grader, stop strings), the data identity, and the folder names the report names its checkpoints by.
Each payload sets ``window.__pwned`` and the page's title. The pages (an audit's, a pair of audits' with every
figure, the generic page of any run) are rendered with a probe appended that reports both after the page settled;
the control page, the same payload put in raw, shows the probe catches a script that runs.

Before issue 25, ``write_report`` put protocol fields in unescaped and the Markdown kept ``<img onerror>``.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from hostile import IMG, SCRIPT, hostile_audit

_PROBE = """<script>setTimeout(() => {
  const p = document.createElement('pre');
  p.id = 'reachlens-probe';
  p.textContent = JSON.stringify({pwned: window.__pwned === undefined ? null : window.__pwned, title: document.title,
                                  images: document.images.length});
  document.body.appendChild(p);
}, 2000);</script>"""
_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
          "--virtual-time-budget=6000"]


def _probe(chromium: str, page: Path, work: Path) -> dict:
    """What the probe saw after the page ran (window.__pwned, the title, the number of images)."""
    probed = work / f"probed-{page.parent.name[:8]}-{page.stem}.html"
    probed.write_text(page.read_text().replace("</body>", _PROBE + "</body>"))
    dom = subprocess.run([chromium, *_FLAGS, f"--user-data-dir={work / 'chrome'}", "--dump-dom", probed.as_uri()],
                         capture_output=True, text=True, timeout=180).stdout
    found = re.search(r'<pre id="reachlens-probe">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@pytest.fixture(scope="module")
def hostile_pages(tmp_path_factory) -> dict[str, Path]:
    """Reports of hostile audits saved under hostile folder names: one audit, a pair, the generic page."""
    from reachlens.cli import main
    from reachlens.report import write_run_report
    from reachlens.store import read_run

    root = tmp_path_factory.mktemp("hostile")
    base = hostile_audit("base").save(root / f"base {IMG}")
    trained = hostile_audit("trained", realized=(True, True, False), n_correct=(2, 1, 0)).save(root / f"trained {IMG}")
    assert main(["report", str(base)]) == 0
    assert main(["report", str(base), str(trained), "--out", str(root / "pair")]) == 0
    generic, _ = write_run_report(read_run(base), root / "generic")
    unfinished = _unfinished(root / "unfinished")  # issue 36: invisible characters, Markdown payloads, a banner
    assert main(["report", str(unfinished)]) == 0
    return {"audit": base / "report.html", "pair": root / "pair" / "report.html", "generic": generic,
            "unfinished": unfinished / "report.html"}


def _unfinished(path: Path) -> Path:
    """A hostile audit whose model spec also holds zero-width and TAG characters and Markdown image and link
    payloads, left as a killed run leaves it (status running, no summary)."""
    hidden = "adm\u200b\u200d\ufeff" + "".join(map(chr, (0xE0041, 0xE0042))) + "in"
    run = hostile_audit(f"poison {hidden} ![px](http://tracker.invalid/p.png) [x](javascript:alert(1))").save(path)
    record = json.loads((run / "run.json").read_text())
    record.update(status="running", finished=None)
    (run / "run.json").write_text(json.dumps(record))
    (run / "summary.json").unlink()
    return run


@pytest.mark.parametrize("which", ["audit", "pair", "generic", "unfinished"])
def test_no_payload_runs_in_any_report(hostile_pages, which, chromium, tmp_path) -> None:
    page = hostile_pages[which]
    text = page.read_text()
    assert "window.__pwned" in text  # the payloads are on the page, as text
    seen = _probe(chromium, page, tmp_path)
    # a payload that ran sets the title to exactly 'PWNED'; a lone audit's title names its (hostile) model, so
    # there the payload's text is in the title, inert
    assert seen["pwned"] is None and seen["title"] != "PWNED" and seen["images"] == 0, seen
    assert seen["title"].startswith("reachlens")
    md = page.with_suffix(".md").read_text()
    assert "<img" not in md and "<script" not in md  # escaped for Markdown too
    if which == "unfinished":
        assert "Unfinished: this run" in text and "adm\\u200b\\u200d\\ufeff\\U000e0041" in text


def test_the_probe_sees_a_payload_that_runs(chromium, tmp_path) -> None:
    """The control: the same payloads put in raw run, and the probe reports them."""
    page = tmp_path / "raw.html"
    page.write_text(f"<!DOCTYPE html><html><head><title>raw</title></head><body>{SCRIPT}{IMG}</body></html>")
    seen = _probe(chromium, page, tmp_path)
    assert seen["pwned"] == 1 and seen["title"] == "PWNED" and seen["images"] == 1, seen
