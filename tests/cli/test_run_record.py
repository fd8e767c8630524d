"""One run record: audit, route and recognize each write run.json (format version, kind, status, protocol, model,
data, exec, version, command); `reachlens show` and `reachlens report` read any of them; an audit directory
written before run.json (protocol.json, written here by hand) is refused in one line naming `reachlens convert`,
which rewrites it."""

from __future__ import annotations

import html
import json
import shutil

import pandas as pd
import pytest

import reachlens
from reachlens.cli import main
from reachlens.store import FORMAT_VERSION, RunRecord, read_run


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def runs(tiny_dir, tmp_path_factory):
    """One run of each kind the CLI writes, on the tiny model."""
    root = tmp_path_factory.mktemp("runs")
    model = str(tiny_dir)
    assert main(["audit", model, "--task", "arith", "--n", "3", "--k", "2", "--max-new-tokens", "6",
                 "--out", str(root / "audit")]) == 0
    assert main(["route", model, "--task", "arith", "--n", "2", "--space", "skip", "--search", "random",
                 "--k", "3", "--max-new-tokens", "6", "--out", str(root / "route")]) == 0
    assert main(["recognize", model, "--task", "arith_mc", "--n", "6", "--max-new-tokens", "6",
                 "--min-failures", "1", "--out", str(root / "recognize")]) == 0
    return root


@pytest.mark.parametrize("name,kind", [("audit", "audit"), ("route", "routing"), ("recognize", "recognition")])
def test_every_study_writes_run_json(runs, tiny_dir, name, kind):
    header = json.loads((runs / name / "run.json").read_text())
    assert header["format"] == "reachlens-run" and header["kind"] == kind
    assert header["format_version"] == FORMAT_VERSION and header["status"] == "complete"
    assert header["started"] <= header["finished"] and {"dtype", "device"} <= set(header["exec"])
    assert header["model"]["spec"] == str(tiny_dir) and header["model"]["fingerprint"].startswith("sha256:")
    assert header["reachlens_version"] == reachlens.__version__
    assert header["command"][:2] == ["reachlens", name]
    assert header["data"]["generator"] == "arith" or header["data"]["generator"] == "arith_mc"
    record = RunRecord.from_dict(header)
    assert record.protocol.hash == header["protocol_hash"]
    if kind != "audit":  # routing and recognition decode the deployment alone: the greedy protocol
        assert record.protocol.is_greedy and record.protocol.max_new_tokens == 6


@pytest.mark.parametrize("name,kind", [("audit", "audit"), ("route", "routing"), ("recognize", "recognition")])
def test_show_reads_every_run(capsys, runs, tiny_dir, name, kind):
    code, out, err = run(capsys, "show", runs / name)
    assert code == 0, err
    assert f"kind:       {kind}" in out and str(tiny_dir) in out and "protocol:   task=arith" in out
    assert f"format:     reachlens-run, version {FORMAT_VERSION}" in out and "status:     complete (started " in out
    assert f"command:    reachlens {name}" in out and "summary:" in out
    if kind == "audit":
        assert "  D: " in out and "  O_K: " in out
    if kind == "routing":
        assert "  D: " in out and "  O_K: " in out and "options:    config:" in out


def test_routing_tables_speak_realized_and_reachable(runs):
    q = pd.read_parquet(runs / "route" / "questions.parquet")
    assert {"realized", "reachable", "deployed_answer"} <= set(q.columns)
    assert not {"greedy", "oracle", "greedy_answer"} & set(q.columns)
    summary = json.loads((runs / "route" / "summary.json").read_text())
    assert summary["D"] == pytest.approx(q["realized"].mean()) and summary["O_K"] == pytest.approx(q["reachable"].mean())
    rec = pd.read_parquet(runs / "recognize" / "questions.parquet")
    assert {"realized", "deployed_text", "deployed_answer", "deployed_scored"} <= set(rec.columns)
    assert not any(c.startswith("gen_") for c in rec.columns)


