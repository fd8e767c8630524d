"""A protocol's fields have their types and bounds, however it was made (issue 25, bounds and values).

Before issue 25 ``Protocol`` checked values but not types: a hand-edited ``run.json`` with
``"seed": "<script>..."`` read back as a protocol (and reached the report's HTML), ``"stop": "ab"``
became the stop strings ``('a', 'b')``, ``top_p="x"`` was a ``TypeError`` traceback, and
``temperature=1e-320`` passed, so ``logits / T`` overflowed and every sample was the last token.
"""

from __future__ import annotations

import math

import pytest
import torch

from reachlens import Protocol
from reachlens.errors import ReachlensError
from reachlens.protocol import MIN_TEMPERATURE


@pytest.mark.parametrize("field,value", [
    ("seed", "<script>alert(document.domain)</script>"), ("seed", 1.5), ("seed", True), ("seed", None),
    ("k", "4"), ("k", 4.0), ("k", True), ("max_new_tokens", "8"), ("temperature", "0.8"), ("temperature", True),
    ("top_p", "x"), ("top_p", None), ("task", 3), ("split", None), ("prompt_format", ["qa"]),
    ("stop", "ab"), ("stop", [1]), ("stop", 5), ("grader", 7), ("backend", None),
])
def test_a_field_of_the_wrong_type_is_one_line(field, value) -> None:
    base = Protocol("arith", k=2, temperature=1.0).to_dict()
    with pytest.raises(ReachlensError, match=rf"^{field}=.* must be"):
        Protocol.from_dict({**base, field: value})
    # Protocol(...) runs the same check in __post_init__ (under the tests, beartype checks first)


def test_the_right_types_still_round_trip() -> None:
    p = Protocol("gsm8k", k=3, temperature=1.0, stop=("\n\n", "Q:"), grader="numeric", seed=-7)
    assert Protocol.from_dict(p.to_dict()) == p
    assert Protocol.from_dict({**p.to_dict(), "stop": None}).stop is None


def test_a_seed_beyond_64_bits_is_refused() -> None:
    Protocol("arith", seed=2**63 - 1)
    with pytest.raises(ReachlensError, match="seed=.* must be an integer"):
        Protocol("arith", seed=2**63)


@pytest.mark.parametrize("t", [1e-320, 5e-324, 1e-250, MIN_TEMPERATURE / 2])
def test_a_temperature_below_the_smallest_is_refused(t) -> None:
    with pytest.raises(ReachlensError, match=rf"temperature={t!r} .*smallest .* is {MIN_TEMPERATURE!r}"):
        Protocol("arith", k=4, temperature=t)


def test_the_smallest_temperature_samples_without_overflow() -> None:
    """At MIN_TEMPERATURE, float32 logits as far apart as float32 allows still give a finite
    distribution: the sample is the arg max, never the last token of a NaN distribution."""
    from reachlens.engine.rng import sample_inverse_cdf

    big = torch.finfo(torch.float32).max
    logits = torch.tensor([[0.0, big, -big, 1.0], [-big, -big, big, big]], dtype=torch.float32)
    picked = sample_inverse_cdf(logits, torch.tensor([3, 4]), 0, MIN_TEMPERATURE)
    assert picked[0].item() == 1 and picked[1].item() in (2, 3)
    probs = torch.softmax(logits.double() / MIN_TEMPERATURE, -1)
    assert torch.isfinite(probs).all() and math.isclose(probs[0, 1].item(), 1.0)


def test_the_cli_refuses_a_tiny_temperature_before_the_model_loads(capsys, monkeypatch, tmp_path) -> None:
    import reachlens.models
    from reachlens.cli import main

    monkeypatch.setattr(reachlens.models, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    code = main(["audit", "zoo:base", "--task", "arith", "--n", "2", "--k", "2", "--temperature", "1e-320",
                 "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "temperature=1e-320" in err and "Traceback" not in err
