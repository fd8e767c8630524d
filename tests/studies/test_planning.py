"""``reachlens.plan`` and ``reachlens plan`` against computations written here.

Pilots made by hand (conftest's ``fake_audit``) with known per-question rates: the spreads counted here, the
unbiased pass@k with ``math.comb``, the paired z test's n from statsmodels, the exact McNemar n checked by its
own power, and the draws' standard error of O_k (``sqrt((O_2k - O_k) / n)``) against the variance a question of
known rate p has at k, ``pi (1 - pi)`` with ``pi = 1 - (1 - p)^k``.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import fake_audit

from reachlens import Protocol, plan
from reachlens.cli.main import main
from reachlens.errors import ReachlensError
from reachlens.power import mcnemar_mde, mcnemar_power, paired_mde
from reachlens.studies import compare

sm_power = pytest.importorskip("statsmodels.stats.power")

N, K = 400, 16
_rng = np.random.default_rng(11)
P_BASE = _rng.beta(0.6, 1.2, N)  # each question's true per-sample rate
P_TRAINED = np.clip(P_BASE + _rng.normal(0, 0.05, N), 0, 1)
C_BASE, C_TRAINED = _rng.binomial(K, P_BASE), _rng.binomial(K, P_TRAINED)
D_BASE = _rng.random(N) < P_BASE
D_TRAINED = np.where(_rng.random(N) < 0.15, ~D_BASE, D_BASE)
PROTOCOL = Protocol("arith", k=K, temperature=1.0, max_new_tokens=12)
BASE = fake_audit(D_BASE.tolist(), C_BASE.tolist(), k=K, spec="zoo:base", protocol=PROTOCOL)
TRAINED = fake_audit(D_TRAINED.tolist(), C_TRAINED.tolist(), k=K, spec="zoo:grpo", protocol=PROTOCOL)


def pass_at(c, k: int) -> np.ndarray:
    return np.array([1 - math.comb(K - int(x), k) / math.comb(K, k) for x in c])


def test_a_pilot_comparison_measures_each_spread():
    p = plan(compare(BASE, TRAINED), effect=0.05, full_n=1319)
    assert p.kind == "comparison" and p.n == N and p.k == K and p.sizes == [100, 300, 1000, 1319]
    rows = p.quantities.set_index("quantity")
    psi_d = float(np.mean(D_BASE != D_TRAINED))
    assert rows.loc["D", "value"] == pytest.approx(psi_d) and rows.loc["D", "measured"]
    n_d = int(rows.loc["D", "questions"])
    assert mcnemar_power(n_d, psi_d, 0.05) >= 0.8 and rows.loc["D", "n=300"] == mcnemar_mde(300, psi_d)
    psi_o = float(np.mean((C_BASE > 0) != (C_TRAINED > 0)))  # at k = K: the measured share that entered or left
    assert rows.loc[f"O_{K}", "value"] == pytest.approx(psi_o)
    sd = float(np.std(C_TRAINED / K - C_BASE / K, ddof=1))
    assert rows.loc["pass@1", "value"] == pytest.approx(sd)
    n_ref = sm_power.NormalIndPower().solve_power(effect_size=0.05 / sd, nobs1=None, alpha=0.05, power=0.8, ratio=0)
    assert rows.loc["pass@1", "questions"] == math.ceil(n_ref - 1e-6)
    assert rows.loc["pass@1", "n=1319"] == pytest.approx(paired_mde(1319, sd))


def test_the_budget_table_follows_the_pass_at_k_curve():
    p = plan(compare(BASE, TRAINED), k=4)
    b = p.budget.set_index("k")
    assert list(b.index) == [1, 2, 4, 8, 16]
    assert p.quantities["quantity"].tolist() == ["D", "O_4", "pass@1"]
    for k in (1, 4, 8):
        o, o2 = pass_at(C_BASE, k).mean(), pass_at(C_BASE, 2 * k).mean()
        assert b.loc[k, "O_k"] == pytest.approx(o)
        assert b.loc[k, "se"] == pytest.approx(math.sqrt(o * (1 - o) / N))
        assert b.loc[k, "se_draws"] == pytest.approx(math.sqrt((o2 - o) / N))
        pb, pt = pass_at(C_BASE, k), pass_at(C_TRAINED, k)
        assert b.loc[k, "discordance"] == pytest.approx(np.mean(pb * (1 - pt) + pt * (1 - pb)))
    assert math.isnan(b.loc[16, "se_draws"])  # needs 2K samples
    # the draws' part of the error, from the curve alone, against the variance known rates give (sampling noise
    # of the pilot's 16 draws aside: within a fifth)
    for k in (1, 2, 4, 8):
        pi = 1 - (1 - P_BASE) ** k
        assert b.loc[k, "se_draws"] == pytest.approx(math.sqrt(np.mean(pi * (1 - pi)) / N), rel=0.2)
    assert b["se_draws"].iloc[3] < b["se_draws"].iloc[0]  # it shrinks as k grows


def test_one_audit_assumes_uncorrelated_checkpoints():
    p = plan(BASE, full_n=300)
    rows = p.quantities.set_index("quantity")
    d = float(np.mean(D_BASE))
    assert rows.loc["D", "value"] == pytest.approx(2 * d * (1 - d)) and not rows.loc["D", "measured"]
    o = float(np.mean(C_BASE > 0))
    assert rows.loc[f"O_{K}", "value"] == pytest.approx(2 * o * (1 - o))
    assert rows.loc["pass@1", "value"] == pytest.approx(math.sqrt(2) * np.std(C_BASE / K, ddof=1))
    assert p.sizes == [100, 300, 1000]  # the full split (300) is one of the sizes already
    # uncorrelated is the upper bound: the comparison's measured spreads need fewer questions
    measured = plan(compare(BASE, TRAINED), full_n=300).quantities.set_index("quantity")
    assert (measured["questions"] <= rows["questions"]).all()


def test_refusals_name_the_value_and_the_fix(tmp_path):
    with pytest.raises(ReachlensError, match=r"k=32: the pilot has K=16 samples per question; plan at k from 1 to 16"):
        plan(BASE, k=32)
    with pytest.raises(ReachlensError, match=r"effect=1.5 must lie in \(0, 1\), e.g. 0.03 for 3 points"):
        plan(BASE, effect=1.5)
    assert plan(BASE).full_n is None  # a hand-made task: its full split cannot be read (full_n= gives it)


def test_the_command_prints_the_table_and_the_json(tmp_path, capsys):
    base, trained = BASE.save(tmp_path / "base"), TRAINED.save(tmp_path / "grpo")
    assert main(["compare", str(base), str(trained), "--out", str(tmp_path / "cmp")]) == 0
    capsys.readouterr()
    assert main(["plan", "--pilot", str(tmp_path / "cmp"), "--effect", "0.05", "--full-n", "1319"]) == 0
    out = capsys.readouterr().out
    p = plan(tmp_path / "cmp", effect=0.05, full_n=1319)
    assert f"a comparison of zoo:base -> zoo:grpo on arith (test), n={N}, K={K}; full split 1319 questions" in out
    assert "detectable at n=1319 (full split)" in out and "questions for 0.05" in out
    d = p.quantities.set_index("quantity").loc["D"]
    assert f"{int(d['questions']):,}" in out and f"{d['n=300']:.3f}" in out
    assert main(["plan", "--pilot", str(tmp_path / "cmp"), "--effect", "0.05", "--full-n", "1319", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(p.to_dict()))
    assert printed["quantities"][0]["quantity"] == "D" and printed["sizes"] == [100, 300, 1000, 1319]
    assert main(["plan", "--pilot", str(tmp_path / "cmp"), "--effect", "3"]) == 2
    assert "effect=3.0 must lie in (0, 1)" in capsys.readouterr().err
    assert main(["plan", "--pilot", str(tmp_path / "cmp"), "--power", "1"]) == 2
    assert "power=1.0 must lie in (0, 1), e.g. 0.8" in capsys.readouterr().err