@pytest.mark.parametrize("name", ["audit", "route", "recognize"])
def test_report_takes_any_run(capsys, runs, tmp_path, name):
    code, out, err = run(capsys, "report", runs / name, "--out", tmp_path / name)
    assert code == 0, err
    md = (tmp_path / name / "report.md").read_text()
    html = (tmp_path / name / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<script src=" not in html  # self-contained
    if name == "audit":
        spec = json.loads((runs / name / "run.json").read_text())["model"]["spec"]
        assert "Realized vs reachable" in html and f"# Audit of {spec}" in md
        assert f"| {spec} | " in md  # the audit's row in the checkpoint table, named by its model
    else:
        assert "## Summary" in md and "| D |" in md and "## Per question" in md and "| status | complete |" in md


def test_a_routing_report_draws_reachable_against_each_selector(capsys, runs, tmp_path):
    """The routing page's chart: D and O_K with their Wilson intervals (statsmodels' here), then each selector's
    accuracy, each the mean of its column of the questions table, labelled with its gap to O_K."""
    from statsmodels.stats.proportion import proportion_confint

    from reachlens.report.render import FIGURES

    routing = read_run(runs / "route")
    q = routing.questions
    (title, fig, caption), = FIGURES["routing"](routing)
    d, o, sel = fig.data
    n = len(q)
    for bar, column in ((d, "realized"), (o, "reachable")):
        v = q[column].mean()
        lo, hi = proportion_confint(round(v * n), n, alpha=0.05, method="wilson")
        assert bar.x[0] == pytest.approx(v)
        assert (v - bar.error_x.arrayminus[0], v + bar.error_x.array[0]) == pytest.approx((lo, hi))
    assert list(sel.y) == [f"selector: {s}" for s in routing.selectors]
    assert list(sel.x) == pytest.approx([q[s].mean() for s in routing.selectors])
    assert list(sel.text) == [f"{q[s].mean():.1%}, gap {q['reachable'].mean() - q[s].mean():+.1%}"
                              for s in routing.selectors]
    code, _, err = run(capsys, "report", runs / "route", "--out", tmp_path / "r")
    page = (tmp_path / "r" / "report.html").read_text()
    assert code == 0 and page.count("Plotly.newPlot") == 1 and "<script src=" not in page
    assert html.escape(caption) in page


def test_a_rerun_with_other_options_is_refused(capsys, runs, tiny_dir, tmp_path):
    out = tmp_path / "route"
    shutil.copytree(runs / "route", out)
    code, _, err = run(capsys, "route", tiny_dir, "--task", "arith", "--n", "2", "--space", "skip", "--search",
                       "random", "--k", "4", "--max-new-tokens", "6", "--out", out)
    assert code == 2 and "holds another run" in err and "options.config" in err and err.count("\n") == 1
    assert "--out" in err  # the library's out= as the command's flag


def test_an_audit_directory_in_the_old_layout_is_refused_until_converted(capsys, runs, tmp_path):
    """protocol.json (the header before run.json), written by hand as reachlens wrote it then."""
    old = tmp_path / "old"
    old.mkdir()
    new_header = json.loads((runs / "audit" / "run.json").read_text())
    (old / "protocol.json").write_text(json.dumps({
        "format": "reachlens-audit", "protocol": new_header["protocol"], "protocol_hash": new_header["protocol_hash"],
        "model": new_header["model"], "data": new_header["data"], "task_source": "arith (generated)",
        "n_questions": 3,
    }, indent=2))
    for name in ("questions.parquet", "samples.parquet", "summary.json"):
        shutil.copy(runs / "audit" / name, old / name)
    code, _, err = run(capsys, "show", old)
    assert code == 2 and "if an older reachlens wrote it" in err and f"reachlens convert {old}" in err
    assert err.count("\n") == 1
    code, out, _ = run(capsys, "convert", old)
    assert code == 0 and f"converted (protocol.json -> format {FORMAT_VERSION})" in out
    assert (old / "run.json").is_file() and not (old / "protocol.json").exists()
    result = read_run(old)
    want = read_run(runs / "audit")
    assert result.kind == "audit" and result.record.status == "complete"
    assert result.record.exec == {"max_batch_rows": "unknown", "dtype": "unknown", "device": "unknown"}
    pd.testing.assert_frame_equal(result.questions, want.questions)
    pd.testing.assert_frame_equal(result.samples, want.samples)
    code, out, _ = run(capsys, "show", old)
    assert code == 0 and "kind:       audit" in out and "unknown" in out.split("exec:")[1].splitlines()[0]
    code, out, _ = run(capsys, "convert", old)
    assert code == 0 and "already in the run format" in out


def test_show_of_a_folder_that_is_not_a_run_is_one_line(capsys, tmp_path):
    code, _, err = run(capsys, "show", tmp_path)
    assert code == 2 and "is not a reachlens run directory (no run.json)" in err and err.count("\n") == 1


def test_a_causal_sweep_is_a_run_too(capsys, runs, tiny_dir, tmp_path):
    out = tmp_path / "silence"
    argv = ["silence", tiny_dir, "--sets", runs / "recognize", "--layers", "0", "--components", "mlp", "--out", out]
    code, _, err = run(capsys, *argv)
    assert code == 0, err
    header = json.loads((out / "run.json").read_text())
    assert header["kind"] == "silence" and header["model"]["spec"] == str(tiny_dir)
    assert header["protocol"] == json.loads((runs / "recognize" / "run.json").read_text())["protocol"]
    code, shown, _ = run(capsys, "show", out)
    assert code == 0 and "kind:       silence" in shown and "n_conditions: 2" in shown
    code, _, err = run(capsys, *argv[:-4], "--layers", "1", "--components", "mlp", "--out", out)
    assert code == 2 and "holds another run" in err and "options.layers" in err
