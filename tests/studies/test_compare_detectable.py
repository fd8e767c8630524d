"""Every delta of a comparison beside the effect it could have detected: the summary, the printout, the report.

The minimum detectable effects are checked against computations written here: McNemar's from the discordant
counts counted by hand (the power module itself is checked against simulation in tests/test_power.py), pass@k's
from statsmodels' one-sample z test (``NormalIndPower``, ``ratio=0``) and the standard deviation of per-question
unbiased pass@k differences computed with ``math.comb``. The same numbers must appear in ``summary.json``, the
``reachlens compare`` printout and the report.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import fake_audit

from reachlens.cli.main import main
from reachlens.power import mcnemar_mde, mde_verdict
from reachlens.studies import compare

sm_power = pytest.importorskip("statsmodels.stats.power")

N, K = 300, 4
_rng = np.random.default_rng(39)
_BASE_D = _rng.random(N) < 0.4
_TRAINED_D = np.where(_rng.random(N) < 0.2, ~_BASE_D, _BASE_D)  # a fifth of the questions change, either way
_BASE_C = _rng.binomial(K, 0.3, N)
_TRAINED_C = np.clip(_BASE_C + _rng.integers(-1, 2, N), 0, K)
BASE = fake_audit(_BASE_D.tolist(), _BASE_C.tolist(), spec="zoo:base")
TRAINED = fake_audit(_TRAINED_D.tolist(), _TRAINED_C.tolist(), spec="zoo:dapo")


def pass_at(c: int, k: int) -> float:
    return 1 - math.comb(K - c, k) / math.comb(K, k)


def test_every_delta_carries_its_minimum_detectable_effect():
    c = compare(BASE, TRAINED)
    s = c.summary()
    changed = int(np.sum(_BASE_D != _TRAINED_D))
    assert (s["gained"] + s["lost"]) == changed
    assert s["delta_D_mde"] == mcnemar_mde(N, changed / N)
    moved = int(np.sum((_BASE_C > 0) != (_TRAINED_C > 0)))
    assert s["delta_O_K_mde"] == mcnemar_mde(N, moved / N)
    assert s["mde_power"] == 0.8 and s["mde_alpha"] == 0.05
    for k in (1, 2, 4):
        d = [pass_at(t, k) - pass_at(b, k) for b, t in zip(_BASE_C, _TRAINED_C)]
        sd = float(np.std(d, ddof=1))
        es = sm_power.NormalIndPower().solve_power(effect_size=None, nobs1=N, alpha=0.05, power=0.8, ratio=0)
        assert s["delta_pass_at_k"][k]["mde"] == pytest.approx(es * sd, rel=1e-4)
    # every majority here is 0 or 1: McNemar's MDE at the share of questions whose majority changed
    d = (c.questions["trained_majority"] - c.questions["base_majority"]).to_numpy()
    assert s["majority_test"] == "mcnemar"
    assert s["delta_maj_K_mde"] == mcnemar_mde(N, float(np.mean(d != 0)))


def test_the_printout_the_summary_and_the_report_give_the_same_numbers(tmp_path, capsys):
    base, trained = BASE.save(tmp_path / "base"), TRAINED.save(tmp_path / "dapo")
    capsys.readouterr()
    assert main(["compare", str(base), str(trained), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    s = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    verdicts = {key: mde_verdict(s[f"{key}_ci"], s[f"{key}_mde"]) for key in ("delta_D", "delta_O_K", "delta_maj_K")}
    for key, verdict in verdicts.items():
        assert f"{s[key]:+.3f} [{s[f'{key}_ci'][0]:+.3f}, {s[f'{key}_ci'][1]:+.3f}]: {verdict}" in out
    for k, d in s["delta_pass_at_k"].items():
        assert f"k={int(k):<4d} {d['delta']:+.3f}" in out and mde_verdict(d["ci"], d["mde"]) in out
    assert "not detected; detectable at this n: >= " in out
    assert main(["report", str(tmp_path / "cmp")]) == 0
    md = (tmp_path / "cmp" / "report.md").read_text()
    html = (tmp_path / "cmp" / "report.html").read_text()
    for verdict in verdicts.values():
        assert verdict.replace(">", "\\>") in md or verdict in md
        assert verdict.replace(">", "&gt;") in html
    assert "detectable at this n (80% power)" in md


def test_convert_adds_the_new_keys_to_a_stored_summary(tmp_path):
    """A comparison saved before the minimum detectable effects: its summary.json is made again by convert (the
    existing step for summaries that lack today's keys); its report and printout need nothing."""
    from reachlens.store.convert import convert

    base, trained = BASE.save(tmp_path / "base"), TRAINED.save(tmp_path / "dapo")
    compare(base, trained).save(tmp_path / "cmp")
    path = tmp_path / "cmp" / "summary.json"
    today = json.loads(path.read_text())
    old = {k: v for k, v in today.items() if not k.endswith("_mde") and k not in ("mde_power", "mde_alpha")}
    old["delta_pass_at_k"] = {k: {x: y for x, y in v.items() if x != "mde"} for k, v in today["delta_pass_at_k"].items()}
    path.write_text(json.dumps(old))
    (what,) = [w for d, w in convert(tmp_path / "cmp") if d == tmp_path / "cmp"]
    assert what.startswith("summary made again from its tables (new: delta_D_mde, delta_O_K_mde")
    assert json.loads(path.read_text()) == today
