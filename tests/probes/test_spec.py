"""Probe spec strings: every family parses, its label is its canonical spec, bad keys and values are one line."""

from __future__ import annotations

import pytest

from reachlens.errors import ReachlensError
from reachlens.probes import PROBES, EmbeddingNoiseProbe, GraftProbe, Routes, Sampling, SteerProbe, parse_probe


@pytest.mark.parametrize("spec, cls, budget", [
    ("sampling", Sampling, 6),
    ("sampling:k=6:temperature=0.7", Sampling, 6),
    ("routes:space=native:search=mcts:budget=5", Routes, 5),
    ("graft:kind=zero:layer=3", GraftProbe, 1),
    ("graft:kind=zero,noise,bos:layer=1,2:k=2", GraftProbe, 2 * (1 + 2 + 1)),  # noise is random: k draws
    ("graft:kind=mean:layer=0:placebo=true", GraftProbe, 1),
    ("embedding_noise:ratio=0.05:k=3", EmbeddingNoiseProbe, 3),
    ("steer:layer=2:alphas=-4,0,4:site=mlp_out", SteerProbe, 3),
])
def test_every_family_parses_and_its_label_parses_back_to_it(spec, cls, budget):
    probe = parse_probe(spec)
    assert type(probe) is cls and probe.budget == budget
    assert parse_probe(probe.label) == probe
    assert probe.intervention == (cls not in (Sampling, Routes))


def test_labels_name_only_what_differs_from_the_defaults_in_the_order_of_the_keys():
    assert parse_probe("sampling:temperature=0.8:k=6").label == "sampling"
    assert parse_probe("graft:layer=3:kind=zero").label == "graft:kind=zero:layer=3"
    assert parse_probe("graft:placebo=true:layer=3:kind=zero").label == "graft:kind=zero:layer=3:placebo=true"
    assert set(PROBES.names()) == {"sampling", "routes", "graft", "embedding_noise", "steer", "weight_noise", "fewshot"}


@pytest.mark.parametrize("spec, says", [
    ("", "is empty"),
    ("sample:k=6", "unknown probe family 'sample'"),
    ("sampling:kk=6", "unknown key 'kk' for sampling; known: k, temperature, top_p, seed"),
    ("sampling:k=six", "k='six' must be an integer"),
    ("sampling:k", "'k' is not key=value"),
    ("sampling:k=2:k=3", "key 'k' is given twice"),
    ("sampling:k=0", "k=0 must be >= 1"),
    ("sampling:temperature=0", "temperature=0.0 must be > 0"),
    ("sampling:temperature=nan", "temperature='nan' must be a finite number"),
    ("graft:kind=zero", "graft needs layer=..."),
    ("graft:layer=1", "graft needs kind=..."),
    ("graft:kind=zeros:layer=1", "unknown graft kind 'zeros'"),
    ("graft:kind=zero,,noise:layer=1", "must be a comma-separated list of names"),
    ("graft:kind=zero:layer=1:placebo=maybe", "placebo='maybe' must be true or false"),
    ("graft:kind=zero:layer=1:position=2:placebo=true", "a placebo graft draws its own position"),
    ("graft:kind=zero,zero:layer=1", "names a kind or a layer twice"),
    ("routes:search=beam", "search='beam' is not a strategy"),
    ("routes:objective=oracle", "not an answer-blind objective"),
    ("routes:budget=0", "budget=0 must be an integer >= 1"),
    ("embedding_noise:ratio=-1", "ratio=-1.0 must be a finite number > 0"),
    ("steer:layer=1:alphas=1,1", "names an alpha twice"),
    ("steer:layer=1:alphas=1:direction=up", "must be 'random' or a .npy file"),
])
def test_a_bad_spec_is_one_line_naming_the_bad_part(spec, says):
    with pytest.raises(ReachlensError) as err:
        parse_probe(spec)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_every_option_of_the_probe_command_has_help():
    from reachlens.cli.main import build_parser

    parser, _ = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["probe"]
    missing = [a.option_strings or a.dest for a in sub._actions if a.dest != "help" and not a.help]
    assert not missing and "graft:kind=zero,noise:layer=3" in sub.format_help()


def test_the_arms_of_two_probes_of_a_run_never_share_a_name(tiny_model):
    """An arm's reach is read by its name: two steering directions, or a probe with its own seed, stay apart;
    two probes that would make the same arm are refused before anything is decoded."""
    from reachlens import probe

    def arms(spec: str) -> set[str]:
        return {c.arm for c in parse_probe(spec).candidates("q", 8, 0)}

    assert arms("steer:layer=1:alphas=2") == {"steer:resid_post@L1:alpha=2"}
    assert arms("steer:layer=1:alphas=2:direction=key.npy") == {"steer:resid_post@L1:direction=key.npy:alpha=2"}
    assert arms("graft:kind=noise:layer=1:seed=3") == {"graft:noise@L1:seed=3"}
    assert arms("embedding_noise:k=2:seed=3") == {"embedding_noise:0.1:seed=3"}
    with pytest.raises(ReachlensError) as err:
        probe(tiny_model, "arith", ["graft:kind=noise:layer=1", "graft:kind=noise:layer=1:k=2"], n=1)
    from reachlens.probes.job import _probes

    assert [p.label for p in _probes(["graft:kind=zero:layer=1:position=40"])] == ["graft:kind=zero:layer=1:position=40"]
    assert "both make arm 'graft:noise@L1'" in str(err.value) and "\n" not in str(err.value)
