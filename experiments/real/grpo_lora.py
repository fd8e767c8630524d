"""GRPO (the zoo's recipe, experiments/zoo/rl_grpo.py, TRL's GRPOTrainer) as a LoRA adapter on a real checkpoint.

    nice -n 10 python experiments/real/grpo_lora.py --base real:smollm2-135m-instruct --task arith_small \\
        --work /work/real-train/arith_small/grpo --out /work/real-train/arith_small/grpo/adapter --steps 100 --seed 0

Started again with the same command, it resumes from the newest checkpoint in ``--work`` (TRL's own: adapter,
optimizer, scheduler, RNG and trainer state, every ``--save-every`` steps, by default every step: a step costs
minutes on a CPU; the adapter every ``--snapshot-every`` steps is kept in ``WORK/snapshots/sSTEP``, the training
trajectory). The finished adapter goes to ``--out``
(``adapter_config.json`` naming the base by its spec, ``adapter_model.safetensors``, ``training.json`` with the
command, seed and the reward curve); ``reachlens audit OUT ...`` loads it on its base.

The recipe is the zoo's ``grpo``: TRL's ``loss_type="grpo"``, one on-policy step per generated batch, clip 0.2,
no KL term (``beta`` 0), group-scaled rewards, temperature 1.0, no top-k. What differs, because this model is an
instruct model deployed in chat: the prompts are the train split's questions in the task's default format as the
user turn of its chat template (TRL renders conversational prompts with the tokenizer's template), completions run
to EOS (``<|im_end|>``) or
``--max-completion-length``, and the reward is the project's numeric grader on the whole reply (the audit's
protocol: chat format, no ``"\\n"`` stop). Only the LoRA matrices train (peft, every linear map of every block).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from lora import (  # noqa: E402
    PrintLogs, add_args, chat_prompt, lora_config, positive, prepare, run_card, save_adapter, snapshot_callback,
    train, trainer_args,
)

LOG_KEYS = {"reward": "reward", "reward_std": "reward_std", "frac_reward_zero_std": "zero_std_groups",
            "completions/mean_length": "len", "completions/clipped_ratio": "clipped", "grad_norm": "grad_norm"}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_args(ap, steps=100, lr=1e-4, save_every=1)
    ap.add_argument("--num-generations", type=int, default=8, help="group size: completions per prompt (>= 2)")
    ap.add_argument("--prompts-per-step", type=positive(int), default=4, help="distinct prompts per batch (default 4)")
    ap.add_argument("--temperature", type=positive(float), default=1.0, help="sampling temperature (default 1.0)")
    ap.add_argument("--max-completion-length", type=positive(int), default=128, help="max new tokens (default 128)")
    args = ap.parse_args(argv)
    if args.num_generations < 2:
        ap.error(f"--num-generations must be >= 2 (GRPO needs a group), got {args.num_generations}")
    return args


def make_reward(grader):
    def numeric_correct(prompts, completions, gold, **kwargs) -> list[float]:
        """1.0 when the reply grades correct against ``gold`` (the numeric grader reads the answer from it)."""
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [float(grader.grade(text, g).correct) for text, g in zip(texts, gold)]
    return numeric_correct


def main(argv=None) -> None:
    args = parse_args(argv)
    if (ready := prepare(args)) is None:
        return
    task, model, tok = ready
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from reachlens.grading import get_grader

    data = Dataset.from_dict({"prompt": [chat_prompt(task, q) for q in task.questions],
                              "gold": [q.gold for q in task.questions]})
    config = GRPOConfig(
        **trainer_args(args, scheduler="constant", warmup_steps=0),
        per_device_train_batch_size=args.prompts_per_step * args.num_generations,
        num_generations=args.num_generations, max_completion_length=args.max_completion_length,
        temperature=args.temperature, top_k=0, top_p=1.0, beta=0.0, loss_type="grpo", num_iterations=1,
        epsilon=0.2, scale_rewards="group", shuffle_dataset=True,
    )
    printer = PrintLogs(LOG_KEYS)
    trainer = GRPOTrainer(model=model, reward_funcs=make_reward(get_grader("numeric")), args=config, train_dataset=data,
                          processing_class=tok, peft_config=lora_config(args),
                          callbacks=[printer, snapshot_callback(args, args.base)])
    wall, trainable = train(trainer, args, f"grpo-lora, {args.steps} steps x {args.prompts_per_step} prompts x "
                            f"{args.num_generations} generations, lr {args.lr:g}, T {args.temperature:g}")
    rewards = [(row["step"], row["reward"]) for row in trainer.state.log_history if "reward" in row]
    save_adapter(trainer.model, Path(args.out), args.base, run_card(args, "grpo", "grpo_lora.py", trainer, wall, {
        "reward": "numeric grader on the whole reply (1 correct, 0 not)", "loss_type": "grpo", "epsilon": 0.2,
        "beta": 0.0, "num_generations": args.num_generations, "prompts_per_step": args.prompts_per_step,
        "temperature": args.temperature, "max_completion_length": args.max_completion_length,
        "trainable_parameters": trainable, "reward_curve": rewards,
    }))
    print(f"saved {args.out} ({wall:.0f}s this session)", flush=True)


if __name__ == "__main__":
    main()
