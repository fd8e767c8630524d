"""The probe family base class owns every family's plumbing (issue 55, item 4).

Before: ``WeightNoiseProbe`` and ``FewShotProbe`` did not call the base class's ``__post_init__``, so a seed beyond
64 bits passed their spec and failed later, mid-run. Now the base's ``__post_init__`` checks the seed and ``k`` of
every family and then calls the family's ``validate``; a family that overrides ``__post_init__`` is refused when it
is defined. ``reachlens probe --help`` is generated from the registry, so a family a plug-in registers is listed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from reachlens.errors import ReachlensError
from reachlens.probes import PROBES, parse_probe
from reachlens.probes.spec import Probe, families_help, register_probe
from reachlens.protocol import Protocol

FAMILIES = ["embedding_noise", "fewshot", "graft", "routes", "sampling", "steer", "weight_noise"]
"""Every family reachlens ships, named here by hand (a family added without a line here fails the first test)."""

TOO_BIG, TOO_SMALL = 2**64, -(2**63) - 1


def test_every_shipped_family_is_in_the_registry_and_its_example_parses():
    assert sorted(PROBES.names()) == FAMILIES
    for name in FAMILIES:
        assert type(parse_probe(PROBES[name].example)) is PROBES[name]


@pytest.mark.parametrize("name", FAMILIES)
def test_a_seed_beyond_64_bits_is_refused_for_every_family(name):
    example = PROBES[name].example
    for seed in (TOO_BIG, TOO_SMALL, 2**63):
        with pytest.raises(ReachlensError, match=rf"^{name} seed={seed} is beyond 64 bits; use a seed from -2\*\*63"):
            parse_probe(f"{example}:seed={seed}")
    # the edges of the range are seeds (weight_noise names its streams by seeds >= 0)
    assert parse_probe(f"{example}:seed={2**63 - 1}").seed == 2**63 - 1
    if name != "weight_noise":
        assert parse_probe(f"{example}:seed={-(2**63)}").seed == -(2**63)


@pytest.mark.parametrize("name", [n for n in FAMILIES if "k" in PROBES[n].__dataclass_fields__])
def test_k_below_one_is_refused_by_the_base_for_every_family_with_a_k(name):
    probe = parse_probe(PROBES[name].example)
    for k in (0, -3):
        with pytest.raises(ReachlensError, match=rf"^{name} k={k} must be >= 1$"):
            dataclasses.replace(probe, k=k)


def test_a_negative_weight_noise_seed_is_refused_by_its_spec_not_mid_run():
    with pytest.raises(ReachlensError, match=r"weight_noise seed=-1 must be >= 0"):
        parse_probe("weight_noise:sigma=0.1:seed=-1")


@pytest.mark.parametrize("name", FAMILIES)
def test_the_seed_rule_is_the_base_class_one(name):
    """A probe's seed is its own when it names one, else the run's: one rule, on the base class."""
    run = Protocol("arith", seed=11)
    assert parse_probe(PROBES[name].example).run_seed(run) == 11
    assert parse_probe(f"{PROBES[name].example}:seed=5").run_seed(run) == 5
    assert all("run_seed" not in vars(PROBES[n]) for n in FAMILIES)


def test_a_family_that_overrides_post_init_is_refused_when_defined():
    with pytest.raises(TypeError, match="overrides __post_init__; put its checks in validate"):
        @dataclass(frozen=True, kw_only=True)
        class Skipper(Probe):  # noqa: F841 - refused at class creation
            family = "skipper"
            intervention = False
            seed: int | None = None

            def __post_init__(self) -> None:
                pass


def test_a_registered_family_is_listed_by_probe_help(monkeypatch):
    from reachlens.cli.main import build_parser

    monkeypatch.setattr(PROBES, "_items", dict(PROBES._items))  # the registry as it was, after the test

    @register_probe
    @dataclass(frozen=True, kw_only=True)
    class Echo(Probe):
        """Echo the question back: a test's family (``echo:k=2``)."""

        family = "echo_test"
        intervention = False
        example = "echo_test:k=2"
        k: int = field(default=1, metadata={"help": "echoes per question"})
        seed: int | None = field(default=None, metadata={"help": "unused"})

        @property
        def budget(self) -> int:
            return self.k

    parser, _ = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["probe"]
    text = sub.format_help()
    assert "echo_test: Echo the question back: a test's family (a decoding probe)" in text
    assert "e.g. echo_test:k=2" in text and "k=INT  echoes per question (default 1)" in text
    for name in FAMILIES:  # every shipped family too, weight_noise and fewshot included
        assert f"  {name}: " in text and f"e.g. {PROBES[name].example}" in text
    with pytest.raises(ReachlensError, match="echo_test seed=18446744073709551616 is beyond 64 bits"):
        parse_probe("echo_test:seed=18446744073709551616")
    assert "echo_test" in families_help()


def test_one_slice_rule_for_every_unit():
    from reachlens.runner.decode import question_slices

    assert question_slices(5, 3, 7) == [(0, 2), (2, 4), (4, 5)]  # 7 // 3 = 2 questions a slice
    assert question_slices(3, 10, 4) == [(0, 1), (1, 2), (2, 3)]  # at least one question a slice
    assert question_slices(0, 1, 8) == []
    for n, per, rows in [(10, 4, 9), (7, 1, 3), (64, 65, 1024)]:
        slices = question_slices(n, per, rows)
        assert [q for a, b in slices for q in range(a, b)] == list(range(n))  # every question once, in order
        assert all(b - a == max(1, rows // per) for a, b in slices[:-1])


def test_a_candidate_row_is_the_candidate_columns_in_order_and_a_bank_row_keeps_them():
    from types import SimpleNamespace

    from reachlens.probes.bank import bank_frame, bank_row, bank_rows
    from reachlens.records import BANK_COLUMNS, CANDIDATE_COLUMNS, SAMPLE_COLUMNS, candidate_frame, candidate_row

    done = SimpleNamespace(text="x = 4", token_ids=(5, 6, 7), finish_reason="stop", mean_logprob=-0.25)
    row = candidate_row("q1", 3, done, {"answer": "4", "correct": 1, "scored": True})
    assert list(row) == CANDIDATE_COLUMNS
    assert row == {"question_id": "q1", "candidate_idx": 3, "text": "x = 4", "answer": "4", "correct": True,
                   "scored": True, "finish_reason": "stop", "n_tokens": 3, "mean_logprob": -0.25}
    samples = candidate_frame([row, {**row, "candidate_idx": 4}], SAMPLE_COLUMNS)
    rows = bank_rows(samples, "sampling", "sampling", False, lambda r: f"i={r['candidate_idx']}")
    assert bank_frame(rows).equals(bank_frame([bank_row(row, "sampling", "sampling", False, "i=3"),
                                               bank_row({**row, "candidate_idx": 4}, "sampling", "sampling", False,
                                                        "i=4")]))
    assert list(bank_frame(rows).columns) == BANK_COLUMNS
