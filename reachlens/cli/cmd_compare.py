"""``reachlens compare BASE_DIR TRAINED_DIR``: the question-by-question join of two audits.

It prints each rate with its 95 % Wilson interval, each delta with its paired bootstrap interval over
questions, and the exact McNemar p of the discordant counts behind it (gained vs lost, entered vs left), and
beside each delta the minimum detectable effect of its test at this n (80 % power, two-sided 5 %): a delta
whose interval holds 0 reads "not detected; detectable at this n: >= X".
With ``--out DIR`` it saves the comparison, a run of kind ``comparison``: its record (the protocol, both
models, the two audit directories and the options used), ``questions.parquet`` (one row per question)
and its summary (the one printed here, intervals and p-values included), which ``reachlens show DIR``
prints and ``reachlens report DIR`` renders.
"""

from __future__ import annotations

import argparse

from reachlens.cli._common import echo
from reachlens.cli.flags import ProtocolFlags, add_flags
from reachlens.power import mde_verdict

PRESETS = {"--k": "a comparison reads its audits' K unless told to cut them"}
"""Shared flags this command presets to another default (:mod:`reachlens.cli.flags`), and why."""

NAME = "compare"
HELP = "join two audits question by question (refuses unmatched protocols)"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("base", help="the parent's audit directory")
    p.add_argument("trained", help="the descendant's audit directory")
    add_flags(p, ProtocolFlags, only=("k",), defaults={"k": None},
              help={"k": "the budget K: cut both audits to their first K samples (default: their own K)"})
    p.add_argument("--allow", action="append", default=[],
                   help="protocol field (or dtype, device) allowed to differ (a control); repeatable")
    p.add_argument("--out", default=None, help="save the comparison (a run directory) here")
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.store import RunDir
    from reachlens.studies import compare

    if args.out:
        RunDir(args.out).check_target()  # refused before anything is read
    c = compare(args.base, args.trained, k=args.k, allow=tuple(args.allow))
    s = c.summary()
    echo(summary_text(s))
    echo(f"\npropensity bins (base-reachable, base-unrealized questions; rate with its 95 % Wilson interval):")
    echo(c.propensity_bins()[["bin", "n", "realized_after", "rate", "rate_lo", "rate_hi"]].to_string(
        index=False, float_format=lambda x: f"{x:.3f}", na_rep="-"))
    if args.out:
        c.save(args.out)
    return 0


def _verified_lines(s: dict, rate, ci, seen) -> list[str]:
    """The lucky-guess nulls and, when both audits are trace-graded, the verified deltas."""
    lines = [f"  O_K lucky-guess null (candidates against another question's gold): {s['O_K_null_base']:.3f} "
             f"(95th pct {s['O_K_null_p95_base']:.3f}) -> {s['O_K_null_trained']:.3f} "
             f"(95th pct {s['O_K_null_p95_trained']:.3f})"]
    if "delta_O_K_trace" not in s:
        return lines + ["  verified (trace-graded) figures: none (`reachlens rescore DIR --trace` on both audits)"]
    for key, what, fates in (("D_trace", "D^trace (deployment solves)", ("gained", "lost")),
                             ("O_K_trace", "O_K^trace (a sample solves)", ("entered", "left"))):
        lines += [f"  {what}: {rate(key + '_base')} -> {rate(key + '_trained')}   delta {s['delta_' + key]:+.3f} "
                  f"{ci(s['delta_' + key + '_ci'])}: {seen('delta_' + key, 'mcnemar_' + key + '_p')}",
                  f"    {fates[0]} {s[key + '_' + fates[0]]}, {fates[1]} {s[key + '_' + fates[1]]}: exact McNemar "
                  f"p = {s['mcnemar_' + key + '_p']:.3g}"]
    return lines


def summary_text(s: dict) -> str:
    """The lines ``reachlens compare`` prints for a :meth:`Comparison.summary`."""
    def ci(pair) -> str:
        return f"[{pair[0]:+.3f}, {pair[1]:+.3f}]"

    def rate(key: str) -> str:
        lo, hi = s[f"{key}_ci"]
        return f"{s[key]:.3f} [{lo:.3f}, {hi:.3f}]"

    def seen(key: str, p: str | None = None) -> str:  # beside the test printed with it (p: its key in s)
        return mde_verdict(s[f"{key}_ci"], s[f"{key}_mde"], None if p is None else s[p])

    t = s["truncation"]
    lb = s["left_bound"]
    lines = [
        f"{s['base']} -> {s['trained']}: n={s['n']} questions, K={s['k']}",
        f"  D (realized):   {rate('D_base')} -> {rate('D_trained')}   delta {s['delta_D']:+.3f} {ci(s['delta_D_ci'])}: "
        f"{seen('delta_D', 'mcnemar_realized_p')}",
        f"    gained {s['gained']}, lost {s['lost']} (net {s['net']:+d}): exact McNemar p = {s['mcnemar_realized_p']:.3g}",
        f"    gained from base-reachable {s['gained_from_base_reachable']}, outside it "
        f"{s['gained_outside_base_reachable']}",
        f"  O_K (reachable): {rate('O_K_base')} -> {rate('O_K_trained')}   delta {s['delta_O_K']:+.3f} "
        f"{ci(s['delta_O_K_ci'])}: {seen('delta_O_K', 'mcnemar_reachable_p')}",
        f"    entered {s['entered']}, left {s['left']}: exact McNemar p = {s['mcnemar_reachable_p']:.3g}",
    ]
    if lb["n"]:
        lines.append(f"    the {lb['n']} that left: per-sample rate below {lb['max']:.4f} (one-sided 95 % bound at "
                     f"0 of {s['k']}; median {lb['median']:.4f})")
    lines += [
        f"  maj_K (majority of the K samples, ties averaged): {rate('maj_K_base')} -> {rate('maj_K_trained')}   "
        f"delta {s['delta_maj_K']:+.3f} {ci(s['delta_maj_K_ci'])}: {seen('delta_maj_K', 'majority_p')}",
        f"    {'exact McNemar' if s['majority_test'] == 'mcnemar' else 'sign-flip (fractional ties)'} "
        f"p = {s['majority_p']:.3g}",
    ]
    lines += _verified_lines(s, rate, ci, seen)
    lines.append("  pass@k delta [95 % CI], sign-flip p (Holm over the ks):")
    for k, d in s["delta_pass_at_k"].items():
        lines.append(f"    k={k:<4d} {d['delta']:+.3f} {ci(d['ci'])}  p = {d['p']:.3g} (Holm {d['p_holm']:.3g}): "
                     f"{mde_verdict(d['ci'], d['mde'], d['p_holm'])}")
    lines.append(f"  intervals: {s['bootstrap_resamples']} paired bootstrap resamples over questions (seed "
                 f"{s['bootstrap_seed']}); rates: Wilson; detectable: the minimum detectable effect of the delta's "
                 f"test at this n ({s['mde_power']:.0%} power, two-sided {s['mde_alpha']:g}; exact McNemar, or "
                 "Connor's approximation past 5,000 changed questions; pass@k: z test of the mean difference)")
    flag = (f"FLAGGED: the gap exceeds {t['margin']:.0%}; rerun both at a longer decode with `reachlens control "
            "length`") if t["flagged"] else f"within the {t['margin']:.0%} margin"
    lines.append(f"  cut at max_new_tokens={t['max_new_tokens']}: samples {t['samples_base']:.1%} -> "
                 f"{t['samples_trained']:.1%}, deployed {t['deployed_base']:.1%} -> {t['deployed_trained']:.1%}: {flag}")
    return "\n".join(lines)
