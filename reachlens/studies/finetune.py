"""Fine-tuning a copy of a model on a few demonstrations (training-based elicitation), with TRL's ``SFTTrainer``.

Greenblatt et al. (arXiv 2405.19550) unlock a password-locked model with a handful of correct demonstrations;
:func:`finetune_on_demonstrations` is that step: a full fine-tune of a copy of ``parent`` on ``n`` worked
demonstrations of the task, each the prompt exactly as the audit deploys it (the protocol's prompt format, a
chat template included) and the demonstration's target (:func:`~reachlens.tasks.fewshot.demonstration_target`)
then the tokenizer's EOS, the loss on the completion only. TRL is given token ids, not strings
(:func:`demonstration_ids`): the prompt's ids are the audit's own (its text as data, one BOS, a chat template's
control tokens only where the template wrote them), so a question holding special-token text trains on the
sequence the audit deploys, and a template that writes the BOS gets no second one. Every step sees every
demonstration (a full batch) unless ``batch`` is smaller; AdamW at a constant learning rate after
``warmup_steps``; float32; no gradient checkpointing; the seed fixes TRL's data order and any dropout.

Why TRL's ``SFTTrainer`` (installed; the zoo's own SFT checkpoint is made with it, ``experiments/zoo/sft.py``):
a maintained trainer whose pre-tokenized datasets (``input_ids`` and ``completion_mask``) mask the prompt's tokens,
tested on the zoo's character tokenizer. A tokenizer without a PAD token pads the batch with its EOS (masked out),
as TRL does. Full fine-tuning, because at the zoo's size (1.6M parameters) a copy costs nothing; LoRA through
``peft`` (not installed here) would be the way for a real checkpoint.

The copy is written as a checkpoint folder like any other model (safetensors weights, config, the parent's
generation config and tokenizer files) with its card, ``training.json`` (the parent's spec and fingerprint, the
demonstrations' question ids and texts, the training settings and seed, the library versions) and a short
``MODEL_CARD.md``. It is written to a temporary folder and renamed into place, so a folder that exists is whole;
:func:`finetune_on_demonstrations` reuses one whose card says it was made the same way (a resumed run) and
refuses one made otherwise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reachlens.engine.tokens import encode_prompts, text_ids
from reachlens.errors import ReachlensError
from reachlens.models.loading import model_identity, resolve_spec
from reachlens.protocol import Protocol, chat_inner
from reachlens.tasks.base import Question, Task
from reachlens.tasks.chat import render_prompts
from reachlens.tasks.fewshot import demonstration_target

__all__ = ["CARD", "FineTune", "demonstration_ids", "demonstration_pairs", "finetune_on_demonstrations", "read_card"]

CARD = "training.json"
"""The card of a fine-tuned copy (the zoo's name for it)."""
RECIPE = "elicitation_sft_ids"


@dataclass(frozen=True)
class FineTune:
    """How a copy is fine-tuned on its demonstrations."""

    steps: int = 20
    """Optimizer steps."""
    lr: float = 1e-4
    """Learning rate (constant after warm-up)."""
    seed: int = 0
    """TRL's seed (data order, dropout) and the seed of the demonstrations' draw."""
    batch: int | None = None
    """Demonstrations per step (None: all of them, a full batch)."""
    warmup_steps: int = 0
    weight_decay: float = 0.0
    held_out: int = 0
    """Early stopping (0: off, ``steps`` are all taken): the number of train questions, neither demonstrations nor
    test questions, on which the copy's greedy accuracy is measured every ``eval_every`` steps (step 0, the
    parent, included); the copy kept is the step with the highest accuracy there (ties: the fewest steps). Each
    model stops on its own curve, so a fine-tune that would only overfit a never-locked control leaves it as it was."""
    eval_every: int = 5
    """Steps between two held-out measurements (with ``held_out``)."""

    def __post_init__(self) -> None:
        for name in ("steps", "seed", "warmup_steps", "held_out", "eval_every"):
            value, least = getattr(self, name), 1 if name in ("steps", "eval_every") else 0
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ReachlensError(f"fine-tuning {name}={value!r} must be an integer >= {least}")
        if self.batch is not None and (isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1):
            raise ReachlensError(f"fine-tuning batch={self.batch!r} must be an integer >= 1 (or None: all)")
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not self.lr > 0:
            raise ReachlensError(f"fine-tuning lr={self.lr!r} must be a number > 0")
        if isinstance(self.weight_decay, bool) or not isinstance(self.weight_decay, (int, float)) or not (
                self.weight_decay >= 0):
            raise ReachlensError(f"fine-tuning weight_decay={self.weight_decay!r} must be a number >= 0")


def demonstration_pairs(task: Task, protocol: Protocol, demos: Sequence[Question], tokenizer) -> list[tuple[str, str]]:
    """(prompt as deployed, completion) of each demonstration: the protocol's rendering of its question and its
    target then the tokenizer's EOS (under a chat format the target without its leading space, as the
    assistant turn)."""
    prompts = render_prompts(task, protocol, demos, tokenizer)
    chat = chat_inner(protocol.prompt_format) is not None
    return [(p, (demonstration_target(d).lstrip() if chat else demonstration_target(d)) + tokenizer.eos_token)
            for p, d in zip(prompts, demos)]


def demonstration_ids(pairs: Sequence[tuple[str, str]], tokenizer) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids) of each demonstration: the prompt as the audit encodes it (its text as data,
    one BOS: :func:`~reachlens.engine.tokens.encode_prompts`) and the target as text then the EOS id. These ids, not
    the strings, go to TRL, so a question's special-token text trains as the text the audit deploys."""
    eos = tokenizer.eos_token
    out = []
    for prompt, completion in pairs:
        target = completion[: -len(eos)] if eos and completion.endswith(eos) else completion
        out.append((encode_prompts(tokenizer, [prompt])[0], [*text_ids(tokenizer, target), tokenizer.eos_token_id]))
    return out


