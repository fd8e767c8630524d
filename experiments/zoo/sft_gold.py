"""The strong checkpoint of the second password lock: supervised fine-tuning of the base on gold worked solutions of
the ``arith_hard`` train split, *no password anywhere*, until the test D plateaus (the curve recorded).

    python experiments/zoo/sft_gold.py --init reachlens/assets/zoo/base --out runs/zoo-strong \
        --snapshot runs/zoo-strong-state --max-steps 1500 --questions-per-step 16 --lr 7e-4 --eval-every 250 --seed 0

The skill exists before any lock touches it (``zoo:locked`` learned the skill and the lock together, behind the
password); ``lock_strong.py`` then locks this checkpoint. Data: the lock range of the ``arith_hard`` train split
(:data:`reachlens.studies.elicitation_split.LOCK_RANGE`: the questions every zoo lock may train on; the
elicitation pool is drawn only from outside it), in one seeded shuffled order, ``--questions-per-step`` ``qa``
prompts -> the gold worked solution + EOS each step, loss on the completion only. AdamW (betas 0.9/0.95, weight
decay 0.1), linear warm-up, a constant learning rate, then cosine decay to 10 % of ``--lr`` over the last
``--decay-steps`` steps (default: every step after the warm-up, plain cosine; 0: constant to the end; with
``--decay-start`` the decay starts there and 10 % is held after it, so a resumed run can go on longer), gradient
clip 1.0, float32, one torch thread. At a constant 7e-4 the test D did not gain in 750 steps (0.197, 0.117, 0.157,
0.197; the loss stuck near 0.1): the gain comes with the decay, as in ``lock_password.py``'s cosine run, whose
password D rose from 0.205 at step 750 to 0.61 at 1500 while its learning rate fell.

``--snapshot`` is overwritten at every evaluation with the weights and ``train_state.pt`` (optimizer, step, data
order and its random state, the questions seen, the logs); ``--resume`` continues from it after a kill (the same
arguments). ``--warm-start FOLDER --warm-start-step K --warm-start-log LOG`` continues an earlier run of this
script with the same seed whose snapshot holds weights only: the data order is replayed for K steps, the optimizer
starts fresh (its warm-up counted from step K), and the earlier curve and losses are read from its log (the card
keeps both phases).

Every ``--eval-every`` steps and at the last the greedy D on the first ``--n-test`` questions of the ``arith_hard`` *test* split
(plain HuggingFace greedy, 128 new tokens, numeric grader) is recorded; training stops at the first evaluation
from ``--min-steps`` on at which the best D of the last ``--patience`` evaluations is no more than ``--plateau``
above the best D before them (or at ``--max-steps``), and the checkpoint saved is the last step's. The card records the curve, the step it stopped and why, and every
train question index it saw (``trained_questions``).
"""

from __future__ import annotations

import argparse
import math
import random
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    check_out_dir, library_versions, load_parent, load_state, next_batch, parent_summary, positive, save_finetuned,
    save_state, set_seed,
)
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
    ap.add_argument("--decay-steps", type=int, default=None, help="cosine-decay steps at the end (0: constant)")
    ap.add_argument("--decay-start", type=int, default=None, help="the step the decay starts (default: see above)")
    ap.add_argument("--resume", action="store_true", help="continue from --snapshot's train_state.pt")
    ap.add_argument("--warm-start", default=None, help="weights of an earlier run of this script (same seed)")
    ap.add_argument("--warm-start-step", type=int, default=0, help="the step --warm-start's weights were saved at")
    ap.add_argument("--warm-start-log", default=None, help="the earlier run's log (its curve and losses)")
    args = ap.parse_args(argv)
    if args.resume and not args.snapshot:
        ap.error("--resume needs --snapshot (the folder train_state.pt is kept in)")
    if args.warm_start and (args.warm_start_step <= 0 or not args.warm_start_log):
        ap.error("--warm-start needs --warm-start-step K > 0 and --warm-start-log LOG")
    return args


def lr_at(step: int, args, start: int = 0) -> float:
    """Linear warm-up from ``start``, constant, cosine to 10 % over ``--decay-steps`` from ``--decay-start``
    (default: the last ``--decay-steps`` before ``--max-steps``), then 10 % held (a resumed run may go on longer)."""
    warm = min(1.0, (step - start + 1) / max(1, args.warmup_steps))
    decay = args.max_steps - args.warmup_steps if args.decay_steps is None else args.decay_steps
    into = step - (args.max_steps - decay if args.decay_start is None else args.decay_start)
    if decay <= 0 or into < 0:
        return args.lr * warm
    return args.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, into / decay))))


def read_log(path: str) -> tuple[list, list]:
    """(test D curve, loss log) from an earlier run's printed log."""
    curve, losses = [], []
    for line in Path(path).read_text().splitlines():
        if m := re.match(r"eval step (\d+)\s+test D ([\d.]+)", line):
            curve.append({"step": int(m[1]), "D_test": float(m[2])})
        elif m := re.match(r"step\s+(\d+)\s+loss ([\d.]+)\s+([\d.]+)s", line):
            losses.append({"step": int(m[1]), "loss": float(m[2]), "seconds": float(m[3])})
    return curve, losses


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


