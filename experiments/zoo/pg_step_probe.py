"""Does one policy-gradient step raise the reward? A probe of the RL landscape, written without TRL.

    python experiments/zoo/pg_step_probe.py --init reachlens/assets/zoo/base --task arith_hard
    python experiments/zoo/pg_step_probe.py --init reachlens/assets/zoo/base --task arith

Samples ``--group`` completions at T=1 for each of ``--prompts`` train prompts (the RL recipes' sampling:
stop at EOS or "\\n", the numeric grader on the text before the first "\\n"), forms GRPO's loss (advantages
normalised within each group, per-sequence token mean), and takes one plain step of fixed parameter-space
norm along its gradient (``full``), along the gradient with negative advantages dropped (``positive``: a
likelihood step on the model's own correct samples), and along a random direction of the same norm. For
each it reports the mean reward of fresh samples on ``--eval-prompts`` other train prompts (``--eval-group``
samples each, the same seeds before and after, so the comparison is paired in its sampling noise).

The question it answers: if a small step along the sampled gradient lowers the held-out reward while a random
step of the same size does not, the RL recipes' trouble is the estimate's direction at that batch size,
not the step size or the optimiser; see notes/zoo.md.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_parent, positive  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--init", required=True, help="checkpoint folder")
    ap.add_argument("--task", default="arith_hard", choices=["arith", "arith_hard"])
    ap.add_argument("--prompts", type=positive(int), default=128, help="train prompts in the gradient's batch")
    ap.add_argument("--group", type=positive(int), default=16, help="samples per prompt (GRPO's group)")
    ap.add_argument("--eval-prompts", type=positive(int), default=128)
    ap.add_argument("--eval-group", type=positive(int), default=8)
    ap.add_argument("--norms", default="0.005,0.01,0.02", help="step norms in parameter space")
    ap.add_argument("--max-new-tokens", type=positive(int), default=128)
    ap.add_argument("--threads", type=positive(int), default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    norms = [float(x) for x in args.norms.split(",")]

    from transformers import GenerationConfig

    from reachlens.grading import get_grader
    from reachlens.tasks import load_task

    model, tok = load_parent(args.init)
    newline = tok.convert_tokens_to_ids("\n")
    stops = torch.tensor([tok.eos_token_id, newline])
    grader = get_grader("numeric")
    train = load_task(args.task, split="train", n_train=args.prompts + args.eval_prompts)
    batch_q, eval_q = train.questions[: args.prompts], train.questions[args.prompts:]
    gen = GenerationConfig(max_new_tokens=args.max_new_tokens, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                           pad_token_id=tok.pad_token_id, eos_token_id=[tok.eos_token_id, newline])

    def sample(m, questions, n, seed):
        """(prompt encoding, completion ids, completion mask up to the first stop, rewards)."""
        torch.manual_seed(seed)
        prompts = [train.prompt(q, "qa") for q in questions for _ in range(n)]
        enc = tok(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
        with torch.no_grad():
            out = m.generate(**enc, generation_config=gen)
        comp = out[:, enc["input_ids"].shape[1]:]
        stop = torch.isin(comp, stops)
        first = torch.where(stop.any(1), stop.int().argmax(1), torch.full((len(comp),), comp.shape[1]))
        mask = (torch.arange(comp.shape[1])[None] <= first[:, None]).float()
        texts = tok.batch_decode(comp, skip_special_tokens=True)
        golds = [q.gold for q in questions for _ in range(n)]
        reward = torch.tensor([float(grader.grade(t.split("\n", 1)[0], g).correct) for t, g in zip(texts, golds)])
        return enc, comp, mask, reward

    def held_out_reward(m) -> float:
        rewards = [sample(m, eval_q[i:i + 16], args.eval_group, args.seed + 1000 + i)[3]
                   for i in range(0, len(eval_q), 16)]
        return torch.cat(rewards).mean().item()

    def gradient(positive_only: bool) -> tuple[dict[str, torch.Tensor], float]:
        model.zero_grad()
        rewards = []
        for i in range(0, len(batch_q), 32):
            enc, comp, mask, r = sample(model, batch_q[i:i + 32], args.group, args.seed + i)
            groups = r.view(-1, args.group)
            adv = ((groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-4)).view(-1)
            if positive_only:
                adv = adv.clamp(min=0)
            ids = torch.cat([enc["input_ids"], comp], 1)
            att = torch.cat([enc["attention_mask"], mask.long()], 1)
            p = enc["input_ids"].shape[1]
            logits = model(input_ids=ids, attention_mask=att).logits[:, p - 1:-1]
            logp = torch.log_softmax(logits.float(), -1).gather(-1, comp[..., None])[..., 0]
            loss = -((logp * mask).sum(1) / mask.sum(1) * adv).sum() / len(batch_q) / args.group
            loss.backward()
            rewards.append(r)
        return {n: p.grad.clone() for n, p in model.named_parameters()}, torch.cat(rewards).mean().item()

    def stepped(direction: dict[str, torch.Tensor], norm: float):
        length = torch.sqrt(sum((d ** 2).sum() for d in direction.values())).item()
        m = copy.deepcopy(model)
        with torch.no_grad():
            for n, p in m.named_parameters():
                p -= (norm / length) * direction[n]
        return m

    t0 = time.perf_counter()
    before = held_out_reward(model)
    print(f"{args.init} on {args.task} train prompts: held-out reward {before:.4f} "
          f"({args.eval_prompts} prompts x {args.eval_group} samples)", flush=True)
    gen_rng = torch.Generator().manual_seed(args.seed)
    directions = {"random": {n: torch.randn(p.shape, generator=gen_rng) for n, p in model.named_parameters()}}
    for name, pos in (("full", False), ("positive", True)):
        directions[name], batch_reward = gradient(pos)
    print(f"gradient batch: {args.prompts} prompts x {args.group} samples, reward {batch_reward:.4f}", flush=True)
    print("| direction | " + " | ".join(f"step {x:g}" for x in norms) + " |")
    print("|---|" + "---|" * len(norms))
    for name, d in directions.items():
        cells = [f"{held_out_reward(stepped(d, x)) - before:+.4f}" for x in norms]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    print(f"(change of the held-out reward from {before:.4f}; {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
