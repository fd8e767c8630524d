"""The zoo's lineage by answers and by verified solutions: O_K, O_K^trace and the lucky-guess null, side by side.

    python -m reachlens audit zoo:base --task arith_hard --n 300 --k 64 --out runs/trace/base   # and grpo, dapo, ...
    python experiments/trace_lineage.py base=runs/trace/base grpo=runs/trace/grpo dapo=runs/trace/dapo \\
        sft=runs/trace/sft sft-grpo=runs/trace/sft-grpo

Each audit is trace-graded in memory (``reachlens.studies.trace_reach.trace_of``: its task's trace grader over the
stored text, no decoding; ``reachlens rescore DIR --trace`` writes the same table into a complete audit). An audit
still running, or stopped, counts with the questions it has finished; all of them are cut to the questions every
one has finished, so the rows are paired. Printed: one Markdown row per model (D, D^trace, O_K, O_K^trace, the
null's mean and 95th percentile, O_K - null with its interval, the questions reached only through invalid solutions,
the right samples with a valid solution, the share of samples with a checkable step, pass@k both ways) and each
model's paired deltas from the first (answers and verified solutions, paired bootstrap intervals).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

from reachlens.records import markdown_table
from reachlens.stats import paired_bootstrap_ci
from reachlens.store import PartsDir
from reachlens.studies import AuditResult
from reachlens.studies.trace_reach import trace_of, verified_questions


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("audits", nargs="+", metavar="NAME=DIR", help="audit directories, the first the reference")
    args = ap.parse_args(argv)
    pairs = [a.split("=", 1) for a in args.audits]
    if any(len(p) != 2 or not p[0] or not p[1] for p in pairs):
        ap.error(f"each audit is NAME=DIR, got {args.audits!r}")
    return pairs


def _read(path: str, keep: set[str] | None) -> AuditResult:
    a = AuditResult.read(PartsDir(path))
    if keep is not None:
        a = AuditResult(a.questions[a.questions["question_id"].isin(keep)].reset_index(drop=True),
                        a.samples[a.samples["question_id"].isin(keep)].reset_index(drop=True), record=a.record)
    return AuditResult(a.questions, a.samples, trace_of(a), record=a.record)


def _row(name: str, a: AuditResult) -> dict:
    s = a.summary()
    k = a.k
    lo, hi = s["O_K_minus_null_ci"]
    return {"model": name, "n": a.n, "D": s["D"], "D^trace": s["D_trace"], f"O_{k}": s["O_K"],
            f"O_{k}^trace": s["O_K_trace"], "null (mean)": s["O_K_null"], "null (95th)": s["O_K_null_p95"],
            f"O_{k} - null": f"{s['O_K_minus_null']:+.3f} [{lo:+.3f}, {hi:+.3f}]",
            "reached only invalid": s["n_reached_invalid_only"],
            "right samples, valid": f"{s['n_correct_valid_samples']} of {s['n_correct_samples']}",
            "checkable": s["checkable_share"], "pass@1": s["pass_at_k"][1], "pass@1^trace": s["pass_at_k_trace"][1],
            f"maj^trace": s["maj_K_trace"]}


def _delta(ref: pd.DataFrame, q: pd.DataFrame, col: str) -> str:
    d = (q.set_index("question_id")[col].astype(float) - ref.set_index("question_id")[col].astype(float)).to_numpy()
    lo, hi = paired_bootstrap_ci(d)
    return f"{np.mean(d):+.3f} [{lo:+.3f}, {hi:+.3f}]"


def main(argv=None) -> None:
    pairs = parse_args(argv)
    finished = [set(AuditResult.read(PartsDir(path)).questions["question_id"]) for _, path in pairs]
    keep = set.intersection(*finished)
    if not keep:
        raise SystemExit("the audits share no finished question yet")
    audits = [(name, _read(path, keep)) for name, path in pairs]
    print(f"{len(keep)} questions finished by every audit; K = {audits[0][1].k}\n")
    print(markdown_table(pd.DataFrame([_row(name, a) for name, a in audits])))
    ref = verified_questions(audits[0][1].questions, audits[0][1].samples, audits[0][1].trace)
    rows = []
    for name, a in audits[1:]:
        q = verified_questions(a.questions, a.samples, a.trace)
        rows.append({"model": f"{name} - {audits[0][0]}", "delta O_K (answers)": _delta(ref, q, "reachable"),
                     "delta O_K^trace (solutions)": _delta(ref, q, "reachable_trace"),
                     "delta D (answers)": _delta(ref, q, "realized"),
                     "delta D^trace (solutions)": _delta(ref, q, "realized_trace")})
    if rows:
        print("\npaired deltas from the first (95 % paired bootstrap intervals over questions):\n")
        print(markdown_table(pd.DataFrame(rows)))


if __name__ == "__main__":
    main(sys.argv[1:])