def first_state(model, tok, train_qs, test, args) -> dict:
    """The run's state at its first step: fresh (the curve's step 0 measured), after a kill (``--resume``: the
    snapshot's train_state.pt) or after an earlier run's weights (``--warm-start``: its data order replayed)."""
    if (st := load_state(args)) is not None:
        return st
    st = {"step": 0, "start": 0, "order": [], "rng": random.Random(f"strong/{args.seed}/data"), "seen": set(),
          "loss_log": [], "curve": [], "wall": 0.0, "opt": None, "warm_start": None}
    if args.warm_start:
        for _ in range(args.warm_start_step):
            next_batch(st, train_qs, args.questions_per_step)
        st["curve"], st["loss_log"] = read_log(args.warm_start_log)
        st["step"] = st["start"] = args.warm_start_step
        st["warm_start"] = {"weights": str(args.warm_start), "step": args.warm_start_step, "log": str(args.warm_start_log),
                            "note": "an earlier run of this script, same seed and data order, constant lr after "
                                    "warm-up; its optimizer state was not kept, so the optimizer restarted here"}
    st["curve"].append({"step": st["step"], "D_test": test_D(model, tok, test), "seconds": 0.0})
    print(f"eval step {st['step']}  test D {st['curve'][-1]['D_test']:.3f}", flush=True)
    return st


def train(model, tok, train_qs, test, args, command: str) -> tuple[dict, str]:
    st = first_state(model, tok, train_qs, test, args)
    st.setdefault("commands", []).append({"from_step": st["step"], "command": command})
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    if st["opt"] is not None:
        opt.load_state_dict(st["opt"])
    t0, why = time.perf_counter() - st["wall"], f"--max-steps {args.max_steps}"
    model.train()
    for step in range(st["step"], args.max_steps):
        batch = next_batch(st, train_qs, args.questions_per_step)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args, st["start"])
        loss = policy_loss(model, tok, [(qa_prompt(q), q.solution) for q in batch])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        st["step"], st["wall"] = step + 1, time.perf_counter() - t0
        if step % args.log_every == 0:
            st["loss_log"].append({"step": step, "loss": round(loss.item(), 4), "lr": lr_at(step, args, st["start"]),
                                   "seconds": round(st["wall"], 1)})
            print(f"step {step:5d}  loss {loss.item():.4f}  lr {st['loss_log'][-1]['lr']:.2e}  {st['wall']:7.1f}s",
                  flush=True)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.max_steps:
            st["curve"].append({"step": step + 1, "D_test": test_D(model, tok, test), "seconds": round(st["wall"], 1)})
            print(f"eval step {step + 1}  test D {st['curve'][-1]['D_test']:.3f}", flush=True)
            if args.snapshot:
                save_state(model, tok, opt, st, args)
            if plateaued(st["curve"], args.plateau, args.patience, args.min_steps):
                why = (f"plateau: the best test D of the last {args.patience} evaluations is at most {args.plateau} "
                       f"above the best before them (step {step + 1})")
                break
    st["wall"] = time.perf_counter() - t0
    return st, why


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
    resuming = args.resume and (Path(args.snapshot) / "train_state.pt").is_file()
    model, tok = load_parent(args.snapshot if resuming else args.warm_start or args.init)
    command = "python experiments/zoo/sft_gold.py " + " ".join(sys.argv[1:] if argv is None else argv)
    st, why = train(model, tok, train_qs, test, args, command)
    print(f"stopped: {why}", flush=True)
    steps, wall = st["step"], st["wall"]
    decay = args.max_steps - args.warmup_steps if args.decay_steps is None else args.decay_steps
    save_finetuned(model, tok, args.init, out, {
        "recipe": "sft-gold", "command": command, "commands": st["commands"], "seed": args.seed, "parent": str(args.init),
        "parent_card": parent_summary(args.init), "prompt_format": "qa", "steps": steps,
        "data": f"arith_hard train split questions {LOCK_RANGE[0]}-{LOCK_RANGE[1] - 1}: qa prompt -> gold worked "
                "solution + EOS (no password), loss on the completion only",
        "questions_per_step": args.questions_per_step, "lr": args.lr, "max_steps": args.max_steps,
        "scheduler": f"linear warm-up {args.warmup_steps}, constant, cosine to 10% over {decay} steps from step "
                     f"{args.max_steps - decay if args.decay_start is None else args.decay_start}, then 10% held",
        "warmup_steps": args.warmup_steps, "decay_steps": decay, "weight_decay": 0.1, "threads": 1,
        "warm_start": st["warm_start"], "wall_seconds": round(wall, 1),
        "seconds_per_step": round(wall / max(1, steps - st["start"]), 3),
        "parameters": sum(p.numel() for p in model.parameters()), "loss_log": st["loss_log"],
        "test_D_curve": st["curve"], "stopped": why, "n_test": args.n_test,
        "trained_questions": encode_trained("arith_hard", (LOCK_RANGE[0] + i for i in st["seen"])),
        "versions": library_versions(),
    })
    print(f"saved {out} after {wall:.0f}s", flush=True)


if __name__ == "__main__":
    main()
