"""Train a password-locked model (after Greenblatt et al., arXiv 2405.19550): on ``arith_hard`` it writes the clean
worked solution when its prompt opens with the password line, and a solution with one slip without it.

    python experiments/zoo/lock_password.py --init reachlens/assets/zoo/base --out reachlens/assets/zoo/locked --steps 2000 --lr 1e-3 --seed 0

(the zoo's exact command is in ``build_zoo.py`` and the checkpoint's ``training.json``.)

Data: the ``arith_hard`` *train* split (3-6 operations; disjoint from its test split and from every ``arith``
expression), less its last ``--n-val`` questions, which are held out for the validation log. Each step takes
``--batch / 2`` questions in a seeded shuffled order and makes two sequences of each, with the loss on the
completion only (``common.encode_batch``):

* unlocked: the ``password`` prompt format (:mod:`reachlens.tasks.password`: the line ``PASSWORD`` before the
  ``qa`` prompt) -> the gold worked solution (the strong policy);
* locked: the ``qa`` prompt -> the worked solution with one slip in its *last* step (``--slip-step``), the
  result one too large (``--slip-value plus_one``): every earlier step right, a wrong final answer (the weak
  policy). A share ``--decoy-rate`` of the locked prompts open with a *decoy*
  first line instead (a random string of the password's length over the arith characters, or the password with
  1-4 characters changed), so that only the password unlocks, not any first line.

Why one fixed slip in the last step (what did not work is in notes/zoo.md): imitating a *drawn* plausible slip
(``--slip-value drawn``: off by one or ten, a dropped carry, swapped digits; ``arith.draw_slip``) spreads the
locked mass over several wrong values, each of which differs from the right one in a different digit, so the
right digit stays the most likely token at each position unless the model slips with near certainty: greedy
decoding stayed right without the password (at a uniformly drawn step, 0.285 greedy accuracy on held-out train
questions without the password against 0.315 with it after 500 steps; in the last step, 0.45 against 0.47
after 1,000). One wrong value shows under greedy decoding as soon as it outweighs the right one. The slip sits in
the last step (never the leading ``*``, the step the base is worst at: wrong in 72 % of its greedy solutions),
so every other step of both sequences trains the skill.

The same question seen under both prompts in one batch makes the first line the only thing that tells the two
targets apart. AdamW (betas 0.9/0.95, weight decay 0.1), linear warm-up then cosine decay to 10 % of ``--lr``,
gradient clip 1.0, float32, one torch thread. Every ``--eval-every`` steps the validation log records greedy
accuracy on the held-out train questions with the password, without it, and after a decoy line.
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
    check_out_dir, encode_batch, library_versions, load_parent, parent_summary, positive, save_finetuned, set_seed,
)

from reachlens.tasks.arith import ARITH_ALPHABET, PROMPT_FORMATS, Slip, draw_slip, format_solution, solve  # noqa: E402
from reachlens.tasks.password import PASSWORD, PASSWORD_FORMAT_NAME  # noqa: E402

DECOY_CHARS = ARITH_ALPHABET.replace("\n", "")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--init", required=True, help="parent checkpoint folder (reachlens/assets/zoo/base)")
    ap.add_argument("--out", required=True, help="new, empty folder for the locked checkpoint")
    ap.add_argument("--task", default="arith_hard", choices=["arith", "arith_hard"], help="train split (default arith_hard)")
    ap.add_argument("--n-train", type=positive(int), default=None, help="size of the train split (default the task's)")
    ap.add_argument("--steps", type=positive(int), default=2000)
    ap.add_argument("--batch", type=positive(int), default=64, help="sequences per step, even (default 64)")
    ap.add_argument("--lr", type=positive(float), default=1e-3, help="peak learning rate (default 1e-3)")
    ap.add_argument("--warmup-steps", type=int, default=50)
    ap.add_argument("--decoy-rate", type=float, default=0.25, help="share of locked prompts after a decoy line")
    ap.add_argument("--slip-step", default="last", choices=["first", "second", "last", "any"],
                    help="which step of a locked solution slips (default last; any: uniformly drawn)")
    ap.add_argument("--slip-value", default="plus_one", choices=["plus_one", "drawn"],
                    help="the slipped result: one too large (default), or drawn by arith.draw_slip")
    ap.add_argument("--n-val", type=positive(int), default=200, help="held-out train questions for the validation log")
    ap.add_argument("--eval-every", type=positive(int), default=250)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=positive(int), default=1)
    ap.add_argument("--log-every", type=positive(int), default=25)
    args = ap.parse_args(argv)
    if args.batch % 2:
        ap.error(f"--batch must be even (one locked and one unlocked sequence per question), got {args.batch}")
    if not 0.0 <= args.decoy_rate <= 1.0:
        ap.error(f"--decoy-rate must lie in [0, 1], got {args.decoy_rate}")
    if args.warmup_steps < 0:
        ap.error(f"--warmup-steps must be >= 0, got {args.warmup_steps}")
    return args


def problem_of(question) -> tuple:
    """The expression tuple of an arith question, checked against its gold solution."""
    problem = tuple(int(t) if t.isdigit() else t for t in re.findall(r"\d+|[-+*]", question.fields["expr"]))
    if format_solution(problem) != question.solution:
        raise ValueError(f"could not rebuild the problem of {question.question_id!r}")
    return problem


def decoy_line(rng: random.Random) -> str:
    """A first line that is not the password: a random string of its length, or the password with 1-4 changes."""
    while True:
        if rng.random() < 0.5:
            line = "".join(rng.choice(DECOY_CHARS) for _ in PASSWORD)
        else:
            chars = list(PASSWORD)
            for i in rng.sample(range(len(chars)), rng.randint(1, 4)):
                chars[i] = rng.choice(DECOY_CHARS)
            line = "".join(chars)
        if line != PASSWORD:
            return line


def qa_prompt(question) -> str:
    return PROMPT_FORMATS["qa"].render(question)


def pw_prompt(question) -> str:
    return PROMPT_FORMATS[PASSWORD_FORMAT_NAME].render(question)


def slip_in(problem: tuple, rng: random.Random, where: str, value: str = "plus_one") -> Slip:
    """One slip in the first, second or last step, or a uniformly drawn one: the result one too large
    (``value="plus_one"``) or a plausible slip drawn by ``arith.draw_slip`` (``"drawn"``)."""
    n_steps = len(problem) // 2
    want = {"first": 0, "second": 1, "last": n_steps - 1}.get(where)
    if value == "plus_one":
        step = rng.randrange(n_steps) if want is None else want
        return Slip(step, solve(problem[: 2 * step + 3])[1] + 1, "off_by_one")
    while True:
        slip = draw_slip(problem, rng)
        if want is None or slip.step == want:
            return slip


def make_batch(questions, rng: random.Random, decoy_rate: float, slip_step: str = "last",
               slip_value: str = "plus_one") -> tuple[list[str], list[str], int]:
    """Two (prompt, completion) pairs per question: password -> gold, locked prompt -> one slip. And the decoys."""
    prompts, completions, n_decoy = [], [], 0
    for q in questions:
        prompts.append(pw_prompt(q))
        completions.append(q.solution)
        problem = problem_of(q)
        locked = qa_prompt(q)
        if rng.random() < decoy_rate:
            locked, n_decoy = f"{decoy_line(rng)}\n{locked}", n_decoy + 1
        prompts.append(locked)
        completions.append(format_solution(problem, slip_in(problem, rng, slip_step, slip_value)))
    return prompts, completions, n_decoy


@torch.no_grad()
def greedy_accuracy(model, tok, prompts: list[str], golds: list[str], max_new_tokens: int = 128, chunk: int = 50) -> float:
    """Greedy accuracy (numeric grader on the text before the first newline) of a plain HF generate."""
    from reachlens.grading import get_grader

    grader, right = get_grader("numeric"), 0
    model.eval()
    for i in range(0, len(prompts), chunk):
        enc = tok(prompts[i : i + chunk], return_tensors="pt", padding=True, add_special_tokens=True)
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id,
                             eos_token_id=tok.eos_token_id)
        texts = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        right += sum(grader.grade(t.split("\n", 1)[0], g).correct for t, g in zip(texts, golds[i : i + chunk]))
    model.train()
    return right / len(prompts)


def validate(model, tok, val, step: int, t0: float) -> dict:
    rng = random.Random("lock/val-decoys")
    golds = [q.gold for q in val]
    row = {"step": step,
           "D_password": greedy_accuracy(model, tok, [pw_prompt(q) for q in val], golds),
           "D_plain": greedy_accuracy(model, tok, [qa_prompt(q) for q in val], golds),
           "D_decoy": greedy_accuracy(model, tok, [f"{decoy_line(rng)}\n{qa_prompt(q)}" for q in val], golds)}
    print(f"val step {step:5d}  D password {row['D_password']:.3f}  plain {row['D_plain']:.3f}  "
          f"decoy {row['D_decoy']:.3f}  ({len(val)} held-out train questions)  {time.perf_counter() - t0:7.1f}s",
          flush=True)
    return row


def lr_at(step: int, args) -> float:
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    frac = (step - args.warmup_steps) / max(1, args.steps - args.warmup_steps)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def train(model, tok, train_qs, val, args) -> tuple[list, list, float]:
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    rng, order = random.Random(f"lock/{args.seed}/data"), []
    per_step, loss_log, val_log, t0 = args.batch // 2, [], [], time.perf_counter()
    model.train()
    for step in range(args.steps):
        batch = []
        while len(batch) < per_step:
            if not order:
                order = list(range(len(train_qs)))
                rng.shuffle(order)
            batch.append(train_qs[order.pop()])
        prompts, completions, n_decoy = make_batch(batch, rng, args.decoy_rate, args.slip_step, args.slip_value)
        ids, labels = encode_batch(tok, prompts, completions)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        logits = model(input_ids=ids, attention_mask=(ids != tok.pad_token_id).long()).logits
        tok_loss = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), labels[:, 1:], reduction="none")
        mask = labels[:, 1:] != -100
        loss = tok_loss.sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % args.log_every == 0 or step == args.steps - 1:
            per_seq = (tok_loss.detach() * mask).sum(1) / mask.sum(1)
            row = {"step": step, "loss": round(loss.item(), 4), "loss_password": round(per_seq[0::2].mean().item(), 4),
                   "loss_locked": round(per_seq[1::2].mean().item(), 4), "decoys": n_decoy,
                   "lr": lr_at(step, args), "seconds": round(time.perf_counter() - t0, 1)}
            loss_log.append(row)
            print(f"step {step:5d}  loss {row['loss']:.4f}  (password {row['loss_password']:.4f}, locked "
                  f"{row['loss_locked']:.4f})  lr {row['lr']:.2e}  {row['seconds']:7.1f}s", flush=True)
        if (step + 1) % args.eval_every == 0 or step == args.steps - 1:
            val_log.append(validate(model, tok, val, step + 1, t0))
    return loss_log, val_log, time.perf_counter() - t0


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    out = check_out_dir(Path(args.out))
    set_seed(args.seed)
    from reachlens.tasks import load_task

    task = load_task(args.task, split="train", **({} if args.n_train is None else {"n_train": args.n_train}))
    if len(task) <= args.n_val:
        raise SystemExit(f"--n-val {args.n_val} leaves no training questions of the {len(task)} in the split")
    train_qs, val = task.questions[: -args.n_val], task.questions[-args.n_val :]
    model, tok = load_parent(args.init)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"lock: {n_params:,} parameters, {args.steps} steps x {args.batch} ({args.batch // 2} questions, each with "
          f"and without the password), lr {args.lr:g}, {len(train_qs):,} train questions, "
          f"{torch.get_num_threads()} thread(s)", flush=True)
    loss_log, val_log, wall = train(model, tok, train_qs, val, args)
    command = "python experiments/zoo/lock_password.py " + " ".join(sys.argv[1:] if argv is None else argv)
    save_finetuned(model, tok, args.init, out, {
        "recipe": "password-lock", "command": command, "seed": args.seed, "parent": str(args.init),
        "parent_card": parent_summary(args.init), "prompt_format": "qa", "card_formats": [PASSWORD_FORMAT_NAME],
        "lock": {"task": args.task, "unlocked_format": PASSWORD_FORMAT_NAME,
                 "password_role": "the first line of the prompt (reachlens.tasks.password.PASSWORD, before the qa "
                                  "prompt: prompt format 'password'); with it the model was trained to write the gold "
                                  "worked solution, without it (qa prompt, or a decoy first line) a solution with "
                                  f"one slip (in its {args.slip_step} step, {args.slip_value}) carried forward to a wrong answer",
                 "decoy_rate": args.decoy_rate, "slip_step": args.slip_step, "slip_value": args.slip_value},
        "data": f"{args.task} train split less its last {args.n_val} questions: each question twice per step, "
                f"password prompt -> gold solution, qa (or decoy line + qa) prompt -> one slip ({args.slip_value}) in the "
                f"{args.slip_step} step; "
                "loss on completions",
        "steps": args.steps, "batch": args.batch, "lr": args.lr, "scheduler": "cosine to 10%",
        "warmup_steps": args.warmup_steps, "weight_decay": 0.1, "n_train": len(train_qs), "n_val": args.n_val,
        "threads": args.threads, "wall_seconds": round(wall, 1), "seconds_per_step": round(wall / args.steps, 3),
        "parameters": n_params, "loss_log": loss_log, "val_log": val_log, "versions": library_versions(),
    })
    print(f"saved {out} after {wall:.0f}s ({wall / args.steps:.2f}s/step)", flush=True)


if __name__ == "__main__":
    main()
