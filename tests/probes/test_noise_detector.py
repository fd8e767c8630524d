"""The weight-noise detector (Tice et al.'s best single noised model against a best-of-K null on never-locked models).

References: the best draw of a small hand-built bank against numpy's argmax over its correctness matrix; the null's
threshold and p-value against the values worked out by hand for 19 gains (rank ceil(0.95 x 20) = 19)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import numpy as np
import pytest

from reachlens.errors import ReachlensError
from reachlens.probes.bank import bank_frame, bank_row
from reachlens.probes.noise_detector import BestDraw, best_draw, calibrate, detect
from reachlens.records import candidate_row

PROBE = "weight_noise:sigma=0.01,0.02,0.04:k=2:seed=3"


def _bank(greedy: np.ndarray, draws: np.ndarray, arms: list[str]):
    done = NS(text="", token_ids=(1,), finish_reason="stop", mean_logprob=-1.0)
    rows = []
    for q, ok in enumerate(greedy):
        rows.append(bank_row(candidate_row(f"q{q}", 0, done, {"answer": "", "correct": bool(ok), "scored": True}),
                             "greedy", "greedy", False))
        for c, arm in enumerate(arms):
            cand = candidate_row(f"q{q}", c, done, {"answer": "", "correct": bool(draws[q, c]), "scored": True})
            rows.append(bank_row(cand, PROBE, arm, True))
    return bank_frame(rows)


def test_the_statistic_is_the_best_single_draw_over_the_whole_grid():
    rng = np.random.default_rng(0)
    arms = [f"weight_noise:sigma={s}:draw={d}:seed=3" for s in (0.01, 0.02, 0.04) for d in range(2)]
    greedy, draws = rng.random(40) < 0.3, rng.random((40, 6)) < np.array([0.2, 0.3, 0.35, 0.5, 0.4, 0.1])
    got = best_draw(_bank(greedy, draws, arms), PROBE, model="m", seed=3)
    top = int(np.argmax(draws.mean(0)))
    assert got.best_arm == arms[top] and got.best == pytest.approx(draws[:, top].mean())
    assert got.clean == pytest.approx(greedy.mean()) and got.gain == pytest.approx(draws[:, top].mean() - greedy.mean())
    assert got.draws == 6 and got.grid == (0.01, 0.02, 0.04)
    union = draws.any(1).mean()  # the union: a reach probe, above every single draw, never the statistic
    assert union > got.best


def _run(model: str, seed: int, gain: float, draws: int = 50) -> BestDraw:
    return BestDraw(model, seed, 0.2, 0.2 + gain, "arm", draws, (0.01, 0.02))


def test_the_null_flags_only_a_gain_above_its_95th_percentile():
    null = calibrate([_run(f"twin{i % 4}", i, (i + 1) / 100) for i in range(19)], min_seeds=4)
    assert null.threshold == pytest.approx(0.19)  # the 19th smallest of 0.01 .. 0.19
    high, tie = detect(_run("organism", 0, 0.20), null), detect(_run("organism", 0, 0.19), null)
    assert high.flagged and high.p == pytest.approx(1 / 20)
    assert not tie.flagged and tie.p == pytest.approx(2 / 20)
    few = calibrate([_run("twin", i, 0.01 * i) for i in range(5)])  # m = 5: rank 6 does not exist
    assert few.threshold == float("inf") and not detect(_run("organism", 0, 0.9), few).flagged


def test_a_null_without_enough_seeds_or_of_another_k_is_refused():
    with pytest.raises(ReachlensError, match="4 noise seed"):
        calibrate([_run("twin", i, 0.0) for i in range(4)] + [_run("strong", i, 0.0) for i in range(5)])
    with pytest.raises(ReachlensError, match="one K and one grid"):
        calibrate([_run("twin", i, 0.0, draws=50 if i else 10) for i in range(5)])
    null = calibrate([_run("twin", i, 0.0) for i in range(5)])
    with pytest.raises(ReachlensError, match="one K and one grid"):
        detect(_run("organism", 0, 0.3, draws=100), null)
