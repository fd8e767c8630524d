"""Shared pieces of the real checkpoints' LoRA training scripts (grpo_lora.py, sft_lora.py).

The base is a reachlens spec (``real:smollm2-135m-instruct``): its cached HuggingFace folder is what TRL trains
on, through peft's LoRA; prompts are the task's default format (``arith_small``'s
``what`` question) as the user turn of the model's chat template (chat
format, as the model is deployed and audited). A run works in ``--work`` (a durable folder outside the repository):
TRL's checkpoints (adapter, optimizer, scheduler, RNG, trainer state) every ``--save-every`` steps, so a killed run
started again with the same command resumes from its last checkpoint; the finished adapter is written to ``--out``
with ``base_model_name_or_path`` set to the base's spec, so ``load_model(out)`` finds its base by name.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "experiments" / "zoo"))
from common import PrintLogs, hf_trainer_args, library_versions, positive  # noqa: E402

__all__ = ["TASKS", "PrintLogs", "add_args", "base_model", "chat_prompt", "finished", "last_checkpoint", "lora_config",
           "positive", "prepare", "run_card", "save_adapter", "snapshot_callback", "train", "train_task",
           "trainer_args"]

TASKS = ("arith_small", "arith", "arith_hard")
"""The generated tasks a run may train on (its train split, disjoint from the test split the audits read);
``arith_small`` is the one the pilot chose for SmolLM2-135M-Instruct (notes/real-checkpoints.md)."""


def add_args(ap: argparse.ArgumentParser, *, steps: int, lr: float, save_every: int) -> None:
    ap.add_argument("--base", default="real:smollm2-135m-instruct", help="the base's reachlens spec")
    ap.add_argument("--task", default="arith_small", choices=TASKS,
                    help="the task whose train split the prompts come from (default arith_small)")
    ap.add_argument("--n-train", type=positive(int), default=None,
                    help="the first N questions of the train split (default: the task's whole train split)")
    ap.add_argument("--work", required=True, help="durable folder for TRL's checkpoints (resumed when present)")
    ap.add_argument("--out", required=True, help="folder for the finished adapter and its training.json")
    ap.add_argument("--steps", type=positive(int), default=steps, help=f"optimizer steps (default {steps})")
    ap.add_argument("--lr", type=positive(float), default=lr, help=f"learning rate (default {lr:g})")
    ap.add_argument("--rank", type=positive(int), default=8, help="LoRA rank (default 8)")
    ap.add_argument("--alpha", type=positive(int), default=16, help="LoRA alpha (default 16)")
    ap.add_argument("--save-every", type=positive(int), default=save_every,
                    help=f"checkpoint every N steps (default {save_every}): a stopped run loses at most N-1 steps")
    ap.add_argument("--snapshot-every", type=positive(int), default=10,
                    help="keep the adapter every N steps in WORK/snapshots (the training trajectory; default 10)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=positive(int), default=2, help="torch threads (default 2)")
    ap.add_argument("--log-every", type=positive(int), default=1, help="print metrics every N steps (default 1)")


def train_task(name: str, n: int | None = None):
    """The train split of a generated task (disjoint from its test split, which the audits read), its first ``n``
    questions where given."""
    from reachlens.tasks import load_task

    return load_task(name, split="train", n=n)


def chat_prompt(task, question) -> list[dict[str, str]]:
    """The conversational prompt TRL renders with the model's chat template (generation prompt added): the task's
    default format as the user turn, as ``prompt_format="chat"`` deploys it."""
    return [{"role": "user", "content": task.prompt(question)}]


def base_model(spec: str):
    """``(folder, model, tokenizer)``: the base's cached folder, float32, left padding."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reachlens.models import resolve_spec

    folder, _ = resolve_spec(spec)
    tok = AutoTokenizer.from_pretrained(folder)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(folder, use_safetensors=True, dtype=torch.float32)
    return folder, model, tok


def lora_config(args):
    from peft import LoraConfig

    return LoraConfig(r=args.rank, lora_alpha=args.alpha, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])


