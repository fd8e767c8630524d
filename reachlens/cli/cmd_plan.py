"""``reachlens plan --pilot DIR``: how many questions a comparison needs, and what each n could detect.

From a pilot audit (one checkpoint) or a pilot comparison (two), with the tests ``reachlens compare`` runs
(exact McNemar for D and O_K, the paired z test for pass@1; :mod:`reachlens.power`): the questions a change of
``--effect`` needs at ``--power`` (two-sided ``--alpha``), the change detectable at each n of ``--at`` and the
task's full split, and, for the budget, how O_k's standard error and detectable change move along the pilot's
pass@k curve. A comparison measures the spread each test needs (the share of questions that change, the sd of
the per-question differences); one audit assumes the two checkpoints uncorrelated, an upper bound on the
questions needed. ``--json`` prints the plan for scripts. The Python API is :func:`reachlens.plan`.
"""

from __future__ import annotations

import argparse
import json
import math

from reachlens.cli._common import comma_list, echo, nonneg_float, positive_int
from reachlens.cli.flags import ProtocolFlags, add_flags

PRESETS = {"--k": "a plan reads its pilot's K unless told another"}
"""Shared flags this command presets to another default (:mod:`reachlens.cli.flags`), and why."""

NAME = "plan"
HELP = "questions needed and effects detectable, from a pilot audit or comparison"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("--pilot", required=True, help="a pilot audit or comparison directory")
    p.add_argument("--effect", type=nonneg_float("--effect"), default=0.03,
                   help="the change to detect in D, O_K and pass@1 (default 0.03: 3 points)")
    p.add_argument("--power", type=nonneg_float("--power"), default=0.8, help="the power (default 0.8)")
    p.add_argument("--alpha", type=nonneg_float("--alpha"), default=0.05, help="the two-sided level (default 0.05)")
    add_flags(p, ProtocolFlags, only=("k",), defaults={"k": None},
              help={"k": "the budget K of the O_K row, at most the pilot's K (default the pilot's K)"})
    p.add_argument("--at", type=comma_list("--at", int), default=[100, 300, 1000],
                   help="the numbers of questions to give the detectable effect at (default 100,300,1000; the "
                        "task's full split is added)")
    p.add_argument("--full-n", type=positive_int("--full-n"), default=None,
                   help="the task's full split (default: read from the task when it can be)")
    p.add_argument("--data", default=None, help="the pilot's data file, to count its full split")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.studies.planning import plan

    p = plan(args.pilot, effect=args.effect, power=args.power, k=args.k, alpha=args.alpha, sizes=tuple(args.at),
             full_n=args.full_n, data=args.data)
    echo(json.dumps(p.to_dict(), indent=2) if args.json else plan_text(p))
    return 0


def _num(x: float, f: str = ".3f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, f)


def plan_text(p) -> str:
    """The tables ``reachlens plan`` prints for a :class:`~reachlens.studies.planning.PowerPlan`."""
    import pandas as pd

    who = " -> ".join(p.models)
    full = f"; full split {p.full_n} questions" if p.full_n is not None else "; full split unknown (--full-n N)"
    sizes = p.sizes
    heads = [f"n={m}" + (" (full split)" if m == p.full_n else "") for m in sizes]
    q = pd.DataFrame({
        "quantity": p.quantities["quantity"], "test": p.quantities["test"],
        "spread": [f"{s} {_num(v)} ({'measured' if m else 'assumed'})"
                   for s, v, m in zip(p.quantities["spread"], p.quantities["value"], p.quantities["measured"])],
        f"questions for {p.effect:g}": [_num(x, ",.0f") for x in p.quantities["questions"]],
        **{f"detectable at {h}": [_num(x) for x in p.quantities[f"n={m}"]] for h, m in zip(heads, sizes)},
    })
    b = pd.DataFrame({
        "k": p.budget["k"], "O_k": [_num(x) for x in p.budget["O_k"]], "se": [_num(x, ".4f") for x in p.budget["se"]],
        "se from the draws": [_num(x, ".4f") for x in p.budget["se_draws"]],
        "discordance": [_num(x) for x in p.budget["discordance"]],
        f"detectable at n={p.n}": [_num(x) for x in p.budget["mde"]],
        f"questions for {p.effect:g}": [_num(x, ",.0f") for x in p.budget["questions"]],
    })
    lines = [f"pilot {p.pilot}: {'a comparison' if p.kind == 'comparison' else 'an audit'} of {who} on {p.task}, "
             f"n={p.n}, K={p.k_pilot}{full}",
             f"power {p.power:.0%}, two-sided alpha {p.alpha:g}: exact McNemar for D and O_{p.k} (Connor's approximation "
             "past 200 changed questions), the z test of the mean per-question difference for pass@1",
             "", q.to_string(index=False), ""]
    if p.kind == "audit":
        lines += ["spread assumed: one audit cannot measure how a descendant's outcomes pair with it, so the two "
                  "checkpoints are taken as uncorrelated (discordance 2p(1-p), sd sqrt(2) x pass@1's); a checkpoint "
                  "and its descendant are positively correlated, so these n are upper bounds (a pilot comparison "
                  "measures the spread).", ""]
    lines += [f"budget: O_k of {p.models[0]} along its pass@k curve; se: its standard error over the {p.n} questions; "
              "from the draws: what drawing the k samples anew moves O_k by on these questions, sqrt((O_2k - O_k) / "
              f"n) ('-' past K/2); the change in O_k detectable at n={p.n} and the questions a change of "
              f"{p.effect:g} needs, at each k",
              "", b.to_string(index=False), "",
              "a change larger than the discordance is planned as questions all moving one way (the fewest changes "
              "that make it); '-': undefined (nothing varies)"]
    return "\n".join(lines)
