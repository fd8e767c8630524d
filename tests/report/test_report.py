"""The report renders: each figure as headless Chromium draws it, its axes fitting its data; tables in Markdown."""

from __future__ import annotations

import dataclasses

import html
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import fake_audit

from reachlens import Protocol
from reachlens.report import write_report
from reachlens.store import RunDir, RunRecord, read_run
from reachlens.studies.training_audit import StudyLayout, StudyPlan

P4 = Protocol("arith", k=4, temperature=1.0, max_new_tokens=12)


def _record(plan: StudyPlan) -> RunRecord:
    return RunRecord.new("training_audit", plan.protocol, dict(plan.models), None,
                         {k: v for k, v in plan.to_dict().items() if k != "protocol"})


def _begin(root: Path, plan: StudyPlan) -> None:
    """Start a study run in ``root`` (its audits are written inside it next)."""
    RunDir(root).begin(_record(plan))


def _write(study_dir: Path, name: str, result, **change) -> None:
    """An audit of a study, where a study keeps it (a rerun named by ``change``)."""
    result.save(StudyLayout(study_dir).audit(name, **change))


def _roles(root: Path) -> dict[str, str]:
    """Each audit ``_write`` saved under ``root``, by its role in the study (the change its folder name says)."""
    groups = {"": "audit", "k": "extended", "prompt_format": "format", "max_new_tokens": "longer"}
    roles = {}
    for folder in sorted((root / "audits").iterdir()):
        name, _, change = folder.name.partition("--")
        key = next((k for k in groups if k and k in change), "")
        roles[f"{groups[key]}:{name}"] = f"audits/{folder.name}"
    return roles


def _study(root: Path, plan: StudyPlan, wall_seconds: dict | None = None):
    """The study run begun in ``root``, completed (its audits its children) and read back."""
    run = RunDir(root)
    with run.writer():
        run.start(dataclasses.replace(_record(plan), children=_roles(root)))
        run.finish({"wall_seconds": wall_seconds or {}})
    return read_run(root)


@pytest.fixture()
def study(tmp_path):
    base = fake_audit([True, False, False, False, True], [4, 2, 1, 0, 3], spec="zoo:base")
    rl = fake_audit([True, True, True, False, False], [4, 4, 3, 0, 1], spec="zoo:grpo")
    big_base = fake_audit([True, False, False, False, True], [8, 3, 2, 1, 6], k=8, spec="zoo:base", protocol=P4.with_k(8))
    big_rl = fake_audit([True, True, True, False, False], [8, 8, 6, 0, 2], k=8, spec="zoo:grpo", protocol=P4.with_k(8))
    plan = StudyPlan({"base": "zoo:base", "grpo": "zoo:grpo"}, (("base", "grpo"),), base.protocol, extended_k=8)
    _begin(tmp_path, plan)
    _write(tmp_path, "base", base)
    _write(tmp_path, "grpo", rl)
    _write(tmp_path, "base", big_base, k=8)
    _write(tmp_path, "grpo", big_rl, k=8)
    return _study(tmp_path, plan, {"base": 1.0})


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
    assert page.count("Plotly.newPlot") == 5


def test_one_audit_report_has_only_the_sections_one_audit_has(tmp_path):
    """A lone audit's page is titled by its model and shows its checkpoint table and charts; the pair-only
    sections (headlines, crossovers, controls, propensity bins) are left out rather than printed as (none)."""
    from reachlens.report import report_run

    audit = fake_audit([True, False, False, True], [4, 2, 0, 3], spec="zoo:base")
    audit.save(tmp_path / "first")
    html_path, md_path = report_run(tmp_path / "first")
    md, page = md_path.read_text(), html_path.read_text()
    headings = re.findall(r"^## (.+)$", md, flags=re.M)
    assert md.splitlines()[1] == "# Audit of zoo:base" and headings == ["Checkpoints"]
    assert "| zoo:base | 4 | 0.500" in md  # the checkpoint is its model, not its folder's name
    assert "(none)" not in page and "Propensity bins" not in page and "Headline" not in page
    assert "<h1>Audit of zoo:base: realized vs reachable</h1>" in page
    assert re.findall(r"<h2>([^<]+)</h2>", page) == ["Realized vs reachable", "pass@k curves", "Checkpoints"]


