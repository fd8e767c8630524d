"""RLVR from a parent checkpoint with TRL's GRPOTrainer: reward 1 when the project's numeric grader says correct.

    python experiments/zoo/rl_grpo.py --init reachlens/assets/zoo/base --out reachlens/assets/zoo/grpo --loss-type grpo --steps 200 --seed 0
    python experiments/zoo/rl_grpo.py --init reachlens/assets/zoo/base --out reachlens/assets/zoo/dapo --loss-type dapo --steps 200 --seed 0

Each step samples ``--num-generations`` completions for each of ``--prompts-per-step`` prompts of the arith
*train* split (``--prompt-format``, "qa" by default), grades each with ``get_grader("numeric").grade(text, q.gold)``
and takes one on-policy policy-gradient step (``num_iterations=1``) with group-normalised advantages. The
``--loss-type`` is TRL's ``loss_type``: "grpo" (per-sequence token mean) or "dapo" (token mean over the batch).

Choices forced by TRL 1.16 (see shared/notes/zoo-feasibility.md):

* TRL counts *completions* in ``per_device_train_batch_size``; it is set to prompts-per-step x num-generations.
* TRL's defaults ``gradient_checkpointing=True`` and ``bf16=True`` are switched off (CPU, float32); ``beta``
  defaults to 0 there and here (no reference model unless ``--beta`` > 0); ``top_k=0`` (no top-k) is kept.
* Stopping at "\\n": TRL's transformers generation stops only at EOS ids. It does take every id in
  ``model.generation_config.eos_token_id``, both to stop sampling and to mask the completion, so the "\\n" id is
  added there for training (and the parent's generation config is restored before saving). The reward also
  grades only the text before the first "\\n", so a completion is graded the same way either way.
* With beta 0 the logged loss is ~0 by construction (the ratio is 1 on-policy): watch the reward.
* ``--loss-type dapo`` is DAPO's *loss* (token-level normalisation over the batch), which is what TRL's
  ``loss_type`` offers and what the zoo's ``dapo`` checkpoint uses. The rest of the DAPO recipe is not in
  it: clip-higher (TRL's ``epsilon_high``) cannot act here, since with one on-policy step per batch the
  importance ratio is 1 and no clip binds; overlong filtering (``mask_truncated_completions``) and soft
  overlong punishment (``trl.rewards.get_soft_overlong_punishment``) exist in TRL but are not switched on;
  dynamic sampling (re-drawing prompts until no group has zero reward spread) has no TRL option. Such
  groups get zero advantage, so they add no gradient; under the "dapo" loss they still count in the
  token normaliser, which shrinks the step (the share is logged as ``zero_std_groups``).
* TRL writes trainer state into its output_dir; that is a temporary folder, deleted afterwards. ``--out``
  gets only the config, generation config, safetensors weights, tokenizer files and ``training.json``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    PrintLogs, add_run_args, hf_trainer_args, library_versions, load_parent, parent_summary, positive,
    save_finetuned, start_run,
)

LOG_KEYS = {"reward": "reward", "reward_std": "reward_std", "frac_reward_zero_std": "zero_std_groups",
            "completions/mean_length": "len", "completions/clipped_ratio": "clipped", "kl": "kl",
            "grad_norm": "grad_norm"}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_run_args(ap, log_every=5)
    ap.add_argument("--loss-type", required=True, choices=["grpo", "dapo"], help="TRL's loss_type")
    ap.add_argument("--steps", type=positive(int), default=200, help="optimizer steps (default 200)")
    ap.add_argument("--lr", type=positive(float), default=1e-5,
                    help="learning rate (default 1e-5; 3e-5 and up made the reward fall in trials)")
    ap.add_argument("--scheduler", default="constant", choices=["constant", "linear", "cosine"],
                    help="learning-rate schedule (default constant)")
    ap.add_argument("--warmup-steps", type=int, default=0, help="linear warm-up steps (default 0)")
    ap.add_argument("--num-generations", type=int, default=8, help="group size: completions per prompt (>= 2)")
    ap.add_argument("--prompts-per-step", type=positive(int), default=8, help="distinct prompts per step")
    ap.add_argument("--beta", type=float, default=0.0, help="KL coefficient to the parent (default 0: none)")
    ap.add_argument("--temperature", type=positive(float), default=1.0, help="sampling temperature (default 1.0)")
    ap.add_argument("--max-completion-length", type=positive(int), default=96, help="max new tokens (default 96)")
    args = ap.parse_args(argv)
    if args.num_generations < 2:
        ap.error(f"--num-generations must be >= 2 (GRPO needs a group), got {args.num_generations}")
    if args.beta < 0:
        ap.error(f"--beta must be >= 0, got {args.beta}")
    if args.warmup_steps < 0:
        ap.error(f"--warmup-steps must be >= 0, got {args.warmup_steps}")
    return args


def make_reward(grader):
    def numeric_correct(prompts, completions, gold, **kwargs) -> list[float]:
        """1.0 when the text before the first newline grades correct against ``gold``, else 0.0."""
        return [float(grader.grade(text.split("\n", 1)[0], g).correct) for text, g in zip(completions, gold)]
    return numeric_correct


def main(argv=None) -> None:
    args = parse_args(argv)
    out, task = start_run(args)

    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from reachlens.grading import get_grader

    data = Dataset.from_dict({"prompt": [task.prompt(q, args.prompt_format) for q in task.questions],
                              "gold": [q.gold for q in task.questions]})
    model, tok = load_parent(args.init)
    newline_id = tok.convert_tokens_to_ids("\n")
    if newline_id in (None, tok.unk_token_id):
        raise SystemExit(f"the tokenizer of {args.init!r} has no single token for '\\n'")
    model.generation_config.eos_token_id = [tok.eos_token_id, newline_id]  # TRL stops and masks at these
    n_params = sum(p.numel() for p in model.parameters())
    printer = PrintLogs(LOG_KEYS)
    with tempfile.TemporaryDirectory(prefix="rl_grpo_") as tmp:
        config = GRPOConfig(
            **hf_trainer_args(output_dir=tmp, steps=args.steps, lr=args.lr, seed=args.seed, log_every=args.log_every,
                              scheduler=args.scheduler, warmup_steps=args.warmup_steps),
            per_device_train_batch_size=args.prompts_per_step * args.num_generations,
            num_generations=args.num_generations, max_completion_length=args.max_completion_length,
            temperature=args.temperature, top_k=0, top_p=1.0, beta=args.beta, loss_type=args.loss_type,
            num_iterations=1, scale_rewards="group", shuffle_dataset=True,
        )
        trainer = GRPOTrainer(model=model, reward_funcs=make_reward(get_grader("numeric")), args=config,
                              train_dataset=data, processing_class=tok, callbacks=[printer])
        trainer.remove_callback(PrinterCallback)  # disable_tqdm adds it; it prints every raw log dict
        print(f"{args.loss_type}: {n_params:,} parameters, {args.steps} steps x {args.prompts_per_step} prompts x "
              f"{args.num_generations} generations, lr {args.lr:g}, beta {args.beta:g}, T {args.temperature:g}, "
              f"{torch.get_num_threads()} thread(s)", flush=True)
        t0 = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - t0
        model = trainer.accelerator.unwrap_model(trainer.model)
    rewards = [row["reward"] for row in printer.history if "reward" in row]
    command = "python experiments/zoo/rl_grpo.py " + " ".join(sys.argv[1:] if argv is None else argv)
    save_finetuned(model, tok, args.init, out, {
        "recipe": args.loss_type, "command": command, "seed": args.seed, "parent": str(args.init),
        "parent_card": parent_summary(args.init), "steps": args.steps, "task": f"arith train split, {args.prompt_format} format",
        "prompt_format": args.prompt_format,
        "reward": "numeric grader on the completion up to the first newline (1 correct, 0 not)",
        "loss_type": args.loss_type, "lr": args.lr, "scheduler": args.scheduler, "warmup_steps": args.warmup_steps,
        "beta": args.beta, "num_generations": args.num_generations, "prompts_per_step": args.prompts_per_step,
        "temperature": args.temperature, "top_k": 0, "top_p": 1.0, "max_completion_length": args.max_completion_length,
        "stop": ["\n", tok.eos_token], "n_train": len(task.questions), "threads": args.threads,
        "wall_seconds": round(wall, 1), "seconds_per_step": round(wall / args.steps, 3), "parameters": n_params,
        "reward_log": printer.history, "reward_first_last": [rewards[0], rewards[-1]] if rewards else None,
        "versions": library_versions(),
    })
    print(f"saved {out} after {wall:.0f}s ({wall / args.steps:.2f}s/step)", flush=True)


if __name__ == "__main__":
    main()
