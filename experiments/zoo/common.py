"""Shared pieces of the zoo's training scripts: the model config, text batching, saving with a card."""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import TrainerCallback

from reachlens.models.char_tokenizer import build_char_tokenizer
from reachlens.tasks.arith import ARITH_ALPHABET

__all__ = [
    "ZooModelConfig", "arith_tokenizer", "encode_batch", "save_checkpoint", "set_seed",
    "PrintLogs", "check_out_dir", "hf_trainer_args", "library_versions", "load_parent", "parent_summary",
    "save_finetuned", "start_run", "positive", "add_run_args", "next_batch", "save_state", "load_state",
]


@dataclass(frozen=True)
class ZooModelConfig:
    """The zoo's Llama shape (about 1.2M parameters at the defaults)."""

    n_layers: int = 6
    d_model: int = 128
    n_heads: int = 4
    d_mlp: int = 512
    max_positions: int = 256


def set_seed(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def arith_tokenizer():
    return build_char_tokenizer(ARITH_ALPHABET)


def encode_batch(tok, prompts: list[str], completions: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``prompt + completion + EOS`` ids, and labels with -100 on padding and on the prompt.

    The prompt is encoded the way every consumer encodes it (the tokenizer's own special tokens:
    none for the zoo's character tokenizer), and exactly its tokens are masked, so the first
    completion token (the space after ``A:``) is trained.
    """
    seqs, n_prompt = [], []
    for p, c in zip(prompts, completions, strict=True):
        p_ids = tok(p, add_special_tokens=True)["input_ids"]
        full = tok(p + c, add_special_tokens=True)["input_ids"]
        if full[: len(p_ids)] != p_ids:
            raise ValueError(f"prompt {p!r} does not tokenize to a prefix of prompt + completion")
        seqs.append(full + [tok.eos_token_id])
        n_prompt.append(len(p_ids))
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), tok.pad_token_id, dtype=torch.long)
    labels = torch.full((len(seqs), width), -100, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        labels[i, n_prompt[i] : len(s)] = torch.tensor(s[n_prompt[i] :])
    return ids, labels


def save_checkpoint(model, tok, folder: Path, card: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    (folder / "training.json").write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")


def now() -> float:
    return time.perf_counter()


def config_dict(cfg) -> dict:
    return asdict(cfg)


# --- Shared by the fine-tuning scripts (rl_grpo.py, sft.py) -----------------------------------------

def check_out_dir(out: Path) -> Path:
    """``out`` as a Path, refusing a folder that already holds files (a finished run is never overwritten)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SystemExit(f"--out {str(out)!r} already exists and is not an empty folder; remove it or pick another")
    return out


def positive(kind):
    """An argparse type: ``kind(text)``, refused unless > 0."""
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
        return value
    return parse


def add_run_args(ap: argparse.ArgumentParser, *, log_every: int) -> None:
    """The arguments every fine-tuning script takes (what :func:`start_run` reads, the seed, logging)."""
    ap.add_argument("--init", required=True, help="parent checkpoint folder (e.g. reachlens/assets/zoo/base)")
    ap.add_argument("--task", default="arith", choices=["arith", "arith_hard"],
                    help="the generated task whose train split the data come from (default arith)")
    ap.add_argument("--prompt-format", default="qa",
                    help="arith prompt format of the training prompts (qa, verbose): the model's native format")
    ap.add_argument("--out", required=True, help="new, empty folder for the trained checkpoint")
    ap.add_argument("--n-train", type=positive(int), default=None,
                    help="size of the arith train split the data come from (default: the task's default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=positive(int), default=1, help="torch threads (default 1)")
    ap.add_argument("--log-every", type=positive(int), default=log_every,
                    help=f"print metrics every N steps (default {log_every})")


def start_run(args):
    """The start every fine-tuning script shares: torch threads, a fresh output folder, and the train split
    of ``--task`` (``--n-train``) with ``--prompt-format`` checked. Returns (output folder, task)."""
    torch.set_num_threads(args.threads)
    out = check_out_dir(Path(args.out))
    from reachlens.tasks import load_task

    task = load_task(args.task, split="train", **({} if args.n_train is None else {"n_train": args.n_train}))
    task.format(args.prompt_format)  # unknown names fail here, naming the known ones
    return out, task


def load_parent(init: str | Path):
    """``(model, tokenizer)`` of a parent checkpoint folder: float32 safetensors, left padding, a pad token."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(init)
    if not (folder / "config.json").is_file() or not any(folder.glob("*.safetensors")):
        raise SystemExit(f"--init {str(init)!r} is not a checkpoint folder (needs config.json and *.safetensors)")
    tok = AutoTokenizer.from_pretrained(folder)
    tok.padding_side = "left"  # not kept by save_pretrained; TRL's generation needs left padding
    if tok.pad_token is None or tok.eos_token is None:
        raise SystemExit(f"the tokenizer of {str(init)!r} lacks a pad or EOS token "
                         f"(pad={tok.pad_token!r}, eos={tok.eos_token!r})")
    model = AutoModelForCausalLM.from_pretrained(folder, use_safetensors=True, dtype=torch.float32)
    return model, tok


def parent_summary(init: str | Path) -> dict:
    """The parent's card fields worth copying into a child's card (empty if it has no training.json)."""
    card = Path(init) / "training.json"
    if not card.is_file():
        return {}
    parent = json.loads(card.read_text())
    return {k: parent[k] for k in ("recipe", "seed", "steps", "parent") if k in parent}


def library_versions() -> dict:
    """Versions of the libraries a fine-tuning run depends on (for the card)."""
    import transformers
    import trl

    return {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__}


def hf_trainer_args(*, output_dir: str, steps: int, lr: float, seed: int, log_every: int,
                    scheduler: str, warmup_steps: int) -> dict:
    """TrainingArguments shared by the zoo's TRL runs: CPU, fp32, no checkpointing of any kind, no reporting.

    TRL's configs default to ``gradient_checkpointing=True`` and ``bf16=True``; both are switched off here
    (``activation_checkpointing`` is transformers 5's name for the former).
    """
    return dict(
        output_dir=output_dir, max_steps=steps, learning_rate=lr, lr_scheduler_type=scheduler,
        warmup_steps=warmup_steps, seed=seed, data_seed=seed, use_cpu=True, bf16=False, fp16=False,
        activation_checkpointing=False, gradient_checkpointing=False, report_to="none", save_strategy="no",
        eval_strategy="no", logging_steps=log_every, disable_tqdm=True, log_level="warning", dataloader_num_workers=0,
        gradient_accumulation_steps=1, max_grad_norm=1.0,
    )


class PrintLogs(TrainerCallback):
    """Prints one line per logging step: the chosen ``{log key: short name}`` metrics and seconds per step.

    Every line is also kept in ``history`` (for the card's summary).
    """

    def __init__(self, keys: dict[str, str]):
        self.keys = keys
        self.t0 = self.t_last = time.perf_counter()
        self.step_last = 0
        self.history: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "train_runtime" in logs:
            return
        t = time.perf_counter()
        rate = (t - self.t_last) / max(1, state.global_step - self.step_last)
        self.t_last, self.step_last = t, state.global_step
        metrics = {name: logs[key] for key, name in self.keys.items() if key in logs}
        self.history.append({"step": state.global_step, **metrics, "s_per_step": round(rate, 3)})
        parts = "  ".join(f"{name} {value:.4g}" for name, value in metrics.items())
        print(f"step {state.global_step:5d}  {parts}  {rate:.2f}s/step  {t - self.t0:7.1f}s", flush=True)


def save_finetuned(model, tok, init: str | Path, out: Path, card: dict) -> None:
    """Save a fine-tuned model with the parent's generation config (undoing any stop-token change) and a card.

    The folder ends up holding only the config, generation config, safetensors weights, tokenizer files and
    ``training.json``: no optimizer state, no trainer checkpoints.
    """
    from transformers import GenerationConfig

    parent_gen = Path(init) / "generation_config.json"
    model.generation_config = (GenerationConfig.from_pretrained(init) if parent_gen.is_file()
                               else GenerationConfig.from_model_config(model.config))
    model.config.use_cache = True
    model.eval()
    save_checkpoint(model, tok, Path(out), card)


# --- Resumable training loops (sft_gold.py, lock_strong.py, lock_password.py) ----------------------------------

def next_batch(st: dict, train_qs, n: int) -> list:
    """The next ``n`` questions of the seeded shuffled order ``st["order"]`` (a new pass, shuffled by ``st["rng"]``,
    when one runs out), their indices recorded in ``st["seen"]``."""
    batch = []
    while len(batch) < n:
        if not st["order"]:
            st["order"] = list(range(len(train_qs)))
            st["rng"].shuffle(st["order"])
        st["seen"].add(st["order"][-1])
        batch.append(train_qs[st["order"].pop()])
    return batch


def save_state(model, tok, opt, st: dict, args) -> None:
    """The weights and train_state.pt (``st`` with the optimizer's state) into ``args.snapshot`` (not a zoo
    checkpoint: no card); the state file is replaced whole, so a kill while saving leaves the previous one."""
    model.save_pretrained(args.snapshot, safe_serialization=True)
    tok.save_pretrained(args.snapshot)
    tmp = Path(args.snapshot) / "train_state.pt.tmp"
    torch.save({**st, "opt": opt.state_dict()}, tmp)
    tmp.replace(Path(args.snapshot) / "train_state.pt")


def load_state(args) -> dict | None:
    """``--resume``: the state :func:`save_state` left in ``args.snapshot`` (None when there is none yet)."""
    state_file = Path(args.snapshot or ".") / "train_state.pt"
    if not (args.resume and state_file.is_file()):
        return None
    st = torch.load(state_file, weights_only=False)
    print(f"resumed at step {st['step']} from {state_file}", flush=True)
    return st
