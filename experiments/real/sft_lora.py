"""SFT on gold worked solutions (the zoo's sft.py, TRL's SFTTrainer) as a LoRA adapter on a real checkpoint.

    nice -n 10 python experiments/real/sft_lora.py --base real:smollm2-135m-instruct --task arith_small \\
        --work /work/real-train/arith_small/sft --out /work/real-train/arith_small/sft/adapter --steps 150 --seed 0

The data are the task's train split as chat conversations: the user turn is the question in the task's default format
(as deployed and audited), the assistant turn its gold worked solution (``94+2=96;96-39=57;57-48=9 #### 9``, the
slip-free solution the zoo's SFT trains on); TRL renders both with the tokenizer's chat template and puts the loss
on the assistant turn only (its closing ``<|im_end|>`` included). Only the LoRA matrices train (peft). Started
again with the same command, it resumes from the newest checkpoint in ``--work``; the adapter at each checkpoint
is kept in ``WORK/snapshots/sSTEP``; the finished adapter goes to ``--out`` with ``training.json`` (command, seed,
loss curve).
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

LOG_KEYS = {"loss": "loss", "mean_token_accuracy": "token_acc", "learning_rate": "lr", "grad_norm": "grad_norm"}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_args(ap, steps=150, lr=2e-4, save_every=10)
    ap.add_argument("--batch", type=positive(int), default=16, help="conversations per step (default 16)")
    ap.add_argument("--warmup-steps", type=int, default=10, help="linear warm-up steps (default 10)")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if (ready := prepare(args)) is None:
        return
    task, model, tok = ready
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    data = Dataset.from_dict({
        "prompt": [chat_prompt(task, q) for q in task.questions],
        "completion": [[{"role": "assistant", "content": q.solution.strip()}] for q in task.questions],
    })
    config = SFTConfig(**trainer_args(args, scheduler="cosine", warmup_steps=args.warmup_steps),
                       per_device_train_batch_size=args.batch, completion_only_loss=True, packing=False,
                       max_length=256, dataset_num_proc=None)
    printer = PrintLogs(LOG_KEYS)
    trainer = SFTTrainer(model=model, args=config, train_dataset=data, processing_class=tok,
                         peft_config=lora_config(args), callbacks=[printer, snapshot_callback(args, args.base)])
    check_first_example(trainer, tok)
    wall, trainable = train(trainer, args, f"sft-lora, {args.steps} steps x {args.batch}, lr {args.lr:g} (cosine), "
                                           f"{len(data):,} conversations")
    save_adapter(trainer.model, Path(args.out), args.base, run_card(args, "sft", "sft_lora.py", trainer, wall, {
        "data": "gold worked solutions as the assistant turn, loss on it only", "batch": args.batch,
        "warmup_steps": args.warmup_steps, "trainable_parameters": trainable,
    }))
    print(f"saved {args.out} ({wall:.0f}s this session)", flush=True)


def check_first_example(trainer, tok) -> None:
    """Fail early unless the loss covers the assistant's reply (the worked solution and its end of turn) alone."""
    row = trainer.train_dataset[0]
    reply = tok.decode([label for label in row["labels"] if label != -100])
    if "####" not in reply or "user" in reply or not reply.rstrip().endswith(tok.eos_token):
        raise SystemExit(f"unexpected SFT labels: the loss covers {reply!r}; want the worked solution and its "
                         f"{tok.eos_token!r} alone")


if __name__ == "__main__":
    main()
