"""The report renders: figures present in the HTML as a headless browser sees it; tables in Markdown."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import fake_audit

from reachlens import Protocol
from reachlens.report import write_report
from reachlens.store import AuditDir
from reachlens.studies.training_audit import StudyPlan, load_training_audit

P4 = Protocol("arith", k=4, temperature=1.0, max_new_tokens=12)


def _write(study_dir: Path, name: str, result) -> None:
    store = AuditDir(study_dir / "audits" / name)
    with store.writer():
        store.open(result.protocol, result.model, data=result.data)
        store.consolidate(result.questions, result.samples, result.summary())


@pytest.fixture()
def study(tmp_path):
    base = fake_audit([True, False, False, False, True], [4, 2, 1, 0, 3], spec="zoo:base")
    rl = fake_audit([True, True, True, False, False], [4, 4, 3, 0, 1], spec="zoo:grpo")
    big_base = fake_audit([True, False, False, False, True], [8, 3, 2, 1, 6], k=8, spec="zoo:base", protocol=P4.with_k(8))
    big_rl = fake_audit([True, True, True, False, False], [8, 8, 6, 0, 2], k=8, spec="zoo:grpo", protocol=P4.with_k(8))
    plan = StudyPlan({"base": "zoo:base", "grpo": "zoo:grpo"}, (("base", "grpo"),), base.protocol, budget_k=8)
    import json

    (tmp_path / "audits").mkdir()
    (tmp_path / "study.json").write_text(json.dumps({"plan": plan.to_dict(), "wall_seconds": {"base": 1.0}}))
    _write(tmp_path, "base", base)
    _write(tmp_path, "grpo", rl)
    _write(tmp_path, "base-k8", big_base)
    _write(tmp_path, "grpo-k8", big_rl)
    return load_training_audit(tmp_path)


def test_study_tables(study):
    head = study.headline()
    assert head.loc[0, "pair"] == "base -> grpo"
    assert (head.loc[0, "gained"], head.loc[0, "lost"], head.loc[0, "gained_from_base_reachable"]) == (2, 1, 2)
    budget = study.budget_control().set_index("model")
    assert budget.loc["base", "O_2K"] == 1.0 and budget.loc["base", "O_K"] == 0.8


def test_markdown_summary_has_the_headline(study, tmp_path):
    _, md = write_report(study, tmp_path / "r")
    text = md.read_text()
    assert "| pair | D_base | D_trained |" in text and "base -> grpo" in text
    assert "Budget control" in text and "Propensity bins" in text
    # the header names the protocol the audits were stored under (not the plan's unresolved copy)
    stored = study.audits["base"].protocol
    assert study.protocol == stored and f"(protocol {stored.hash})" in text
    assert "gain_retained = (D_trained_shared - D_base) / (D_trained_native - D_base)" in text
    # pass@k by hand: base (4,2,1,0,3 of 4) 0.500, 0.667, 0.800 at k = 1, 2, 4; grpo (4,4,3,0,1) 0.600,
    # 0.700, 0.800: grpo leads, then the curves meet at k=4 without crossing
    assert "## pass@k crossovers" in text
    assert "| base -> grpo | 0.500 | 0.600 | 4 | 0.800 | 0.800 | none | none |" in text


def test_html_is_self_contained(study, tmp_path):
    html_path, _ = write_report(study, tmp_path / "r")
    page = html_path.read_text()
    assert "<script src=" not in page and "<link " not in page  # plotly.js inlined: nothing fetched
    assert page.count("Plotly.newPlot") >= 4


def test_html_renders_in_headless_chromium(study, tmp_path, chromium):
    html_path, _ = write_report(study, tmp_path / "r")
    dom = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'chrome'}", "--virtual-time-budget=10000", "--dump-dom",
         html_path.as_uri()],
        capture_output=True, text=True, timeout=120,
    ).stdout
    # plotly draws each figure into an <svg class="main-svg">; four figures, each with its title
    assert len(re.findall(r'class="plot-container plotly"', dom)) == 4, dom[:500]
    assert dom.count('class="main-svg"') >= 4
    for title in ("Per-question fates", "Realized vs reachable per checkpoint", "pass@k per checkpoint",
                  "realized after training, by base propensity"):
        assert title in dom
