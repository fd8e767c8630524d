"""``reachlens rescore DIR``: re-grade stored samples without sampling."""

from __future__ import annotations

import argparse

from reachlens.cli._common import echo

NAME = "rescore"
HELP = "re-grade a stored audit without sampling"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("dir", help="the audit directory to re-grade (rewritten in place)")
    p.add_argument("--grader", default=None, help="grader to use instead of the protocol's")
    p.add_argument("--trace", nargs="?", const="auto", default=None, metavar="GRADER",
                   help="also grade every worked solution (arith_trace, gsm8k_trace; alone: the task's own) and add "
                        "the verified figures (D^trace, O_K^trace, ...)")
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.studies import rescore

    result = rescore(args.dir, grader=args.grader, trace=args.trace)
    echo(f"rescored {args.dir}: D={result.D:.3f}  O_{result.k}={result.O_K:.3f}  gap={result.gap:+.3f}")
    s = result.summary()
    null = f"  O_{result.k}^null={s['O_K_null']:.3f} (95th pct {s['O_K_null_p95']:.3f})"
    if "O_K_trace" in s:
        echo(f"  verified: D^trace={s['D_trace']:.3f}  O_{result.k}^trace={s['O_K_trace']:.3f}  "
             f"checkable={s['checkable_share']:.3f}" + null)
    else:
        echo(null)
    return 0
