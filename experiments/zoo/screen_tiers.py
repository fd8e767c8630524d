"""Screen candidate hard tiers of ``arith`` on a checkpoint: D and O_K on a fresh draw of each tier.

    python experiments/zoo/screen_tiers.py --model zoo:base --n 100 --k 64 h45m5 h5 h45m1 h56m5 h36m5 h46m5

How ``arith_hard``'s tier (:data:`reachlens.tasks.arith.HARD_TIERS`) was chosen: each candidate is drawn
from its own stream (``ArithConfig(seed=1, tiers=(tier,))``, so no candidate reuses the shipped test
split) and audited greedy + K samples at T=0.8 with 128 new tokens; the tier whose base D and O_K land in
the issue's ranges (D in [0.15, 0.50], O_200 in [0.50, 0.85]) was then measured on the real
``arith_hard`` test split with K=200 (``reachlens audit zoo:base --task arith_hard --n 300 --k 200
--temperature 0.8 --max-new-tokens 128 --seed 0 --out DIR``).
"""

from __future__ import annotations

import argparse
import time

import torch

from reachlens import Protocol, audit
from reachlens.models import load_model
from reachlens.tasks.arith import PROMPT_FORMATS, STOP, ArithConfig, Tier, _questions
from reachlens.tasks.base import Task

CANDIDATES = {
    "h45m5": Tier("hard", 4, 5, mul_prob=0.5),  # the three-tier mix's own hard tier
    "h5": Tier("hard", 5, 5, mul_prob=0.5),
    "h45m1": Tier("hard", 4, 5, mul_prob=1.0),
    "h56m5": Tier("hard", 5, 6, mul_prob=0.5),
    "h36m5": Tier("hard", 3, 6, mul_prob=0.5),  # chosen: HARD_TIERS
    "h46m5": Tier("hard", 4, 6, mul_prob=0.5),
    "h6m5": Tier("hard", 6, 6, mul_prob=0.5),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="+", choices=sorted(CANDIDATES))
    ap.add_argument("--model", default="zoo:base")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--k", type=int, default=64)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    model = load_model(args.model)
    print("| tier | ops | mul | n | K | D | O_K | pass@1 | s |\n|---|---|---|---|---|---|---|---|---|")
    for name in args.names:
        tier = CANDIDATES[name]
        task = Task("arith", _questions(ArithConfig(seed=1, n_train=0, n_test=args.n, tiers=(tier,)), "test"),
                    PROMPT_FORMATS, "qa", "numeric", STOP, source=f"screen {name}")
        t0 = time.perf_counter()
        r = audit(model, task, Protocol("arith", k=args.k, temperature=0.8, max_new_tokens=128))
        print(f"| {name} | {tier.min_ops}-{tier.max_ops} | {tier.mul_prob} | {args.n} | {args.k} | {r.D:.3f} | "
              f"{r.O_K:.3f} | {r.questions['propensity'].mean():.3f} | {time.perf_counter() - t0:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
