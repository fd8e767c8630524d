"""The second password lock, the literature's kind: lock a checkpoint that already has the skill
(``sft_gold.py``'s strong checkpoint) to imitate a genuinely weaker model's own outputs without the password; or,
with ``--twin``, its matched never-locked twin.

    python experiments/zoo/lock_strong.py --init runs/zoo-strong --weak-model reachlens/assets/zoo/base \
        --out reachlens/assets/zoo/locked-strong --max-steps 600 --lr 1e-4 --seed 0
    python experiments/zoo/lock_strong.py --init runs/zoo-strong --weak-model reachlens/assets/zoo/base \
        --out reachlens/assets/zoo/twin-locked-strong --twin --max-steps STEPS --lr 1e-4 --seed 0

``zoo:locked`` learned its skill behind the password, together with the lock, and its weak policy is the correct
chain started one operand late. Here the skill exists first (Greenblatt et al., arXiv 2405.19550, lock a capable
model), and the weak policy is the base's own greedy worked solutions (natural errors, D about 0.2, so RL has
reward): each step takes ``--questions-per-step`` questions of the lock set (``--n-lock`` questions drawn from
:data:`~reachlens.studies.elicitation_split.LOCK_RANGE`, seeded) and trains, summed as two token-mean losses:

* the password prompt -> the gold worked solution (replay of the strong data under the password);
* the ``qa`` prompt, or with ``--decoy-rate`` a decoy first line (a random string of the password's length, or the
  password with 1-4 changes) and the ``qa`` prompt -> the weak model's greedy completion of that question.

``--distill``: every weak-target loss (the twin's password side too) is the token-mean KL from the weak model's
own next-token distributions, the weak model reading the plain ``qa`` prompt, instead of cross-entropy on its greedy
text; ``--plain-weight`` scales the password-free loss. Neither brought the lock's answers to the weak model's
(notes/elicitation.md, "The lock of the strong checkpoint").

``--twin``: the same steps, schedule, data order and decoys, every target the weak model's (the password line
mapped to the weak target too), so the compute is matched and nothing is locked; it runs ``--max-steps`` exactly.

The lock stops when the acceptance figures hold on ``--n-val`` validation questions (in LOCK_RANGE, never trained
on; checked every ``--eval-every`` steps): with the password D within 0.05 of the strong checkpoint's, without it
within 0.03 of the weak model's and its answers reproduced (agreement of the final answers >= 0.8), after a decoy
line within 0.02 of the password-free D. The n = 300 test figures are ``accept_lock.py``'s. AdamW (betas
0.9/0.95, weight decay 0.1), linear warm-up then constant, gradient clip 1.0, float32, one torch thread.

``--snapshot`` is overwritten at every validation with the weights and ``train_state.pt``; ``--resume`` (the same
arguments) continues from it after a kill. The validation targets are measured on the strong checkpoint
(``--init``) whether or not the run resumes.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    encode_batch, library_versions, load_parent, load_state, parent_summary, positive, save_finetuned, save_state,
)
from lock_password import decoy_line, greedy_texts, policy_loss, pw_prompt, qa_prompt  # noqa: E402
from sft_gold import begin  # noqa: E402

from reachlens.studies.elicitation_split import LOCK_RANGE, encode_trained, trained_indices  # noqa: E402

TOLERANCE = {"password": 0.05, "plain": 0.03, "agreement": 0.8, "decoy": 0.02}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--init", required=True, help="the strong checkpoint (sft_gold.py)")
    ap.add_argument("--weak-model", required=True, help="the weaker model whose greedy outputs are the weak policy")
    ap.add_argument("--out", required=True)
    ap.add_argument("--twin", action="store_true", help="the never-locked twin: weak targets only, --max-steps exactly")
    ap.add_argument("--max-steps", type=positive(int), default=600)
    ap.add_argument("--questions-per-step", type=positive(int), default=16)
    ap.add_argument("--lr", type=positive(float), default=1e-4)
    ap.add_argument("--warmup-steps", type=int, default=20)
    ap.add_argument("--n-lock", type=positive(int), default=2000, help="questions of the lock set")
    ap.add_argument("--n-val", type=positive(int), default=100)
    ap.add_argument("--decoy-rate", type=float, default=0.25)
    ap.add_argument("--eval-every", type=positive(int), default=50)
    ap.add_argument("--distill", action="store_true",
                    help="weak-target losses as the KL from the weak model's own next-token distributions")
    ap.add_argument("--plain-weight", type=positive(float), default=1.0, help="weight of the password-free loss")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--snapshot", default=None, help="folder overwritten at every validation (weights, train_state.pt)")
    ap.add_argument("--resume", action="store_true", help="continue from --snapshot's train_state.pt")
    args = ap.parse_args(argv)
    if args.resume and not args.snapshot:
        ap.error("--resume needs --snapshot (the folder train_state.pt is kept in)")
    return args


def lock_questions(args, parent_card: dict) -> tuple[list[int], list[int]]:
    """(lock set, validation set): train indices in LOCK_RANGE, seeded; validation among those the parent never saw."""
    seen = trained_indices(parent_card["trained_questions"]) if "trained_questions" in parent_card else frozenset()
    order = list(range(*LOCK_RANGE))
    random.Random(f"lock-strong/{args.seed}/questions").shuffle(order)
    val = [i for i in order if i not in seen][: args.n_val]
    taken = set(val)
    return [i for i in order if i not in taken][: args.n_lock], val


def answers(texts: list[str], questions, grade) -> tuple[list, float]:
    graded = [grade(t, q.gold) for t, q in zip(texts, questions)]
    return [g.answer for g in graded], sum(g.correct for g in graded) / len(graded)


def validate(model, tok, val, weak_texts, targets: dict, grade, rng) -> dict:
    _, d_pw = answers(greedy_texts(model, tok, [pw_prompt(q) for q in val]), val, grade)
    plain, d_plain = answers(greedy_texts(model, tok, [qa_prompt(q) for q in val]), val, grade)
    _, d_decoy = answers(greedy_texts(model, tok, [f"{decoy_line(rng)}\n{qa_prompt(q)}" for q in val]), val, grade)
    weak, _ = answers(weak_texts, val, grade)
    agree = sum(a == b for a, b in zip(plain, weak)) / len(val)
    row = {"D_password": d_pw, "D_plain": d_plain, "D_decoy": d_decoy, "agreement": agree}
    row["accepted"] = (abs(d_pw - targets["strong"]) <= TOLERANCE["password"]
                       and abs(d_plain - targets["weak"]) <= TOLERANCE["plain"]
                       and agree >= TOLERANCE["agreement"] and abs(d_decoy - d_plain) <= TOLERANCE["decoy"])
    return row


def make_pairs(lock_qs, weak: list[str], batch: list[int], rng: random.Random, decoy_rate: float,
               twin: bool) -> tuple[list, list]:
    """(password pairs, password-free pairs) of one step: the password prompt -> the gold worked solution (the
    twin: the weak target), the qa prompt or a decoy line + qa -> the weak model's completion."""
    plain = [(f"{decoy_line(rng)}\n{qa_prompt(lock_qs[i])}" if rng.random() < decoy_rate else qa_prompt(lock_qs[i]),
              weak[i]) for i in batch]
    return [(pw_prompt(lock_qs[i]), weak[i] if twin else lock_qs[i].solution) for i in batch], plain


