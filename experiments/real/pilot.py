"""Pilot audits of a real checkpoint: which task leaves its pass@K room both ways (D low, O_K above D, below 1).

    python experiments/real/pilot.py --model real:smollm2-135m-instruct --out runs/real/pilot \
        --variants one,easy,medium --n 20 --k 16 --max-new-tokens 128
    python experiments/real/pilot.py --model real:smollm2-135m-instruct --out runs/real/pilot \
        --variants one:what,one:answer,small:what,small2:what --n 20 --k 16 --max-new-tokens 96

Each variant ``TIER[:FORMAT]`` is an audit in chat format (the user turn is the question in FORMAT, as an instruct
model is deployed) at temperature 0.8, greedy deployment, written to ``OUT/TIER_FORMAT`` (a re-run resumes it). The
tiers are ``arith`` with one difficulty tier (:class:`reachlens.tasks.arith.Tier`): ``one`` (1 operation of +/-,
operands up to 99), ``easy`` (2), ``medium`` (3), ``small`` (1 operation, operands up to 20: the task ``arith_small``
this pilot chose), ``small2`` (2 operations up to 20); ``arith`` is the default three-tier mix; ``gsm8k`` reads
``--gsm8k-data`` (../shared/data/gsm8k/test.jsonl). FORMAT is ``qa`` (the zoo's ``Q: 12-13=?``, the default),
``what`` (``What is 12 - 13?``, arith_small's) or ``answer`` (``Compute 12 - 13. End with: The answer is N.``). An
instruct model answers in sentences over several lines, so the arith variants decode to EOS (``<|im_end|>``) with no
``"\\n"`` stop (``stop=()``; the task's own ``"\\n"`` cut 128 of 320 samples in the issue's measurement); the
numeric grader reads the answer from the text. One line per variant: D, O_K, the gap, the share of samples cut at
the length, CPU seconds.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

TIERS = {"one": ("one", 1, 1), "easy": ("easy", 2, 2), "medium": ("medium", 3, 3), "small": ("small", 1, 1, 20),
         "small2": ("small2", 2, 2, 20)}
FORMATS = {"answer": "Compute {expr_spaced}. End with: The answer is N."}


def task_of(variant: str, n: int, gsm8k_data: str):
    """The task of ``TIER[:FORMAT]`` and its prompt format (None: the task's default)."""
    import dataclasses

    from reachlens.tasks import load_task
    from reachlens.tasks.arith import SMALL_FORMATS, Tier
    from reachlens.tasks.base import PromptFormat

    tier, _, fmt = variant.partition(":")
    if tier == "gsm8k":
        return load_task("gsm8k", gsm8k_data, n=n), None
    task = load_task("arith", n=n) if tier == "arith" else load_task("arith", n=n, tiers=(Tier(*TIERS[tier]),))
    formats = {**SMALL_FORMATS, **{k: PromptFormat(k, v) for k, v in FORMATS.items()}}
    return dataclasses.replace(task, prompt_formats=formats), fmt or "qa"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="real:smollm2-135m-instruct")
    ap.add_argument("--out", required=True)
    ap.add_argument("--variants", default="one,easy,medium,arith", help="comma-separated TIER[:FORMAT]")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--gsm8k-data", default="../shared/data/gsm8k/test.jsonl")
    args = ap.parse_args()

    from reachlens import Protocol, audit, load_model

    model = load_model(args.model)
    for variant in args.variants.split(","):
        task, fmt = task_of(variant, args.n, args.gsm8k_data)
        stop = None if fmt is None else ()
        protocol = Protocol(task.name, k=args.k, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                            prompt_format="chat" if fmt is None else f"chat:{fmt}", stop=stop)
        t0, c0 = time.time(), resource.getrusage(resource.RUSAGE_SELF).ru_utime
        result = audit(model, task, protocol, out=Path(args.out) / variant.replace(":", "_"))
        s = result.summary()
        cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime - c0
        print(f"{variant:12s} n={s['n']} K={s['k']}  D {s['D']:.3f}  O_K {s['O_K']:.3f}  gap {s['gap']:.3f}  "
              f"maj_K {s['maj_K']:.3f}  cut {s['truncated_samples']:.3f}  {cpu:.0f} CPU-s  {time.time() - t0:.0f} s",
              flush=True)


if __name__ == "__main__":
    main()
