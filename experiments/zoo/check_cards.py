"""Re-run every zoo model card's audit command into a fresh directory and compare with the card.

    python experiments/zoo/check_cards.py [--names base grpo ...] [--tasks arith arith_hard] [--n N]

Every audit a card holds (one per card task) is re-run. Same seed, same samples: D and O_64 must match
the card exactly, question by question. ``--n N``
re-audits only the card's first N questions (sample j of question q depends on (seed, q, j) only,
so they must equal the card's first N rows exactly); the tests use it to check every card cheaply.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

import pandas as pd


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--names", nargs="*", default=None)
    ap.add_argument("--tasks", nargs="*", default=None, help="only the card audits of these tasks")
    ap.add_argument("--n", type=int, default=None, help="check only the card's first N questions")
    args = ap.parse_args(argv)
    from reachlens.cli.main import main as cli
    from reachlens.models.zoo import zoo_entries

    bad = 0
    for e in zoo_entries():
        if args.names and e.name not in args.names:
            continue
        for task, card in e.card.get("audits", {}).items():
            if args.tasks and task not in args.tasks:
                continue
            same = check_one(cli, e.name, task, card, args.n)
            if same is None:
                return 2
            bad += not same
    return 1 if bad else 0


def check_one(cli, name: str, task: str, card: dict, n: int | None) -> bool | None:
    """Re-run one card audit (its first ``n`` questions); whether it is identical (None: the audit failed)."""
    argv_ = shlex.split(card["command"])[1:]
    out = Path(tempfile.mkdtemp()) / name
    argv_[argv_.index("--out") + 1] = str(out)
    n = card["n"] if n is None else min(n, card["n"])
    argv_[argv_.index("--n") + 1] = str(n)
    if cli(argv_) != 0:
        return None
    from reachlens.store import read_run

    run = read_run(out)  # the audit as reachlens reads it (never its files by name)
    q = run.questions
    want = pd.DataFrame(card["questions"]).head(n)
    rerun_d, rerun_o = float(q["realized"].mean()), float(q["reachable"].mean())
    card_d, card_o = float(want["realized"].mean()), float(want["n_correct"].gt(0).mean())
    same = (q["question_id"].tolist() == want["question_id"].tolist()
            and q["realized"].tolist() == want["realized"].tolist()
            and q["n_correct"].tolist() == want["n_correct"].tolist())
    if n == card["n"]:
        same = same and run.D == card["D"] and run.O_K == card["O_K"]
    print(f"{name:>10s} {task:>10s} (first {n} of {card['n']}): card D={card_d:.3f} O_64={card_o:.3f} | rerun "
          f"D={rerun_d:.3f} O_64={rerun_o:.3f} | {'identical' if same else 'DIFFERENT'}", flush=True)
    return same


if __name__ == "__main__":
    sys.exit(main())