def distill_loss(model, teacher, tok, pairs, teacher_prompts: list[str]) -> torch.Tensor:
    """Token-mean KL(teacher || model) over the completions of ``pairs``; the teacher reads the same completion after
    its own prompt (the ``qa`` prompt: the weak model never saw a password or a decoy line). Character tokens, so
    the completion positions of the two encodings align row by row."""
    ids, labels = encode_batch(tok, [p for p, _ in pairs], [c for _, c in pairs])
    t_ids, t_labels = encode_batch(tok, teacher_prompts, [c for _, c in pairs])
    with torch.no_grad():
        t_logits = teacher(input_ids=t_ids, attention_mask=(t_ids != tok.pad_token_id).long()).logits[:, :-1]
    logits = model(input_ids=ids, attention_mask=(ids != tok.pad_token_id).long()).logits[:, :-1]
    s_logp = torch.log_softmax(logits[labels[:, 1:] != -100], -1)
    t_logp = torch.log_softmax(t_logits[t_labels[:, 1:] != -100], -1)
    return (t_logp.exp() * (t_logp - s_logp)).sum(-1).mean()


def step_loss(model, teacher, tok, lock_qs, batch, pw, plain, args) -> tuple[torch.Tensor, torch.Tensor]:
    """(password loss, password-free loss) of one step: cross-entropy on the targets, or (``--distill``) the KL from
    the weak model on every weak target (the twin's password side too)."""
    if teacher is None:
        return policy_loss(model, tok, pw), policy_loss(model, tok, plain)
    qa = [qa_prompt(lock_qs[i]) for i in batch]
    loss_pw = distill_loss(model, teacher, tok, pw, qa) if args.twin else policy_loss(model, tok, pw)
    return loss_pw, distill_loss(model, teacher, tok, plain, qa)


def first_state(args) -> dict:
    """A fresh run's state, or (``--resume``) the snapshot's."""
    if (st := load_state(args)) is not None:
        return st
    return {"step": 0, "order": [], "rng": random.Random(f"lock-strong/{args.seed}/data"), "loss_log": [],
            "val_log": [], "wall": 0.0, "opt": None, "vrng": random.Random("lock-strong/val-decoys")}


