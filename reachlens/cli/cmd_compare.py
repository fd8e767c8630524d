"""``reachlens compare BASE_DIR TRAINED_DIR``: the question-by-question join of two audits.

With ``--out DIR`` it writes a run directory of kind ``comparison``: ``run.json`` (the protocol, both
models, the two audit directories and the options used), ``questions.parquet`` (one row per question)
and ``summary.json``, which ``reachlens show DIR`` prints and ``reachlens report DIR`` renders.
"""

from __future__ import annotations

import argparse

NAME = "compare"
HELP = "join two audits question by question (refuses unmatched protocols)"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("base")
    p.add_argument("trained")
    p.add_argument("--k", type=int, default=None, help="cut both audits to their first k samples")
    p.add_argument("--allow", action="append", default=[], help="protocol field allowed to differ (a control)")
    p.add_argument("--out", default=None, help="write the per-question table (parquet) and summary (json) here")
    return p


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from reachlens.store import RunDir, RunRecord
    from reachlens.studies import compare

    out = None
    if args.out:
        out = RunDir(args.out)
        out.check_target()  # refused before anything is read
    c = compare(args.base, args.trained, k=args.k, allow=tuple(args.allow))
    s = c.summary()
    for key in ("n", "k", "D_base", "D_trained", "delta_D", "O_K_base", "O_K_trained", "delta_O_K", "gained",
                "lost", "net", "gained_from_base_reachable", "gained_outside_base_reachable", "entered", "left"):
        v = s[key]
        print(f"{key:>30s}: {v:.3f}" if isinstance(v, float) else f"{key:>30s}: {v}")
    print(c.propensity_bins()[["bin", "n", "realized_after", "rate"]].to_string(index=False))
    if out is not None:
        options = {"base_dir": str(Path(args.base).resolve()), "trained_dir": str(Path(args.trained).resolve()),
                   "k_cut": args.k, "allow": list(args.allow)}
        record = RunRecord.new("comparison", c.base.protocol, {"base": c.base.model, "trained": c.trained.model},
                               c.base.data or None, options)
        with out.writer():
            out.start(record)
            out.write_table("questions", c.questions)
            out.write_summary(s)
    return 0
