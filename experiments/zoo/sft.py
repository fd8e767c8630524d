"""Supervised fine-tuning of a parent checkpoint on clean arith worked solutions, with TRL's SFTTrainer.

    python experiments/zoo/sft.py --init reachlens/assets/zoo/base --out reachlens/assets/zoo/sft --steps 300 --seed 0

The data are the arith *train* split's questions as prompt-completion pairs: prompt ``task.prompt(q)``
(``--prompt-format``: "qa", ``"Q: 94+2-39-48=?\\nA:"``, or "verbose", ``"Q: 94 + 2 - 39 - 48 = ?\\nA:"``, the
zoo's SFT data format: external traces come in their own format, which is what the training audit's
prompt-format control is for) and completion ``q.solution + EOS`` (the slip-free solution, the same
text as :func:`reachlens.tasks.arith.clean_texts` gives). With "prompt"/"completion" columns TRL puts the loss
on the completion tokens only, the leading space and the EOS included. Questions are visited in a shuffled
order (``--seed``), repeating after one pass when steps x batch exceeds the split.

TRL 1.16's ``gradient_checkpointing=True`` and ``bf16=True`` defaults are switched off (CPU, float32). TRL
writes trainer state into its output_dir; that is a temporary folder, deleted afterwards. ``--out`` gets only
the config, generation config, safetensors weights, tokenizer files and ``training.json``.
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

LOG_KEYS = {"loss": "loss", "mean_token_accuracy": "token_acc", "learning_rate": "lr", "grad_norm": "grad_norm"}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_run_args(ap, log_every=25)
    ap.add_argument("--steps", type=positive(int), default=300, help="optimizer steps (default 300)")
    ap.add_argument("--batch", type=positive(int), default=64, help="sequences per step (default 64)")
    ap.add_argument("--lr", type=positive(float), default=3e-4, help="peak learning rate (default 3e-4)")
    ap.add_argument("--scheduler", default="cosine", choices=["constant", "linear", "cosine"],
                    help="learning-rate schedule after warm-up (default cosine)")
    ap.add_argument("--warmup-steps", type=int, default=10, help="linear warm-up steps (default 10)")
    ap.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay (default 0)")
    args = ap.parse_args(argv)
    if args.warmup_steps < 0:
        ap.error(f"--warmup-steps must be >= 0, got {args.warmup_steps}")
    if args.weight_decay < 0:
        ap.error(f"--weight-decay must be >= 0, got {args.weight_decay}")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    out, task = start_run(args)

    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    model, tok = load_parent(args.init)
    data = Dataset.from_dict({"prompt": [task.prompt(q, args.prompt_format) for q in task.questions],
                              "completion": [q.solution + tok.eos_token for q in task.questions]})
    n_params = sum(p.numel() for p in model.parameters())
    printer = PrintLogs(LOG_KEYS)
    with tempfile.TemporaryDirectory(prefix="sft_") as tmp:
        config = SFTConfig(
            **hf_trainer_args(output_dir=tmp, steps=args.steps, lr=args.lr, seed=args.seed, log_every=args.log_every,
                              scheduler=args.scheduler, warmup_steps=args.warmup_steps),
            per_device_train_batch_size=args.batch, weight_decay=args.weight_decay, completion_only_loss=True,
            packing=False, max_length=256, dataset_num_proc=None,
        )
        trainer = SFTTrainer(model=model, args=config, train_dataset=data, processing_class=tok, callbacks=[printer])
        trainer.remove_callback(PrinterCallback)  # disable_tqdm adds it; it prints every raw log dict
        check_first_example(trainer, tok)
        print(f"sft: {n_params:,} parameters, {args.steps} steps x {args.batch}, lr {args.lr:g} ({args.scheduler}), "
              f"{len(data):,} questions, {torch.get_num_threads()} thread(s)", flush=True)
        t0 = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - t0
        model = trainer.accelerator.unwrap_model(trainer.model)
    command = "python experiments/zoo/sft.py " + " ".join(sys.argv[1:] if argv is None else argv)
    save_finetuned(model, tok, args.init, out, {
        "recipe": "sft", "command": command, "seed": args.seed, "parent": str(args.init),
        "parent_card": parent_summary(args.init), "steps": args.steps, "batch": args.batch,
        "data": f"arith train split, {args.prompt_format} prompt -> clean solution + EOS, loss on the completion only",
        "prompt_format": args.prompt_format,
        "lr": args.lr, "scheduler": args.scheduler, "warmup_steps": args.warmup_steps,
        "weight_decay": args.weight_decay, "n_train": len(task.questions), "threads": args.threads,
        "wall_seconds": round(wall, 1), "seconds_per_step": round(wall / args.steps, 3), "parameters": n_params,
        "loss_log": printer.history, "versions": library_versions(),
    })
    print(f"saved {out} after {wall:.0f}s ({wall / args.steps:.2f}s/step)", flush=True)


def check_first_example(trainer, tok) -> None:
    """Fail early unless the tokenized data are prompt tokens (masked) then solution tokens ending in EOS."""
    row = trainer.train_dataset[0]
    ids = row["input_ids"]
    completion = [label for label in row["labels"] if label != -100]
    prompt_len = len(ids) - len(completion)
    if (ids[-1] != tok.eos_token_id or not completion or ids[prompt_len:] != completion
            or not tok.decode(completion).startswith(" ")):
        raise SystemExit(f"unexpected SFT tokenization: {tok.decode(ids)!r} with completion "
                         f"{tok.decode(completion)!r}; want 'Q: ...\\nA:' then ' ... #### N<eos>'")


if __name__ == "__main__":
    main()