# Appended to a copy of the report: once plotly has drawn, write what every figure's axes show
# (``_fullLayout``, the ranges plotly computed) and what it plots (``_fullData``) into the DOM as JSON.
_PROBE = """<script>
window.addEventListener('load', () => setTimeout(() => {
  const arr = (a) => (a === undefined || a === null) ? [] : Array.from(a);
  const out = [];
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    const fl = gd._fullLayout, axes = {};
    for (const key of Object.keys(fl)) {
      if (/^[xy]axis[0-9]*$/.test(key)) {
        axes[key] = {range: arr(fl[key].range), type: fl[key].type, categories: arr(fl[key]._categories)};
      }
    }
    const data = gd._fullData.filter(t => t.visible === true).map(t => ({
      type: t.type, name: t.name, mode: t.mode, x: arr(t.x), y: arr(t.y), xaxis: t.xaxis, yaxis: t.yaxis,
      err_plus: (t.error_y && t.error_y.visible) ? arr(t.error_y.array) : [],
      err_minus: (t.error_y && t.error_y.visible) ? arr(t.error_y.arrayminus) : []}));
    out.push({title: fl.title.text, barmode: fl.barmode, axes, data, width: fl.width, height: fl.height});
  }
  const pre = document.createElement('pre');
  pre.id = 'reachlens-probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 200));
</script>"""

_CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                   "--disable-background-networking", "--disable-component-update", "--disable-sync",
                   "--hide-scrollbars", "--virtual-time-budget=15000"]


def _render(chromium: str, html_path: Path, work: Path) -> tuple[list[dict], Path]:
    """The figures as Chromium drew them (axes and data) and a full-page screenshot."""
    probed = work / "probed.html"
    probed.write_text(html_path.read_text().replace("</body>", _PROBE + "</body>"))
    dom = subprocess.run([chromium, *_CHROMIUM_FLAGS, f"--user-data-dir={work / 'chrome-dom'}", "--dump-dom",
                          probed.as_uri()], capture_output=True, text=True, timeout=180).stdout
    found = re.search(r'<pre id="reachlens-probe">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    shot = work / "report.png"
    subprocess.run([chromium, *_CHROMIUM_FLAGS, f"--user-data-dir={work / 'chrome-shot'}", "--window-size=1280,9000",
                    f"--screenshot={shot}", html_path.as_uri()], capture_output=True, timeout=180)
    keep = os.environ.get("REACHLENS_SCREENSHOT_DIR")  # to look at it: REACHLENS_SCREENSHOT_DIR=/tmp/shots
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / f"{html_path.parent.parent.name}-{html_path.parent.name}.png")
    return json.loads(html.unescape(found.group(1))), shot


def _extent(fig: dict, axis: str) -> tuple[float, float] | None:
    """(lo, hi) of everything plotted on ``axis`` (``xaxis``, ``yaxis2``, ...) in the axis' own units."""
    ax = fig["axes"][axis]
    letter, ref = axis[0], axis[0] + axis[5:]  # "yaxis2" -> "y", "y2"
    values: list[float] = []
    stacks: dict[str, list[float]] = {}
    for t in fig["data"]:
        if t[f"{letter}axis"] != ref:
            continue
        vals = t[letter]
        if ax["type"] == "category":
            values += [ax["categories"].index(v) for v in vals]
            continue
        vals = [float(v) for v in vals if v is not None and not math.isnan(float(v))]
        if letter == "y" and t["err_plus"]:
            values += [v + e for v, e in zip(vals, t["err_plus"])] + [v - e for v, e in zip(vals, t["err_minus"])]
        if t["type"] == "bar" and letter == "y":
            values.append(0.0)  # a bar starts at 0
            if fig["barmode"] == "relative":  # stacked: each category's positive and negative sums
                for x, v in zip(t["x"], vals):
                    pos_neg = stacks.setdefault(str(x), [0.0, 0.0])
                    pos_neg[v < 0] += v
                continue
        values += vals
    values += [v for pn in stacks.values() for v in pn]
    if not values:
        return None
    if ax["type"] == "log":
        values = [math.log10(v) for v in values]
    return min(values), max(values)


