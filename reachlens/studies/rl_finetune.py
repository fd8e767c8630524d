"""Reinforcing a copy of a model on a few train questions with GRPO (training-based elicitation by RL), with TRL.

Where supervised elicitation (:mod:`reachlens.studies.finetune`) shows the model worked demonstrations, RL shows it
only questions and pays it for right answers: a model that withholds a skill it can still sample is pushed back
towards it, and one whose every sample is wrong gets no gradient (a group with no success has zero advantage).
:func:`reinforce_on_questions` runs the zoo's GRPO recipe (``experiments/zoo/rl_grpo.py``, recipe ``grpo``: TRL's
``GRPOTrainer``, ``loss_type="grpo"``, one on-policy step per generated batch, group-normalised advantages, no KL
term, AdamW at a constant learning rate, stop at the first newline as the audit does) on the prompts as the audit
deploys them. The reward is the task's trace grader where it has one (:func:`reachlens.grading.trace.
trace_grader_for_task`: 1 only for a right answer on a valid worked solution, so a lucky answer is not reinforced),
else its answer grader.

The copy is written like a supervised one (safetensors, the parent's generation config and tokenizer, its card
``training.json`` with the questions, the settings, the reward curve and the library versions): staged in a
temporary folder and renamed into place, so a folder that exists is whole, and a run killed mid-training (even by
``kill -9``) leaves only a staging folder that the next run removes and redoes.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reachlens.errors import ReachlensError
from reachlens.models.loading import model_identity, resolve_spec
from reachlens.protocol import Protocol
from reachlens.studies.finetune import CARD, _quiet, _write_checkpoint, read_card
from reachlens.tasks.base import Question, Task
from reachlens.tasks.chat import render_prompts

__all__ = ["RLConfig", "reinforce_on_questions", "reward_function"]

RECIPE = "elicitation_grpo"


@dataclass(frozen=True)
class RLConfig:
    """How a copy is reinforced on its questions (the zoo's GRPO recipe)."""

    steps: int = 20
    """Optimizer steps, one per generated batch."""
    lr: float = 1e-5
    prompts_per_step: int = 4
    num_generations: int = 8
    """Samples per prompt (the group whose rewards are normalised)."""
    temperature: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name, least in (("steps", 1), ("prompts_per_step", 1), ("num_generations", 2), ("seed", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ReachlensError(f"RL {name}={value!r} must be an integer >= {least}")
        for name in ("lr", "temperature"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ReachlensError(f"RL {name}={value!r} must be a number > 0")


def reward_function(task: Task):
    """(reward, its card line): the task's trace grader where it has one, else its answer grader, on the
    completion up to its first newline."""
    from reachlens.grading import get_grader
    from reachlens.grading.trace import get_trace_grader, trace_grader_for_task

    name = trace_grader_for_task(task.name)
    if name is not None:
        trace = get_trace_grader(name)

        def solved(prompts, completions, gold, expr, **kwargs) -> list[float]:
            return [float(trace.grade(t.split("\n", 1)[0], g, expr=e).solved) for t, g, e in zip(completions, gold, expr)]
        return solved, f"{name}: 1 for a right answer on a valid worked solution"
    grader = get_grader(task.grader)

    def correct(prompts, completions, gold, **kwargs) -> list[float]:
        return [float(grader.grade(t.split("\n", 1)[0], g).correct) for t, g in zip(completions, gold)]
    return correct, f"{task.grader}: 1 for a right answer"


def _card(parent: str, task: Task, protocol: Protocol, questions: Sequence[Question], config: RLConfig,
          reward: str) -> dict[str, Any]:
    import transformers
    import trl

    import torch

    return {"recipe": RECIPE, "parent": parent, "parent_fingerprint": model_identity(parent).fingerprint,
            "task": task.name, "protocol_hash": protocol.hash, "prompt_format": protocol.prompt_format,
            "seed": config.seed, "questions": [q.question_id for q in questions], "reward": reward,
            "training": {**asdict(config), "trainer": "trl.GRPOTrainer", "loss_type": "grpo", "beta": 0.0,
                         "max_completion_length": protocol.max_new_tokens, "stop": "first newline"},
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__}}


_SAME = ("recipe", "parent_fingerprint", "task", "protocol_hash", "seed", "questions", "training", "reward")


def _train(folder: Path, prompts: list[str], questions: Sequence[Question], task: Task, config: RLConfig,
           max_new: int, work: Path) -> tuple[Any, Any, list[dict]]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    tok = AutoTokenizer.from_pretrained(folder)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(folder, use_safetensors=True, dtype=torch.float32)
    newline = tok.convert_tokens_to_ids("\n")
    if newline is not None and newline != tok.unk_token_id:
        model.generation_config.eos_token_id = [tok.eos_token_id, newline]
    data = Dataset.from_dict({"prompt": prompts, "gold": [q.gold for q in questions],
                              "expr": [q.fields.get("expr") for q in questions]})
    args = GRPOConfig(
        output_dir=str(work), max_steps=config.steps, learning_rate=config.lr, lr_scheduler_type="constant",
        seed=config.seed, data_seed=config.seed, use_cpu=True, bf16=False, fp16=False, activation_checkpointing=False,
        gradient_checkpointing=False, report_to="none", save_strategy="no", eval_strategy="no", logging_steps=1,
        disable_tqdm=True, log_level="error", dataloader_num_workers=0, max_grad_norm=1.0,
        per_device_train_batch_size=config.prompts_per_step * config.num_generations,
        num_generations=config.num_generations, max_completion_length=max_new, temperature=config.temperature,
        top_k=0, top_p=1.0, beta=0.0, loss_type="grpo", num_iterations=1, scale_rewards="group", shuffle_dataset=True)
    with _quiet():
        trainer = GRPOTrainer(model=model, reward_funcs=reward_function(task)[0], args=args, train_dataset=data,
                              processing_class=tok)
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    curve = [{"step": row["step"], "reward": row["reward"]} for row in trainer.state.log_history if "reward" in row]
    return trainer.accelerator.unwrap_model(trainer.model), tok, curve


def reinforce_on_questions(parent: str, task: Task, protocol: Protocol, questions: Sequence[Question],
                           out: str | Path, config: RLConfig = RLConfig()) -> Path:
    """Reinforce a copy of ``parent`` (a local checkpoint) with GRPO on ``questions`` (train questions, no targets)
    and write it to ``out`` with its card; return ``out``. A folder there with this card is reused.

    Raises:
        ReachlensError: ``parent`` is not a local checkpoint, no questions, or ``out`` holds something else.
    """
    if not questions:
        raise ReachlensError("RL needs at least one question")
    target, local = resolve_spec(parent)
    if not local:
        raise ReachlensError(f"{parent!r} is not a local checkpoint folder; RL copies a folder (zoo:NAME or a path)")
    from transformers import AutoTokenizer

    out = Path(out)
    card = _card(parent, task, protocol, questions, config, reward_function(task)[1])
    if out.exists():
        found = read_card(out)
        if found is not None and all(found.get(k) == json.loads(json.dumps(card[k])) for k in _SAME):
            return out
        raise ReachlensError(f"{str(out)!r} exists and is not this RL copy of {parent!r}; remove it or use another out=")
    prompts = render_prompts(task, protocol, questions, AutoTokenizer.from_pretrained(target))
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".finetune-", dir=out.parent) as tmp:
        model, tok, curve = _train(Path(target), prompts, questions, task, config, protocol.max_new_tokens,
                                   Path(tmp) / "trainer")
        card["reward_curve"] = curve
        staged = Path(tmp) / "model"
        model.config.use_cache = True
        model.eval()
        _write_checkpoint(model, tok, Path(target), staged)  # the parent's generation config: the stop restored
        (staged / CARD).write_text(json.dumps(card, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        (staged / "MODEL_CARD.md").write_text(
            f"# RL copy of {parent} (training-based elicitation)\n\nGRPO (TRL) for {config.steps} steps on "
            f"{len(questions)} train questions of `{task.name}`, reward {card['reward']}, seed {config.seed}. "
            f"Every field is in `{CARD}`.\n", encoding="utf-8")
        os.replace(staged, out)
    return out
