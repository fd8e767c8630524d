"""Probes: reachable under *which* probe? One candidate bank per model, task and set of probes.

Reachability is relative to a probe and a budget. A probe family turns a question into candidate
deployments, answer-blind and deterministic given (seed, question, candidate index):

* decoding probes: ``sampling`` (K samples at T: the audit's), ``routes`` (K layer routes: routing's),
  ``fewshot`` (train demonstrations before the question);
* activation probes, *interventions* reported apart: ``graft`` (replace one prompt position's activation at
  one layer, in the prefill; ``placebo=true`` at a random position), ``embedding_noise``, ``steer``,
  ``weight_noise`` (Gaussian noise on the weights, each draw one noised model; φ per sigma in the summary).

A run (:func:`probe`, kind ``probe``; a job of the runner, :class:`ProbeJob`: resumable, on any executor) decodes
every probe's candidates through the runner's one path into one bank (:data:`BANK_COLUMNS`), and reports D, O per probe, arm and named union (``O[sampling+graft]``), the
answer-blind selectors and the selection gap, the overlap of fix-sets, recovery on the stratum K samples never
solve, a budget-matched comparison and the placebo comparison (:mod:`reachlens.probes.summary`).

>>> run = probe(load_model("zoo:base"), load_task("arith", n=50),
...             ["sampling:k=6:temperature=0.7", "graft:kind=zero,noise:layer=3"], out="runs/probe")  # doctest: +SKIP
"""

from reachlens.probes.activation import ArmCandidate, ArmGroup, ArmProbe, EmbeddingNoiseProbe, GraftProbe, SteerProbe
from reachlens.probes.analysis import (
    budget_matched,
    fix_sets,
    jaccard_table,
    placebo_pairs,
    placebo_table,
    reach_table,
    recovery_table,
)
from reachlens.probes.bank import BANK_COLUMNS, GREEDY, family_of, reach, realized, source_mask, union_name
from reachlens.probes.decode import Decoder, plan_units
from reachlens.probes.families import Routes, Sampling
from reachlens.probes.fewshot import FewShotProbe
from reachlens.probes.job import ProbeJob, ProbeShard, probe
from reachlens.probes.run import ProbeRun
from reachlens.probes.spec import PROBES, Probe, parse_probe, register_probe
from reachlens.probes.summary import default_unions, matched_mixtures, probe_summary, probe_tables
from reachlens.probes.weight_noise import PHI_COLUMNS, WeightNoiseProbe, phi_table

__all__ = [
    "BANK_COLUMNS",
    "GREEDY",
    "PHI_COLUMNS",
    "PROBES",
    "ArmCandidate",
    "ArmGroup",
    "ArmProbe",
    "Decoder",
    "EmbeddingNoiseProbe",
    "FewShotProbe",
    "GraftProbe",
    "Probe",
    "ProbeJob",
    "ProbeRun",
    "ProbeShard",
    "Routes",
    "Sampling",
    "SteerProbe",
    "WeightNoiseProbe",
    "budget_matched",
    "default_unions",
    "family_of",
    "fix_sets",
    "jaccard_table",
    "matched_mixtures",
    "parse_probe",
    "phi_table",
    "placebo_pairs",
    "placebo_table",
    "plan_units",
    "probe",
    "probe_summary",
    "probe_tables",
    "reach",
    "reach_table",
    "realized",
    "recovery_table",
    "register_probe",
    "source_mask",
    "union_name",
]
