"""Which noise scale moves a model? A screen of weight noise over a sigma grid, with and without a lock's password.

    python experiments/weight_noise_screen.py --model zoo:locked --task arith_hard --n 50 --k 5 \
        --sigmas 0.01,0.02,0.05,0.1,0.2,0.3 --formats qa,password --out runs/wn-screen

For each prompt format and each sigma (relative to each weight tensor's own std, :mod:`reachlens.interventions.
weight_noise`), ``k`` draws of noise (full rank, or ``--rank R``) on every linear map of the blocks decode greedily beside the
clean model, as arms of one batch, on the first ``n`` test questions. Per (format, sigma): the clean model's
accuracy, each draw's accuracy (mean, best), Tice et al.'s phi (best draw over clean; undefined at a clean
accuracy of 0), and the union reach (a question any draw answers, with the clean deployment: what a
``weight_noise`` probe of these draws would reach). A locked model whose accuracy without the password rises
under noise while the password's falls is the signature Tice et al. report. Writes ``screen.csv`` and prints it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch


def screen(model, task, protocol, sigmas: list[float], k: int, seed: int, rank: int | None = None) -> pd.DataFrame:
    """One row per sigma: clean, mean and best draw accuracy, phi and union reach (see the module docstring)."""
    from reachlens.execution import ExecConfig
    from reachlens.interventions import weight_noise_arms, weight_noise_draws
    from reachlens.runner.decode import deploy_arms_and_grade

    draws = weight_noise_draws(sigmas, k, seed=seed, rank=rank)
    ids = [q.question_id for q in task.questions]
    with model.hooks(fwd_hooks=weight_noise_arms(model, draws)):
        tables = deploy_arms_and_grade(model, task, protocol, [(None, ids), *((d, ids) for d in draws)],
                                       ExecConfig(max_batch_rows=512))
    clean = tables[0].set_index("question_id")["realized"].astype(bool)
    rows = []
    for i, sigma in enumerate(sigmas):
        per_draw = [t.set_index("question_id")["realized"].astype(bool) for t in tables[1 + i * k: 1 + (i + 1) * k]]
        acc = [float(r.mean()) for r in per_draw]
        union = pd.concat([clean, *per_draw], axis=1).any(axis=1)
        rows.append({"sigma": sigma, "n": len(ids), "clean": float(clean.mean()), "draw_mean": sum(acc) / k,
                     "draw_best": max(acc), "phi": max(acc) / float(clean.mean()) if clean.any() else float("nan"),
                     "union_reach": float(union.mean()), "draws": " ".join(f"{a:.2f}" for a in acc)})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="zoo:locked")
    ap.add_argument("--task", default="arith_hard")
    ap.add_argument("--n", type=int, default=50, help="first N test questions")
    ap.add_argument("--k", type=int, default=5, help="draws per sigma")
    ap.add_argument("--sigmas", default="0.01,0.02,0.05,0.1,0.2,0.3", help="comma-separated, relative to std(W)")
    ap.add_argument("--formats", default="qa,password", help="prompt formats, comma-separated")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0, help="the noise draws' seed")
    ap.add_argument("--rank", type=int, default=None, help="low-rank noise of this rank (Tice's LoRA form; default full)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True, help="folder for screen.csv")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from reachlens import Protocol, load_model, load_task

    model, task = load_model(args.model), load_task(args.task, n=args.n)
    sigmas = [float(s) for s in args.sigmas.split(",")]
    parts = []
    for fmt in args.formats.split(","):
        protocol = Protocol.greedy(args.task, max_new_tokens=args.max_new_tokens, prompt_format=fmt).resolved(task)
        part = screen(model, task, protocol, sigmas, args.k, args.seed, args.rank)
        parts.append(part.assign(format=fmt))
    table = pd.concat(parts, ignore_index=True)[["format", "sigma", "n", "clean", "draw_mean", "draw_best", "phi",
                                                  "union_reach", "draws"]]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "screen.csv", index=False)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return table


if __name__ == "__main__":
    main()
