"""Re-run every zoo model card's audit command into a fresh directory and compare with the card.

    python experiments/zoo/check_cards.py [--names base grpo ...]

Same seed, same samples: D and O_64 must match the card exactly, question by question.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path

import pandas as pd


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--names", nargs="*", default=None)
    args = ap.parse_args(argv)
    from reachlens.cli.main import main as cli
    from reachlens.models.zoo import zoo_entries

    bad = 0
    for e in zoo_entries():
        if args.names and e.name not in args.names:
            continue
        card = e.card["audit"]
        argv_ = shlex.split(card["command"])[1:]
        out = Path(tempfile.mkdtemp()) / e.name
        argv_[argv_.index("--out") + 1] = str(out)
        if cli(argv_) != 0:
            return 2
        s = json.loads((out / "summary.json").read_text())
        q = pd.read_parquet(out / "questions.parquet")
        same = (s["D"] == card["D"] and s["O_K"] == card["O_K"]
                and q["n_correct"].tolist() == card["questions"]["n_correct"])
        bad += not same
        print(f"{e.name:>10s}: card D={card['D']:.3f} O_64={card['O_K']:.3f} | rerun D={s['D']:.3f} "
              f"O_64={s['O_K']:.3f} | {'identical' if same else 'DIFFERENT'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