def _check_axes(figs: list[dict]) -> None:
    """Every axis covers what it plots and nothing more (beyond plotly's padding)."""
    for fig in figs:
        assert fig["axes"], f"{fig['title']!r} has no axes"
        for axis in fig["axes"]:
            ext = _extent(fig, axis)
            assert ext is not None, f"{fig['title']!r}: nothing plotted on {axis}"
            lo, hi = ext
            r0, r1 = fig["axes"][axis]["range"]
            where = f"{fig['title']!r} {axis} ({fig['axes'][axis]['type']}): range [{r0}, {r1}], data [{lo}, {hi}]"
            assert r0 <= lo + 1e-9 and r1 >= hi - 1e-9, "data outside the axis: " + where
            if fig["axes"][axis]["type"] == "category":
                assert r1 - r0 <= (hi - lo) + 2, "empty categories: " + where  # a lone category gets [-1, 1]
            elif hi > lo:
                assert (hi - lo) >= 0.6 * (r1 - r0), "the axis is mostly empty (data squashed): " + where


@pytest.fixture()
def crossing_study(tmp_path):
    """A study whose pass@k curves cross at k=4 (the trained model ahead at k=1, the base from k=4)."""
    base = fake_audit([False] * 8, [1] * 8, spec="zoo:base")
    rl = fake_audit([True, True, False, False] * 2, [4, 4, 0, 0] * 2, spec="zoo:grpo")
    big_base = fake_audit([False] * 8, [2] * 8, k=8, spec="zoo:base", protocol=P4.with_k(8))
    big_rl = fake_audit([True, True, False, False] * 2, [8, 8, 0, 0] * 2, k=8, spec="zoo:grpo", protocol=P4.with_k(8))
    plan = StudyPlan({"base": "zoo:base", "grpo": "zoo:grpo"}, (("base", "grpo"),), base.protocol, extended_k=8)
    root = tmp_path / "crossing"
    _begin(root, plan)
    for name, r in (("base", base), ("grpo", rl)):
        _write(root, name, r)
    for name, r in (("base", big_base), ("grpo", big_rl)):
        _write(root, name, r, k=8)
    return _study(root, plan)


@pytest.mark.parametrize("which", ["study", "crossing_study"])
def test_html_renders_in_headless_chromium_with_axes_that_fit_the_data(which, request, tmp_path, chromium):
    study = request.getfixturevalue(which)
    html_path, _ = write_report(study, tmp_path / which / "r")
    figs, shot = _render(chromium, html_path, tmp_path / which)
    titles = [f["title"] for f in figs]
    assert len(figs) == 5, titles
    for title in ("Per-question fates", "Realized vs reachable per checkpoint", "pass@k per checkpoint",
                  "realized after training, by base propensity", "pass@k difference"):
        assert any(title in t for t in titles), (title, titles)
    _check_axes(figs)
    by_title = {f["title"].split(" (")[0]: f for f in figs}
    curves = by_title["pass@k per checkpoint"]
    assert curves["axes"]["xaxis"]["type"] == "log"
    marks = [t for t in curves["data"] if t["name"].startswith("crossing")]
    if which == "crossing_study":
        # the crossing is drawn at k=4 in data coordinates, on the log axis' own scale (log10 4 = 0.60)
        assert [m["x"] for m in marks] == [[4]]
        r0, r1 = curves["axes"]["xaxis"]["range"]
        assert r0 < 0 < math.log10(4) < math.log10(8) < r1 < 1.1
        delta = by_title["pass@k difference"]
        band = [t for t in delta["data"] if t["name"].endswith("95 % interval")]
        assert band and band[0]["y"] and min(band[0]["y"]) < 0  # the interval band is drawn
    else:
        assert marks == []
    assert shot.is_file() and shot.stat().st_size > 50_000  # a drawn page, not a blank one