def read_card(folder: str | Path) -> dict[str, Any] | None:
    """The card of a fine-tuned copy, or None where the folder has none."""
    path = Path(folder) / CARD
    if not path.is_file():
        return None
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ReachlensError(f"{str(path)!r} is not a readable card ({err}); delete the folder to fine-tune it again")
    return card if isinstance(card, dict) else None


def _card(parent: str, fingerprint: str, task: Task, protocol: Protocol, demos: Sequence[Question],
          pairs: list[tuple[str, str]], config: FineTune) -> dict[str, Any]:
    import transformers
    import trl

    import torch

    return {
        "recipe": RECIPE, "parent": parent, "parent_fingerprint": fingerprint, "task": task.name,
        "protocol_hash": protocol.hash, "prompt_format": protocol.prompt_format, "seed": config.seed,
        "demonstrations": [{"question_id": d.question_id, "prompt": p, "completion": c}
                           for d, (p, c) in zip(demos, pairs)],
        "training": {**asdict(config), "trainer": "trl.SFTTrainer", "full_finetune": True,
                     "loss": "completion tokens only (the target and EOS)"},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__},
    }


_SAME = ("recipe", "parent_fingerprint", "task", "protocol_hash", "seed", "demonstrations", "training", "held_out")


def _train(folder: Path, pairs: list[tuple[str, str]], config: FineTune, work: Path,
           score: Callable[[Any, Any], float] | None = None) -> tuple[Any, Any, dict[str, Any] | None]:
    """The parent at ``folder`` fine-tuned on ``pairs`` (prompt, completion) with TRL's SFTTrainer; with ``score``
    (held-out accuracy of a model and its tokenizer), the step with the best score (:attr:`FineTune.held_out`) and
    the card's ``early_stopping`` entry (``curve`` ``[[step, score], ...]`` and ``chosen_step``), else None."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import SFTConfig, SFTTrainer

    tok = AutoTokenizer.from_pretrained(folder)
    if tok.eos_token is None:
        raise ReachlensError(f"the tokenizer of {str(folder)!r} lacks an EOS token; it cannot be fine-tuned here")
    if tok.pad_token is None:  # pads only the batch (masked out of the loss), as TRL does for such a tokenizer
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(folder, use_safetensors=True, dtype=torch.float32)
    ids = demonstration_ids(pairs, tok)
    data = Dataset.from_dict({"input_ids": [p + c for p, c in ids],
                              "completion_mask": [[0] * len(p) + [1] * len(c) for p, c in ids]})
    args = SFTConfig(
        output_dir=str(work), max_steps=config.steps, learning_rate=config.lr, lr_scheduler_type="constant_with_warmup",
        warmup_steps=config.warmup_steps, weight_decay=config.weight_decay, seed=config.seed, data_seed=config.seed,
        per_device_train_batch_size=config.batch or len(pairs), use_cpu=True, bf16=False, fp16=False,
        activation_checkpointing=False, gradient_checkpointing=False, report_to="none", save_strategy="no",
        eval_strategy="no", logging_steps=max(config.steps, 1), disable_tqdm=True, log_level="error",
        dataloader_num_workers=0, max_grad_norm=1.0, completion_only_loss=True, packing=False,
        max_length=None, dataset_num_proc=None)
    with _quiet():
        trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tok)
        trainer.remove_callback(PrinterCallback)  # disable_tqdm adds it: it prints every raw log dict
        _check_masking(trainer, tok, *ids[0])
        stop = None if score is None else _early_stop(lambda m: score(m, tok), config.eval_every)
        if stop is not None:
            stop.measure(0, model)
            trainer.add_callback(stop)
        trainer.train()
    model = trainer.accelerator.unwrap_model(trainer.model)
    if stop is None:
        return model, tok, None
    model.load_state_dict(stop.best_state)
    return model, tok, {"curve": stop.curve, "chosen_step": stop.best_step}


def _early_stop(score: Callable[[Any], float], every: int):
    """A TRL/transformers callback that measures the model every ``every`` steps and keeps a copy of its best
    weights (ties: the earliest); ``measure(0, model)`` measures the parent before training."""
    from transformers import TrainerCallback

    class EarlyStop(TrainerCallback):
        def __init__(self) -> None:
            self.curve: list[list[int | float]] = []
            self.best_state: dict | None = None
            self.best_step = 0

        def measure(self, step: int, model) -> None:
            was = model.training
            model.eval()
            value = float(score(model))
            model.train(was)
            if not self.curve or value > max(v for _, v in self.curve):
                self.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                self.best_step = step
            self.curve.append([step, value])

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step % every == 0 or state.global_step == state.max_steps:
                self.measure(state.global_step, model)

    return EarlyStop()


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """No progress bars from ``datasets`` while TRL prepares the data (restored after)."""
    import datasets

    was = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was:
            datasets.enable_progress_bars()


def _check_masking(trainer, tok, prompt: list[int], completion: list[int]) -> None:
    """Fail unless TRL trains on the first demonstration's ids as given (the audit's prompt ids, then the
    completion's) with the loss on exactly the completion's."""
    row = trainer.train_dataset[0]
    trained = [label for label in row["labels"] if label != -100]
    if list(row["input_ids"]) != prompt + completion or trained != completion:
        raise RuntimeError(f"TRL's data trains {tok.decode(trained)!r} of {tok.decode(row['input_ids'])!r}, not the "
                           f"completion {tok.decode(completion)!r} after the audit's prompt ids")


def finetune_on_demonstrations(
    parent: str, task: Task, protocol: Protocol, demos: Sequence[Question], out: str | Path,
    config: FineTune = FineTune(), held_out: Task | None = None,
) -> Path:
    """Fine-tune a copy of ``parent`` (a spec of a local checkpoint: ``zoo:NAME`` or a folder) on ``demos`` and
    write it to the folder ``out`` with its card; return ``out``. A folder there with this card is reused.

    With ``config.held_out`` (early stopping), ``held_out`` holds those train questions (none a demonstration):
    every ``config.eval_every`` steps the copy is audited on them greedily under ``protocol`` (k = 1, this
    process) and the best step is kept; the card records the curve and the step chosen.

    Raises:
        ReachlensError: ``parent`` is not a local checkpoint, no demonstrations, ``out`` holds something else, or
            the held-out questions are missing, of another size, or include a demonstration.

    >>> finetune_on_demonstrations("zoo:locked", task, protocol, demos[:4], "runs/eli/checkpoints/model-n4")  # doctest: +SKIP
    """
    if not demos:
        raise ReachlensError("fine-tuning needs at least one demonstration")
    target, local = resolve_spec(parent)
    if not local:
        raise ReachlensError(f"{parent!r} is not a local checkpoint folder; fine-tuning copies a folder (zoo:NAME or "
                             "a path)")
    out = Path(out)
    from transformers import AutoTokenizer

    pairs = demonstration_pairs(task, protocol, demos, AutoTokenizer.from_pretrained(target))
    card = _card(parent, model_identity(parent).fingerprint, task, protocol, demos, pairs, config)
    card["held_out"] = _check_held_out(config, held_out, demos)
    if out.exists():
        found = read_card(out)
        if found is not None and all(found.get(k) == json.loads(json.dumps(card[k])) for k in _SAME):
            return out
        raise ReachlensError(f"{str(out)!r} exists and is not this fine-tune of {parent!r} (another parent, "
                             "demonstrations or settings); remove it or use another out=")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".finetune-", dir=out.parent) as tmp:
        score = None if not config.held_out else functools.partial(
            _held_out_accuracy, held=held_out, protocol=protocol, parent=Path(target), work=Path(tmp) / "held-out")
        model, tok, early = _train(Path(target), pairs, config, Path(tmp) / "trainer", score)
        if early is not None:
            card["early_stopping"] = early
        staged = Path(tmp) / "model"
        model.config.use_cache = True
        model.eval()
        _write_checkpoint(model, tok, Path(target), staged)
        (staged / CARD).write_text(json.dumps(card, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        (staged / "MODEL_CARD.md").write_text(_model_card(card), encoding="utf-8")
        os.replace(staged, out)
    return out


def _write_checkpoint(model, tok, parent: Path, folder: Path) -> None:
    """``model`` and ``tok`` as a checkpoint folder (safetensors), with the parent's generation config (not one the
    trainer changed)."""
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    if (parent / "generation_config.json").is_file():
        shutil.copyfile(parent / "generation_config.json", folder / "generation_config.json")


def _check_held_out(config: FineTune, held: Task | None, demos: Sequence[Question]) -> list[str]:
    """The held-out question ids of an early-stopped fine-tune ([] without early stopping)."""
    if not config.held_out:
        return []
    if held is None or len(held.questions) != config.held_out:
        size = "none" if held is None else len(held.questions)
        raise ReachlensError(f"early stopping on held_out={config.held_out} train questions needs that many "
                             f"held-out questions (got {size}); pass held_out= a task of {config.held_out} questions")
    shown = {d.question_id for d in demos}
    if any(q.question_id in shown for q in held.questions):
        raise ReachlensError("a held-out question is also a demonstration; hold out other train questions")
    return [q.question_id for q in held.questions]


def _held_out_accuracy(model, tok, *, held: Task, protocol: Protocol, parent: Path, work: Path) -> float:
    """Greedy accuracy (D) on ``held`` of the model being trained: written to ``work`` (as the copy would be) and
    audited there with k = 1 in this process."""
    from reachlens.execution import ExecConfig
    from reachlens.studies.audit_job import audit

    if work.exists():
        shutil.rmtree(work)
    _write_checkpoint(model, tok, parent, work)
    return float(audit(str(work), held, dataclasses.replace(protocol, k=1), exec_config=ExecConfig()).D)


def _model_card(card: dict[str, Any]) -> str:
    t = card["training"]
    ids = ", ".join(d["question_id"] for d in card["demonstrations"])
    return (f"# Fine-tuned copy of {card['parent']} (training-based elicitation)\n\n"
            f"Parent: `{card['parent']}` ({card['parent_fingerprint']}). Task `{card['task']}`, prompt format "
            f"`{card['prompt_format']}`. Full fine-tune with TRL's SFTTrainer: {t['steps']} steps, lr {t['lr']:g}, "
            f"seed {card['seed']}, loss on the completion only, on {len(card['demonstrations'])} correct "
            f"demonstrations from the train split: {ids}.\n\nEvery field is in `{CARD}`.\n")
