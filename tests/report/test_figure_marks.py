"""What each report figure draws: the propensity bins as points with their intervals, never joined (a bin is a
category, not a time axis), in bin order across pairs; and every chart of a report captioned with what one mark
is."""

from __future__ import annotations

import html
import re

import pandas as pd
import pytest

from reachlens.report import figures, propensity_figure
from reachlens.report.render import _figures
from reachlens.studies.compare import propensity_bins
from reachlens.stats import wilson_interval


def _questions(propensities, realized_after):
    """Base-reachable, base-unrealized questions with the given base propensities and realization after."""
    n = len(propensities)
    return pd.DataFrame({"base_reachable": [True] * n, "base_realized": [False] * n,
                         "base_propensity": propensities, "trained_realized": realized_after})


def test_propensity_bins_are_points_with_wilson_intervals_and_no_lines():
    # pair a: 3 questions in the lowest bin (1 realized after), 2 in the top bin (2 realized);
    # pair b: only the middle bins
    a = propensity_bins(_questions([0.01, 0.02, 0.03, 0.99, 1.0], [True, False, False, True, True]))
    b = propensity_bins(_questions([0.5, 0.3], [False, True]))
    fig = propensity_figure({"a": a, "b": b})
    assert [t.mode for t in fig.data] == ["markers+text", "markers+text"]  # no line between bins
    first = fig.data[0]
    assert list(first.y) == pytest.approx([1 / 3, 1.0])
    assert list(first.text) == ["1 of 3", "2 of 2"]  # each point labelled with its count of the bin's n
    assert list(fig.data[1].text) == ["1 of 1", "0 of 1"]
    lo, hi = wilson_interval(1, 3)  # the interval drawn is the bin's 95 % Wilson interval
    assert first.error_y.array[0] == pytest.approx(hi - 1 / 3)
    assert first.error_y.arrayminus[0] == pytest.approx(1 / 3 - lo)
    # categories in bin order, whatever pair first has a bin: lowest (a), the middle ones (b), top (a)
    order = list(fig.layout.xaxis.categoryarray)
    assert order == sorted(order, key=lambda b: float(re.match(r"\[([0-9.]+)", b).group(1)))
    assert set(order) == set(a.loc[a["n"] > 0, "bin"]) | set(b.loc[b["n"] > 0, "bin"])
    assert fig.layout.scattermode == "group"  # pairs side by side in a bin, not on top of each other


def test_every_report_chart_has_a_caption_saying_what_one_mark_is(tmp_path):
    from conftest import fake_audit
    from test_report import P4, _begin, _study, _write  # the report test's study on disk

    from reachlens.report import write_report
    from reachlens.studies.training_audit import StudyPlan

    base = fake_audit([False, True, False, False], [1, 4, 2, 0], spec="zoo:base")
    rl = fake_audit([True, True, False, False], [4, 4, 1, 0], spec="zoo:grpo")
    plan = StudyPlan({"base": "zoo:base", "grpo": "zoo:grpo"}, (("base", "grpo"),), P4)
    root = tmp_path / "s"
    _begin(root, plan)
    for name, r in (("base", base), ("grpo", rl)):
        _write(root, name, r)
    study = _study(root, plan)
    drawn = _figures(study)
    assert len(drawn) == 5
    for title, _, caption in drawn:
        assert caption.startswith("One "), (title, caption)  # "One point: ...", "One bar: ..."
    assert set(figures.CAPTIONS) == {name for name in figures.__all__ if name != "CAPTIONS"}
    page = write_report(study, tmp_path / "r")[0].read_text()
    for _, _, caption in drawn:
        assert f"<p class=note>{html.escape(caption)}</p>" in page