def test_the_old_log_axis_marker_bug_would_be_caught():
    """The check above on a figure like the old one: a line at k=8 on a log axis read as 10^8."""
    squashed = {"title": "old", "barmode": "group",
                "axes": {"xaxis": {"range": [-0.5, 8.4], "type": "log", "categories": []},
                         "yaxis": {"range": [0, 1], "type": "linear", "categories": []}},
                "data": [{"type": "scatter", "name": "base", "x": [1, 2, 4, 8], "y": [0.3, 0.5, 0.7, 0.9],
                          "xaxis": "x", "yaxis": "y", "err_plus": [], "err_minus": []}]}
    with pytest.raises(AssertionError, match="mostly empty"):
        _check_axes([squashed])


# --- a training trajectory: realization and reachability over training -------------------------------------
P8 = Protocol("arith", k=8, temperature=1.0, max_new_tokens=12)
TRAJ = {  # name: (step, realized flags, correct samples of 8) over 12 questions
    "base": (0, [1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0], [5, 1, 0, 2, 7, 0, 4, 1, 0, 3, 6, 0]),
    "run-s10": (10, [1, 1, 0, 0, 1, 0, 1, 0, 0, 1, 1, 0], [6, 2, 0, 1, 8, 0, 5, 2, 0, 4, 6, 1]),
    "run": (30, [1, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 0], [8, 6, 3, 0, 8, 0, 8, 5, 0, 7, 8, 0]),
}


@pytest.fixture()
def trajectory_study(tmp_path):
    models = {name: f"zoo:{name}" for name in TRAJ}
    # listed out of step order on purpose: the table is ordered by step
    plan = StudyPlan(models, (("base", "run"),), P8, trajectory={"run": 30, "base": 0, "run-s10": 10})
    _begin(tmp_path, plan)
    for name, (_, realized, correct) in TRAJ.items():
        _write(tmp_path, name, fake_audit([bool(x) for x in realized], correct, k=8, spec=f"zoo:{name}", protocol=P8))
    return _study(tmp_path, plan)


def test_trajectory_table_against_scipy_and_statsmodels(trajectory_study):
    from scipy.special import comb
    from scipy.stats import binomtest
    from statsmodels.stats.multitest import multipletests
    from statsmodels.stats.proportion import proportion_confint

    t = trajectory_study.trajectory().set_index("model")
    assert t.index.tolist() == ["base", "run-s10", "run"] and t["step"].tolist() == [0, 10, 30]
    _, base_realized, base_correct = TRAJ["base"]
    p_d, p_o = [], []
    for name, (step, realized, correct) in TRAJ.items():
        row = t.loc[name]
        n = len(realized)
        lo, hi = proportion_confint(sum(realized), n, method="wilson")
        assert row["D"] == pytest.approx(sum(realized) / n) and (row["D_lo"], row["D_hi"]) == pytest.approx((lo, hi))
        reach = sum(c > 0 for c in correct)
        lo, hi = proportion_confint(reach, n, method="wilson")
        assert row["O_K"] == pytest.approx(reach / n) and (row["O_K_lo"], row["O_K_hi"]) == pytest.approx((lo, hi))
        assert row["pass@1"] == pytest.approx(sum(correct) / (8 * n))
        # pass@8 with 8 samples: 1 - C(8-c, 8)/C(8, 8), i.e. reachable
        assert row["pass@8"] == pytest.approx(sum(1 - comb(8 - c, 8) / comb(8, 8) for c in correct) / n)
        assert row["pass@1_lo"] <= row["pass@1"] <= row["pass@1_hi"]
        if name == "base":
            assert row["delta_D"] == 0 and math.isnan(row["delta_D_p"])
            continue
        gained = sum(a and not b for a, b in zip(realized, base_realized))
        lost = sum(b and not a for a, b in zip(realized, base_realized))
        assert row["delta_D"] == pytest.approx((gained - lost) / n)
        p = binomtest(gained, gained + lost, 0.5).pvalue
        assert row["delta_D_p"] == pytest.approx(p)
        p_d.append(p)
        entered = sum(a > 0 and b == 0 for a, b in zip(correct, base_correct))
        left = sum(a == 0 and b > 0 for a, b in zip(correct, base_correct))
        assert row["delta_O_K"] == pytest.approx((entered - left) / n)
        p_o.append(binomtest(entered, entered + left, 0.5).pvalue if entered + left else 1.0)
        assert row["delta_pass@1"] == pytest.approx((sum(correct) - sum(base_correct)) / (8 * n))
        assert row["delta_pass@1_lo"] <= row["delta_pass@1"] <= row["delta_pass@1_hi"]
    # Holm over the run's later steps, one family per quantity
    assert t["delta_D_p_holm"].iloc[1:].tolist() == pytest.approx(multipletests(p_d, method="holm")[1].tolist())
    assert t["delta_O_K_p_holm"].iloc[1:].tolist() == pytest.approx(multipletests(p_o, method="holm")[1].tolist())
    # the last step's pass@1 gain (0.208 over 12 questions, 11 of them up or equal) is outside noise
    assert t.loc["run", "delta_pass@1_lo"] > 0


