"""The strong checkpoint of the second password lock: supervised fine-tuning of the base on gold worked solutions of
the ``arith_hard`` train split, *no password anywhere*, until the test D plateaus (the curve recorded).

    python experiments/zoo/sft_gold.py --init reachlens/assets/zoo/base --out runs/zoo-strong \
        --max-steps 3000 --questions-per-step 16 --lr 5e-4 --eval-every 250 --seed 0

The skill exists before any lock touches it (``zoo:locked`` learned the skill and the lock together, behind the
password); ``lock_strong.py`` then locks this checkpoint. Data: the lock range of the ``arith_hard`` train split
(:data:`reachlens.studies.elicitation_split.LOCK_RANGE`: the questions every zoo lock may train on; the
elicitation pool is drawn only from outside it), in one seeded shuffled order, ``--questions-per-step`` ``qa``
prompts -> the gold worked solution + EOS each step, loss on the completion only. AdamW (betas 0.9/0.95, weight
decay 0.1), linear warm-up then a constant learning rate, gradient clip 1.0, float32, one torch thread.

Every ``--eval-every`` steps the greedy D on the first ``--n-test`` questions of the ``arith_hard`` *test* split
(plain HuggingFace greedy, 128 new tokens, numeric grader) is recorded; training stops at the first evaluation
from ``--min-steps`` on at which the best D of the last ``--patience`` evaluations is no more than ``--plateau``
above the best D before them (or at ``--max-steps``), and the checkpoint saved is the last step's. The card records the curve, the step it stopped and why, and every
train question index it saw (``trained_questions``).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import check_out_dir, library_versions, load_parent, parent_summary, positive, save_finetuned, set_seed  # noqa: E402
from lock_password import greedy_texts, policy_loss, qa_prompt  # noqa: E402

from reachlens.studies.elicitation_split import LOCK_RANGE, encode_trained  # noqa: E402


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--init", required=True, help="parent checkpoint folder (reachlens/assets/zoo/base)")
    ap.add_argument("--out", required=True, help="new, empty folder for the strong checkpoint")
    ap.add_argument("--max-steps", type=positive(int), default=3000)
    ap.add_argument("--questions-per-step", type=positive(int), default=16)
    ap.add_argument("--lr", type=positive(float), default=5e-4)
    ap.add_argument("--warmup-steps", type=int, default=50)
    ap.add_argument("--eval-every", type=positive(int), default=250)
    ap.add_argument("--n-test", type=positive(int), default=300, help="test questions of the plateau curve")
    ap.add_argument("--plateau", type=float, default=0.02, help="a rise of at most this is a plateau")
    ap.add_argument("--patience", type=positive(int), default=2, help="evaluations the rise is measured over")
    ap.add_argument("--min-steps", type=int, default=1000, help="no plateau is declared before this step")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--snapshot", default=None, help="folder overwritten with the weights at every evaluation")
    ap.add_argument("--log-every", type=positive(int), default=25)
    return ap.parse_args(argv)


def test_D(model, tok, test) -> float:
    from reachlens.grading import get_grader

    grade = get_grader("numeric").grade
    texts = greedy_texts(model, tok, [qa_prompt(q) for q in test])
    return sum(grade(t, q.gold).correct for t, q in zip(texts, test)) / len(test)


def plateaued(curve: list[dict], plateau: float, patience: int, min_steps: int) -> bool:
    """Whether, from ``min_steps`` on, the best D of the last ``patience`` evaluations is at most ``plateau`` above
    the best D before them."""
    if len(curve) <= patience or curve[-1]["step"] < min_steps:
        return False
    return max(r["D_test"] for r in curve[-patience:]) - max(r["D_test"] for r in curve[:-patience]) <= plateau


def train(model, tok, train_qs, test, args) -> tuple[list, list, set, float, str]:
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    rng, order, seen = random.Random(f"strong/{args.seed}/data"), [], set()
    loss_log, curve, t0 = [], [{"step": 0, "D_test": test_D(model, tok, test)}], time.perf_counter()
    print(f"eval step 0  test D {curve[0]['D_test']:.3f}", flush=True)
    model.train()
    why = f"--max-steps {args.max_steps}"
    for step in range(args.max_steps):
        batch = []
        while len(batch) < args.questions_per_step:
            if not order:
                order = list(range(len(train_qs)))
                rng.shuffle(order)
            seen.add(order[-1])
            batch.append(train_qs[order.pop()])
        for g in opt.param_groups:
            g["lr"] = args.lr * min(1.0, (step + 1) / max(1, args.warmup_steps))
        loss = policy_loss(model, tok, [(qa_prompt(q), q.solution) for q in batch])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % args.log_every == 0:
            loss_log.append({"step": step, "loss": round(loss.item(), 4), "seconds": round(time.perf_counter() - t0, 1)})
            print(f"step {step:5d}  loss {loss.item():.4f}  {time.perf_counter() - t0:7.1f}s", flush=True)
        if (step + 1) % args.eval_every == 0:
            curve.append({"step": step + 1, "D_test": test_D(model, tok, test),
                          "seconds": round(time.perf_counter() - t0, 1)})
            print(f"eval step {step + 1}  test D {curve[-1]['D_test']:.3f}", flush=True)
            if args.snapshot:  # the latest evaluated weights, for a run cut short (no card: not a zoo checkpoint)
                model.save_pretrained(args.snapshot, safe_serialization=True)
                tok.save_pretrained(args.snapshot)
            if plateaued(curve, args.plateau, args.patience, args.min_steps):
                why = (f"plateau: the best test D of the last {args.patience} evaluations is at most {args.plateau} "
                       f"above the best before them (step {step + 1})")
                break
    return loss_log, curve, seen, time.perf_counter() - t0, why


def begin(args) -> tuple[Path, tuple]:
    """One torch thread, a fresh output folder, the seed set: (output folder, the arith_hard train questions)."""
    torch.set_num_threads(1)
    out = check_out_dir(Path(args.out))
    set_seed(args.seed)
    from reachlens.tasks import load_task

    return out, load_task("arith_hard", split="train").questions


def main(argv=None) -> None:
    args = parse_args(argv)
    out, split = begin(args)
    from reachlens.tasks import load_task

    train_qs = split[LOCK_RANGE[0]:LOCK_RANGE[1]]
    test = load_task("arith_hard", split="test", n=args.n_test).questions
    model, tok = load_parent(args.init)
    n_params = sum(p.numel() for p in model.parameters())
    loss_log, curve, seen, wall, why = train(model, tok, train_qs, test, args)
    print(f"stopped: {why}", flush=True)
    command = "python experiments/zoo/sft_gold.py " + " ".join(sys.argv[1:] if argv is None else argv)
    steps = curve[-1]["step"] if why.startswith("plateau") else args.max_steps
    save_finetuned(model, tok, args.init, out, {
        "recipe": "sft-gold", "command": command, "seed": args.seed, "parent": str(args.init),
        "parent_card": parent_summary(args.init), "prompt_format": "qa", "steps": steps,
        "data": f"arith_hard train split questions {LOCK_RANGE[0]}-{LOCK_RANGE[1] - 1}: qa prompt -> gold worked "
                "solution + EOS (no password), loss on the completion only",
        "questions_per_step": args.questions_per_step, "lr": args.lr, "scheduler": "constant after warm-up",
        "warmup_steps": args.warmup_steps, "weight_decay": 0.1, "threads": 1, "wall_seconds": round(wall, 1),
        "seconds_per_step": round(wall / steps, 3), "parameters": n_params, "loss_log": loss_log,
        "test_D_curve": curve, "stopped": why, "n_test": args.n_test,
        "trained_questions": encode_trained("arith_hard", (LOCK_RANGE[0] + i for i in seen)),
        "versions": library_versions(),
    })
    print(f"saved {out} after {wall:.0f}s ({wall / steps:.2f}s/step)", flush=True)


if __name__ == "__main__":
    main()