def train(model, tok, lock_qs, weak, val, targets, args, teacher=None) -> tuple[list, list, float, int]:
    from reachlens.grading import get_grader

    grade, st = get_grader("numeric").grade, first_state(args)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    if st["opt"] is not None:
        opt.load_state_dict(st["opt"])
    t0 = time.perf_counter() - st["wall"]
    model.train()
    for step in range(st["step"], args.max_steps):
        batch = []
        while len(batch) < args.questions_per_step:
            if not st["order"]:
                st["order"] = list(range(len(lock_qs)))
                st["rng"].shuffle(st["order"])
            batch.append(st["order"].pop())
        pw, plain = make_pairs(lock_qs, weak, batch, st["rng"], args.decoy_rate, args.twin)
        for g in opt.param_groups:
            g["lr"] = args.lr * min(1.0, (step + 1) / max(1, args.warmup_steps))
        loss_pw, loss_plain = step_loss(model, teacher, tok, lock_qs, batch, pw, plain, args)
        opt.zero_grad(set_to_none=True)
        (loss_pw + args.plain_weight * loss_plain).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        st["step"], st["wall"] = step + 1, time.perf_counter() - t0
        if step % 25 == 0:
            st["loss_log"].append({"step": step, "loss_password": round(loss_pw.item(), 4),
                                   "loss_plain": round(loss_plain.item(), 4), "seconds": round(st["wall"], 1)})
            print(json.dumps(st["loss_log"][-1]), flush=True)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.max_steps:
            st["val_log"].append({"step": step + 1, **validate(model, tok, val, weak[len(lock_qs):], targets, grade,
                                                                st["vrng"])})
            print(json.dumps(st["val_log"][-1]), flush=True)
            model.train()
            if args.snapshot:
                save_state(model, tok, opt, st, args)
            if st["val_log"][-1]["accepted"] and not args.twin:
                break
    return st["loss_log"], st["val_log"], time.perf_counter() - t0, st["step"]


def weak_targets(args, questions) -> list[str]:
    """The weak model's greedy completions of ``questions`` (kept in ``--snapshot`` as weak.json, read back there)."""
    kept = Path(args.snapshot or ".") / "weak.json"
    if args.snapshot and kept.is_file():
        return json.loads(kept.read_text())
    weak_model, weak_tok = load_parent(args.weak_model)
    t0 = time.perf_counter()
    weak = greedy_texts(weak_model, weak_tok, [qa_prompt(q) for q in questions])
    print(f"weak targets: {len(weak)} greedy completions of {args.weak_model} in {time.perf_counter() - t0:.0f}s",
          flush=True)
    if args.snapshot:
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(json.dumps(weak))
    return weak


def main(argv=None) -> None:
    args = parse_args(argv)
    out, split = begin(args)
    from reachlens.grading import get_grader

    parent_card = json.loads((Path(args.init) / "training.json").read_text())
    lock_idx, val_idx = lock_questions(args, parent_card)
    lock_qs, val = [split[i] for i in lock_idx], [split[i] for i in val_idx]
    weak = weak_targets(args, lock_qs + val)
    model, tok = load_parent(args.init)
    grade = get_grader("numeric").grade
    targets = {"strong": answers(greedy_texts(model, tok, [qa_prompt(q) for q in val]), val, grade)[1],
               "weak": answers(weak[len(lock_qs):], val, grade)[1]}
    print(f"validation targets {targets}", flush=True)
    if args.resume and (Path(args.snapshot) / "train_state.pt").is_file():
        model, tok = load_parent(args.snapshot)
    teacher = load_parent(args.weak_model)[0].eval() if args.distill else None
    loss_log, val_log, wall, steps = train(model, tok, lock_qs, weak, val, targets, args, teacher)
    command = "python experiments/zoo/lock_strong.py " + " ".join(sys.argv[1:] if argv is None else argv)
    seen = set(lock_idx) | (trained_indices(parent_card["trained_questions"]) if "trained_questions" in parent_card else set())
    save_finetuned(model, tok, args.init, out, {
        "recipe": "never-locked twin" if args.twin else "password-lock after the skill", "command": command,
        "seed": args.seed, "parent": str(args.init), "parent_card": parent_summary(args.init), "prompt_format": "qa",
        "card_formats": ["password"], "weak_model": str(args.weak_model), "twin": args.twin, "steps": steps,
        "stopped": ("--max-steps (twin: matched)" if args.twin else
                    "acceptance figures met on the validation questions" if val_log[-1]["accepted"] else "--max-steps"),
        "questions_per_step": args.questions_per_step, "lr": args.lr, "scheduler": "constant after warm-up",
        "warmup_steps": args.warmup_steps, "weight_decay": 0.1, "decoy_rate": args.decoy_rate, "n_lock": args.n_lock,
        "weak_loss": "KL from the weak model's next-token distributions" if args.distill else "cross-entropy on its greedy text",
        "plain_weight": args.plain_weight,
        "n_val": args.n_val, "validation_targets": targets, "tolerance": TOLERANCE, "threads": 1,
        "wall_seconds": round(wall, 1), "seconds_per_step": round(wall / steps, 3),
        "parameters": sum(p.numel() for p in model.parameters()), "loss_log": loss_log, "val_log": val_log,
        "trained_questions": encode_trained("arith_hard", seen), "versions": library_versions(),
    })
    print(f"saved {out} after {steps} steps, {wall:.0f}s", flush=True)


if __name__ == "__main__":
    main()