def test_trajectory_budget_control_covers_the_pairs_only(trajectory_study):
    assert trajectory_study.plan.paired_models == ["base", "run"]
    plan = StudyPlan({"a": "x", "b": "y"}, (), P8)
    assert plan.paired_models == ["a", "b"]  # a study without pairs extends every checkpoint


def test_trajectory_plan_is_checked_and_round_trips():
    from reachlens.errors import ReachlensError

    models = {"base": "zoo:base", "run": "zoo:run"}
    with pytest.raises(ReachlensError, match="trajectory names 'other'"):
        StudyPlan(models, (), P8, trajectory={"other": 0})
    with pytest.raises(ReachlensError, match="the same step"):
        StudyPlan(models, (), P8, trajectory={"base": 0, "run": 0})
    with pytest.raises(ReachlensError, match="steps are integers >= 0"):
        StudyPlan(models, (), P8, trajectory={"base": -1})
    plan = StudyPlan(models, (), P8, trajectory={"base": 0, "run": 30})
    assert StudyPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    # a plan without a trajectory round-trips too (an older study's record without one: `reachlens convert`)
    assert StudyPlan.from_dict(json.loads(json.dumps(StudyPlan(models, (), P8).to_dict()))).trajectory == {}


def test_trajectory_in_the_report(trajectory_study, tmp_path):
    html_path, md_path = write_report(trajectory_study, tmp_path / "r")
    page = html_path.read_text()
    assert "Realization and reachability over training" in page
    md = md_path.read_text()
    assert "## Trajectory: realization and reachability over training" in md
    assert "| 30 | run |" in md and "Holm" in md


def test_trajectory_figure_renders_in_headless_chromium(trajectory_study, tmp_path, chromium):
    html_path, _ = write_report(trajectory_study, tmp_path / "trajectory" / "r")
    figs, shot = _render(chromium, html_path, tmp_path / "trajectory")
    _check_axes(figs)
    fig = next(f for f in figs if f["title"].startswith("Realization and reachability over training"))
    assert fig["axes"]["xaxis"]["type"] == "linear"
    t = trajectory_study.trajectory()
    # top panel: the levels, each point with its interval
    lines = {tr["name"].split(":")[0].split(" (")[0]: tr for tr in fig["data"]
             if tr["yaxis"] == "y" and tr["mode"] == "lines+markers"}
    assert set(lines) == {"D", "O_8", "pass@1", "pass@8"}
    for name, col in (("D", "D"), ("O_8", "O_K"), ("pass@1", "pass@1"), ("pass@8", "pass@8")):
        assert lines[name]["x"] == [0, 10, 30]  # each checkpoint at its optimizer step, in order
        assert lines[name]["y"] == pytest.approx(t[col].tolist())
        assert lines[name]["err_plus"] and len(lines[name]["err_plus"]) == 3  # every point carries its interval
    # bottom panel: the change from step 0 of D, O_K and pass@1, each inside its paired band (drawn as its bounds)
    changes = [tr for tr in fig["data"] if tr["yaxis"] == "y2" and tr["mode"] == "lines+markers"]
    assert len(changes) == 3
    bounds = [tr["y"] for tr in fig["data"] if tr["yaxis"] == "y2" and tr["mode"] == "lines" and len(tr["y"]) == 3]
    for col, tr in zip(("delta_O_K", "delta_D", "delta_pass@1"), changes):
        assert tr["x"] == [0, 10, 30] and tr["y"] == pytest.approx(t[col].tolist())
        want_hi, want_lo = t[f"{col}_hi"].fillna(0).tolist(), t[f"{col}_lo"].fillna(0).tolist()
        assert any(b == pytest.approx(want_hi) for b in bounds) and any(b == pytest.approx(want_lo) for b in bounds)
    for axis in ("xaxis", "xaxis2"):
        r0, r1 = fig["axes"][axis]["range"]
        assert r0 <= 0 and 30 <= r1 < 40
    assert shot.is_file() and shot.stat().st_size > 50_000


