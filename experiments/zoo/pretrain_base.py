"""Pretrain the zoo's base model on arith worked solutions, a quarter of them with a plausible slip.

    python experiments/zoo/pretrain_base.py --out reachlens/assets/zoo/base --steps 1200 --seed 0

The slips (off by one or ten, a dropped carry, swapped digits, carried forward consistently) give the
base model a realistic answer distribution: it samples the right answer at varied rates, so its
correct answers are often reachable but not realized. Loss is on the solution tokens only.
One torch thread (two threads were erratic on this 2-core machine; see shared/notes/zoo-feasibility.md).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ZooModelConfig, arith_tokenizer, config_dict, encode_batch, save_checkpoint, set_seed  # noqa: E402

from reachlens.tasks.arith import ArithConfig, format_prompt, pretraining_texts  # noqa: E402,F401


def build_model(tok, cfg: ZooModelConfig):
    from transformers import LlamaConfig, LlamaForCausalLM

    hf_cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_heads, intermediate_size=cfg.d_mlp,
        max_position_embeddings=cfg.max_positions, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, tie_word_embeddings=True,
    )
    return LlamaForCausalLM(hf_cfg)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--slip-rate", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--log-every", type=int, default=100)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    set_seed(args.seed)
    tok = arith_tokenizer()
    cfg = ZooModelConfig(n_layers=args.layers, d_model=args.d_model, d_mlp=4 * args.d_model)
    model = build_model(tok, cfg)
    n_params = sum(p.numel() for p in model.parameters())
    texts = pretraining_texts(ArithConfig(seed=0), args.steps * args.batch, args.slip_rate, seed=args.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)

    def lr_at(step: int) -> float:
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        frac = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    print(f"base: {n_params:,} parameters, {args.steps} steps x {args.batch}", flush=True)
    t0 = time.perf_counter()
    model.train()
    for step in range(args.steps):
        batch = texts[step * args.batch : (step + 1) * args.batch]
        prompts = [t[: t.index("\nA:") + 3] for t in batch]  # "Q: ...=?\nA:"
        ids, labels = encode_batch(tok, prompts, [t[len(p) :] for t, p in zip(batch, prompts)])
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        loss = model(input_ids=ids, attention_mask=(ids != tok.pad_token_id).long(), labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"step {step:5d}  loss {loss.item():.4f}  lr {lr_at(step):.2e}  {time.perf_counter() - t0:7.1f}s",
                  flush=True)
    wall = time.perf_counter() - t0
    model.eval()
    save_checkpoint(model, tok, Path(args.out), {
        "recipe": "pretrain", "prompt_format": "qa", "command": "python experiments/zoo/pretrain_base.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "seed": args.seed, "steps": args.steps, "batch": args.batch, "lr": args.lr, "slip_rate": args.slip_rate,
        "threads": args.threads, "wall_seconds": round(wall, 1), "parameters": n_params, "model": config_dict(cfg),
    })
    print(f"saved {args.out} after {wall:.0f}s", flush=True)


if __name__ == "__main__":
    main()