def trainer_args(args, *, scheduler: str, warmup_steps: int) -> dict:
    """The zoo's TrainingArguments (CPU, float32, no reporting) with checkpoints every ``--save-every`` steps."""
    d = hf_trainer_args(output_dir=str(Path(args.work) / "trainer"), steps=args.steps, lr=args.lr, seed=args.seed,
                        log_every=args.log_every, scheduler=scheduler, warmup_steps=warmup_steps)
    return {**d, "save_strategy": "steps", "save_steps": args.save_every, "save_total_limit": 2,
            "save_only_model": False}


def last_checkpoint(args) -> str | None:
    """The newest TRL checkpoint in ``--work`` (a resumed run starts there), or None."""
    from transformers.trainer_utils import get_last_checkpoint

    folder = Path(args.work) / "trainer"
    return get_last_checkpoint(str(folder)) if folder.is_dir() else None


def finished(args) -> bool:
    """Whether ``--out`` already holds this run's adapter at ``--steps`` (a chain of runs started again skips it)."""
    card = Path(args.out) / "training.json"
    if card.is_file() and json.loads(card.read_text()).get("steps") == args.steps:
        print(f"{args.out} already holds the adapter after {args.steps} steps; nothing to do", flush=True)
        return True
    return False


def prepare(args):
    """``(task, model, tokenizer)`` of a run: torch's threads set, the train split, the base loaded; None when
    ``--out`` already holds the finished adapter (:func:`finished`)."""
    if finished(args):
        return None
    torch.set_num_threads(args.threads)
    task = train_task(args.task, args.n_train)
    _, model, tok = base_model(args.base)
    return task, model, tok


def train(trainer, args, what: str) -> tuple[float, int]:
    """Run ``trainer`` from the newest checkpoint in ``--work`` (or the start), printing ``what`` first; returns
    (seconds this session, trainable parameters)."""
    from transformers import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # disable_tqdm adds it; it prints every raw log dict
    resume = last_checkpoint(args)
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    print(f"{what} on {args.base}: {trainable:,} trainable parameters, {torch.get_num_threads()} thread(s); "
          + (f"resuming from {resume}" if resume else "from the start"), flush=True)
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume)
    return time.perf_counter() - t0, trainable


def snapshot_callback(args, base_spec: str):
    """Keeps the adapter every ``--snapshot-every`` steps (and the last) as ``WORK/snapshots/sSTEP``: the training
    trajectory (a checkpoint step that is a multiple of it; ``--save-every`` should divide it)."""
    from transformers import TrainerCallback

    class Snapshots(TrainerCallback):
        def on_save(self, targs, state, control, model=None, **kwargs):
            if state.global_step % args.snapshot_every and state.global_step != args.steps:
                return
            save_adapter(model, Path(args.work) / "snapshots" / f"s{state.global_step}", base_spec,
                         {"snapshot_step": state.global_step})

    return Snapshots()


def save_adapter(model, out: Path, base_spec: str, card: dict) -> None:
    """The adapter (safetensors) with its base named by spec, and ``training.json``."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    cfg_path = out / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = base_spec
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    (out / "training.json").write_text(json.dumps(card, indent=2, sort_keys=True, default=str) + "\n")


def run_card(args, recipe: str, script: str, trainer, wall: float, extra: dict) -> dict:
    """What ``training.json`` records: the command, seed, recipe, the trainer's log (restored across resumes)."""
    return {
        "recipe": recipe, "command": f"python experiments/real/{script} " + " ".join(sys.argv[1:]), "seed": args.seed,
        "parent": args.base, "train_task": f"{args.task} train split, chat format", "prompt_format": "chat",
        "task": args.task, "n_train": args.n_train, "steps": args.steps, "lr": args.lr, "lora_rank": args.rank,
        "lora_alpha": args.alpha, "threads": args.threads, "wall_seconds_this_session": round(wall, 1),
        "log": [row for row in trainer.state.log_history if "train_runtime" not in row],
        "versions": library_versions(), "finished": time.strftime("%Y-%m-%dT%H:%M:%S"), **extra,
    }