def test_a_reloaded_study_reads_in_plan_order_and_the_pass_at_k_chart_draws_the_pairs(tmp_path):
    """run.json keeps no key order (the store sorts keys), so a reloaded study orders its checkpoints by the
    plan: the pairs' checkpoints as the pairs name them, then the trajectory's by step (not "s100" before "s25");
    a trajectory-only checkpoint is left out of the pass@k chart (it has the trajectory figure)."""
    steps = {"zeta": 0, "run-s25": 25, "run-s100": 100, "alpha": 200}
    models = {name: f"zoo:{name}" for name in steps}
    plan = StudyPlan(models, (("zeta", "alpha"),), P8, trajectory=steps)
    assert plan.model_order == ["zeta", "alpha", "run-s25", "run-s100"]
    assert plan.paired_models == ["zeta", "alpha"]
    _begin(tmp_path, plan)
    for i, name in enumerate(steps):
        _write(tmp_path, name, fake_audit([True, False, False, i % 2 == 0], [3, 1, 0, i], k=8, spec=f"zoo:{name}",
                                          protocol=P8))
    study = _study(tmp_path, plan)
    assert list(study.audits) == ["zeta", "alpha", "run-s25", "run-s100"]
    assert study.trajectory()["model"].tolist() == ["zeta", "run-s25", "run-s100", "alpha"]
    page = write_report(study, tmp_path / "r")[0].read_text()
    names = set(re.findall(r'"name":"([^"]+)"', page))
    assert {"zeta", "alpha"} <= names and not {"run-s25", "run-s100"} & names, sorted(names)


def test_a_long_cell_is_cut_on_the_page_with_its_whole_text_as_tooltip():
    """A model's 300-digit "answer" does not widen its column: the page shows CELL_CHARS - 1 characters and an
    ellipsis, the whole (escaped) text in the cell's title; names, short cells and kv tables are untouched."""
    import pandas as pd

    from reachlens.report.page import CELL_CHARS, html_table, kv_table

    long = "4" * 300 + '<b>"x"</b>'
    name = "graft:kind=zero:layer=3:placebo=true [intervention]"
    page = html_table(pd.DataFrame({"question_id": ["q1", name], "deployed_answer": [long, "17"]}))
    cells = re.findall(r"<td( title=\"[^\"]*\")?>([^<]*)</td>", page)
    assert cells[1] == (f' title="{html.escape(long, quote=True)}"', "4" * (CELL_CHARS - 1) + "…")
    assert cells[0] == ("", "q1") and cells[2] == ("", html.escape(name)) and cells[3] == ("", "17")
    assert html.unescape(re.search(r'title="([^"]*)"', page).group(1)) == long
    assert "4" * 300 in kv_table(pd.DataFrame([("command", "4" * 300)], columns=["field", "value"]))


def test_a_p_value_column_keeps_two_significant_digits_where_other_numbers_keep_three_decimals():
    """A permutation p of 1 / 10,001 reads 0.0001 on the page, not 0.000 (which reads as impossible); the
    sampling parameter ``top_p`` and the other floats keep the page's three decimals."""
    import pandas as pd

    from reachlens.report.page import html_table

    df = pd.DataFrame({"difference": [0.33], "p": [1 / 10001], "p_realized": [0.25], "mcnemar_p": [0.0123456],
                       "top_p": [0.95], "uplift": [0.0001]})
    cells = re.findall(r"<td>([^<]*)</td>", html_table(df))
    assert cells == ["0.330", "0.0001", "0.25", "0.012", "0.950", "0.000"]
