"""Reports of hostile or unfinished runs (issue 36, third pass, "Low").

Before: Markdown images and links from model text were live in report.md (a tracking pixel), a backtick in a
spec broke the probe report's header (its values were put inside code spans), the report's ownership check was
per file (``report.html`` written, then ``report.md`` refused), and the report of an interrupted audit never
said it was unfinished. The Markdown is checked as a renderer reads it (markdown-it, CommonMark with GFM tables
), not against reachlens' own escaping.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from hostile import cli, copy_of, error_line, hostile_audit
from markdown_it import MarkdownIt

IMAGE = "![pixel](http://tracker.invalid/p.png?q=1)"
LINK = "[click me](javascript:alert(1))"
REFERENCE = "[x][r]\n\n[r]: http://tracker.invalid/r"
AUTOLINK = "<http://tracker.invalid/a>"
TICKS = "a`b``c"
PAYLOADS = [IMAGE, LINK, REFERENCE, AUTOLINK, TICKS, f"`{IMAGE}`"]


def _html_of(md: str) -> str:
    return MarkdownIt("commonmark", {"html": True}).enable("table").render(md)


def _md_audit(tmp_path):
    """An audit made by hand whose model text, answers and question ids are Markdown payloads, saved."""
    from reachlens.studies import AuditResult

    base = hostile_audit("base")
    q, s = base.questions.copy(), base.samples.copy()
    ids = dict(zip(q["question_id"], [f"q{i} {p}" for i, p in enumerate(PAYLOADS)]))
    q["question_id"] = q["question_id"].map(ids)
    s["question_id"] = s["question_id"].map(ids)
    for df, cols in ((q, ["deployed_answer", "deployed_text", "gold", "labels"]), (s, ["text", "answer"])):
        for c in cols:
            df[c] = [PAYLOADS[i % len(PAYLOADS)] for i in range(len(df))]
    model = {"spec": f"m {IMAGE} {TICKS}", "fingerprint": "sha256:0"}
    return AuditResult.new(base.protocol, model, q, s, base.data).save(tmp_path / "md")


def test_markdown_images_and_links_from_a_run_stay_text(tmp_path) -> None:
    from reachlens.report import report_run, write_run_report
    from reachlens.store import read_run

    run = _md_audit(tmp_path)
    for md_path in (report_run(run)[1], write_run_report(read_run(run), tmp_path / "generic")[1]):
        rendered = _html_of(md_path.read_text())
        assert "<img" not in rendered and "<a " not in rendered, rendered
        assert "tracker.invalid" in rendered  # the payload is on the page, as text


def test_a_backtick_in_a_spec_keeps_the_probe_report_header_whole(tiny_model, tmp_path) -> None:
    from reachlens import ExecConfig, Protocol, load_task, probe
    from reachlens.report import report_run

    task = load_task("arith", n=1)
    run = probe(tiny_model, task, ["sampling:k=1:temperature=1"], protocol=Protocol.greedy("arith", max_new_tokens=2),
                exec_config=ExecConfig(max_batch_rows=4), out=tmp_path / "probe")
    record = json.loads((run.location / "run.json").read_text())
    record["model"]["spec"] = f"evil` {IMAGE} `x"
    (run.location / "run.json").write_text(json.dumps(record))
    md = report_run(run.location)[1].read_text()
    header = next(line for line in md.splitlines() if line.startswith("Model "))
    rendered = _html_of(header)
    assert "<code>" not in rendered and "<img" not in rendered and "<a " not in rendered, rendered
    assert "evil` ![pixel](http://tracker.invalid/p.png?q=1) `x" in rendered  # the spec, whole, as text
    assert "task arith" in rendered and "protocol" in rendered


@pytest.mark.parametrize("foreign", ["report.md", "report.html"])
def test_both_pages_are_checked_before_either_is_written(finished_audit, tmp_path, capsys, foreign) -> None:
    run = copy_of(finished_audit, tmp_path / "a")
    (run / foreign).write_text("my own notes\n")
    code, _, err = cli(capsys, "report", run)
    assert code == 2 and "was not written by reachlens report" in error_line(err)
    other = "report.html" if foreign == "report.md" else "report.md"
    assert not (run / other).exists() and (run / foreign).read_text() == "my own notes\n"


def _unfinished(finished_audit, dest):
    """A copy of the finished audit as a killed one leaves it: status running (nobody holds it: interrupted),
    no summary, one question's batch in parts/ and nothing else."""
    run = copy_of(finished_audit, dest)
    q, s = pd.read_parquet(run / "questions.parquet"), pd.read_parquet(run / "samples.parquet")
    for p in ("questions.parquet", "samples.parquet", "summary.json"):
        (run / p).unlink()
    (run / "parts").mkdir()
    first = q["question_id"].iloc[0]
    s[s["question_id"] == first].to_parquet(run / "parts" / "0.0.samples.parquet")
    q[q["question_id"] == first].to_parquet(run / "parts" / "0.0.questions.parquet")
    record = json.loads((run / "run.json").read_text())
    record.update(status="running", finished=None)
    (run / "run.json").write_text(json.dumps(record))
    return run


def test_the_report_of_an_interrupted_audit_says_it_is_unfinished(finished_audit, tmp_path, capsys) -> None:
    run = _unfinished(finished_audit, tmp_path / "base")
    code, _, err = cli(capsys, "report", run)
    assert code == 0, err
    page, md = (run / "report.html").read_text(), (run / "report.md").read_text()
    assert "Unfinished: this run&#x27;s status is &#x27;interrupted&#x27;, not complete" in page
    assert md.splitlines()[3].startswith("**Unfinished: this run's status is 'interrupted', not complete.")
    done = cli(capsys, "report", finished_audit, "--out", tmp_path / "done")
    assert done[0] == 0 and "Unfinished" not in (tmp_path / "done" / "report.html").read_text()
    other = _unfinished(finished_audit, tmp_path / "tuned")  # a pair of audits' report says it too
    code, _, err = cli(capsys, "report", run, other, "--out", tmp_path / "pair")
    assert code == 0, err
    assert "Unfinished: this run" in (tmp_path / "pair" / "report.md").read_text()
