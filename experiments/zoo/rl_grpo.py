"""RLVR from a parent checkpoint with TRL's GRPOTrainer: reward 1 when the project's numeric grader says correct.

    python experiments/zoo/rl_grpo.py --init reachlens/assets/zoo/base --out runs/grpo --recipe grpo --task arith --steps 200 --seed 0
    python experiments/zoo/rl_grpo.py --init reachlens/assets/zoo/base --out runs/dapo --recipe dapo --task arith --steps 400 --seed 0

(the zoo's exact commands are in ``build_zoo.py`` and each checkpoint's ``training.json``; DAPO's two
optimizer steps per generated batch make 400 steps the same sampling budget as GRPO's 200).

Each generation round samples ``--num-generations`` completions for each of ``--prompts-per-step`` prompts of
the task's *train* split (``--task``: ``arith`` or ``arith_hard``; ``--prompt-format``, "qa" by default), grades
each with ``get_grader("numeric").grade(text, q.gold)`` (``--reward trace``: 1 only for a right answer on a valid
worked solution, ``reachlens.grading.trace``'s ``arith_trace``) and takes policy-gradient steps with group-normalised
advantages. Two recipes:

* ``grpo``: TRL's ``loss_type="grpo"`` (per-sequence token mean), one on-policy step per batch
  (``num_iterations=1``), symmetric clip ``epsilon`` (which cannot bind on-policy).
* ``dapo``: the DAPO recipe (Yu et al. 2025) as the smallest extension of ``GRPOTrainer``
  (:class:`DAPOTrainer`): TRL gives the token-level loss (``loss_type="dapo"``), clip-higher
  (``epsilon=0.2``, ``epsilon_high=0.28``) with ``--num-iterations`` (default 2) optimisation steps per
  generated batch, so the importance ratio moves and the asymmetric clip can bind, and overlong filtering
  (``mask_truncated_completions=True``: a completion cut at ``--max-completion-length`` gets no loss). What
  TRL lacks, *dynamic sampling*, is the subclass: groups whose rewards are all equal (zero advantage) are
  dropped and the batch is refilled with fresh prompts from the train split, up to ``--max-refills`` extra
  generation rounds per batch; the share dropped is logged as ``zero_std_groups`` (per round) and the
  rounds used as ``refills``.

``--save-at 20,50,...`` keeps snapshots of the policy at those optimizer steps (a training trajectory):
``OUT-s20`` etc., beside ``--out``, in float16 (``--snapshot-dtype``) with the parent's generation config and
a ``training.json`` naming the run and the step.

Choices forced by TRL 1.16 (see shared/notes/zoo-feasibility.md):

* TRL counts *completions* in ``per_device_train_batch_size``; it is set to prompts-per-step x num-generations.
* TRL's defaults ``gradient_checkpointing=True`` and ``bf16=True`` are switched off (CPU, float32); ``beta``
  defaults to 0 there and here (no reference model unless ``--beta`` > 0); ``top_k=0`` (no top-k) is kept.
* Stopping at "\\n": TRL's transformers generation stops only at EOS ids. It does take every id in
  ``model.generation_config.eos_token_id``, both to stop sampling and to mask the completion, so the "\\n" id is
  added there for training (and the parent's generation config is restored before saving). The reward also
  grades only the text before the first "\\n", so a completion is graded the same way either way.
* With beta 0 and one on-policy step the logged loss is ~0 by construction (the ratio is 1): watch the reward.
* TRL writes trainer state into its output_dir; that is a temporary folder, deleted afterwards. ``--out``
  gets only the config, generation config, safetensors weights, tokenizer files and ``training.json``.
"""

from __future__ import annotations

import argparse
import copy
import random
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
            "refills": "refills", "completions/mean_length": "len", "completions/clipped_ratio": "clipped",
            "clip_ratio/region_mean": "clip", "kl": "kl", "grad_norm": "grad_norm"}
RECIPES = {
    # recipe: (TRL loss_type, epsilon, epsilon_high, overlong filtering, dynamic sampling)
    "grpo": ("grpo", 0.2, None, False, False),
    "dapo": ("dapo", 0.2, 0.28, True, True),
}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_run_args(ap, log_every=5)
    ap.add_argument("--recipe", required=True, choices=sorted(RECIPES), help="grpo, or the DAPO recipe (see above)")
    ap.add_argument("--steps", type=positive(int), default=200, help="optimizer steps (default 200)")
    ap.add_argument("--lr", type=positive(float), default=1e-5, help="learning rate (default 1e-5)")
    ap.add_argument("--scheduler", default="constant", choices=["constant", "linear", "cosine"],
                    help="learning-rate schedule (default constant)")
    ap.add_argument("--warmup-steps", type=int, default=0, help="linear warm-up steps (default 0)")
    ap.add_argument("--num-generations", type=int, default=8, help="group size: completions per prompt (>= 2)")
    ap.add_argument("--prompts-per-step", type=positive(int), default=8, help="distinct prompts per batch")
    ap.add_argument("--num-iterations", type=positive(int), default=None,
                    help="optimizer steps per generated batch (default: 1 for grpo, 2 for dapo)")
    ap.add_argument("--max-refills", type=int, default=3,
                    help="dapo: most extra generation rounds per batch to replace zero-spread groups (default 3)")
    ap.add_argument("--optim", default="adamw_torch", choices=["adamw_torch", "sgd"],
                    help="optimizer (default adamw_torch; sgd: plain SGD, no per-parameter step normalisation)")
    ap.add_argument("--reward", default="answer", choices=["answer", "trace"],
                    help="answer: 1 when the final answer is right (default); trace: 1 when it is right on a valid "
                         "worked solution (the task's trace grader, reachlens.grading.trace), so RL that reinforces "
                         "lucky answers can be told apart from RL that reinforces solutions")
    ap.add_argument("--beta", type=float, default=0.0, help="KL coefficient to the parent (default 0: none)")
    ap.add_argument("--temperature", type=positive(float), default=1.0, help="sampling temperature (default 1.0)")
    ap.add_argument("--max-completion-length", type=positive(int), default=128, help="max new tokens (default 128)")
    ap.add_argument("--save-at", default="", help="comma-separated optimizer steps at which to keep a snapshot "
                    "(folders OUT-sSTEP)")
    ap.add_argument("--snapshot-dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    args = ap.parse_args(argv)
    if args.num_generations < 2:
        ap.error(f"--num-generations must be >= 2 (GRPO needs a group), got {args.num_generations}")
    if args.beta < 0:
        ap.error(f"--beta must be >= 0, got {args.beta}")
    if args.warmup_steps < 0:
        ap.error(f"--warmup-steps must be >= 0, got {args.warmup_steps}")
    if args.max_refills < 0:
        ap.error(f"--max-refills must be >= 0, got {args.max_refills}")
    try:
        args.save_at = sorted({int(x) for x in args.save_at.split(",") if x.strip()})
    except ValueError:
        ap.error(f"--save-at wants comma-separated integers, got {args.save_at!r}")
    if any(not 0 < x < args.steps for x in args.save_at):
        ap.error(f"--save-at steps must lie in 1..{args.steps - 1}, got {args.save_at}")
    if args.num_iterations is None:
        args.num_iterations = 2 if args.recipe == "dapo" else 1
    return args


def make_reward(grader):
    def numeric_correct(prompts, completions, gold, **kwargs) -> list[float]:
        """1.0 when the text before the first newline grades correct against ``gold``, else 0.0."""
        return [float(grader.grade(text.split("\n", 1)[0], g).correct) for text, g in zip(completions, gold)]
    return numeric_correct


def make_trace_reward(grader):
    def trace_solved(prompts, completions, gold, expr, **kwargs) -> list[float]:
        """1.0 when the text before the first newline has a right answer on a valid solution, else 0.0."""
        return [float(grader.grade(text.split("\n", 1)[0], g, expr=e).solved)
                for text, g, e in zip(completions, gold, expr)]
    return trace_solved


def reward_of(args, task):
    """The reward function and its card line for ``--reward``."""
    from reachlens.grading import get_grader
    from reachlens.grading.trace import get_trace_grader, trace_grader_for_task

    if args.reward == "answer":
        return (make_reward(get_grader("numeric")),
                "numeric grader on the completion up to the first newline (1 correct, 0 not)")
    name = trace_grader_for_task(task.name)
    if name is None:
        raise SystemExit(f"--reward trace: task {task.name!r} has no trace grader; use --reward answer")
    return make_trace_reward(get_trace_grader(name)), (
        f"{name} on the completion up to the first newline (1 a right answer on a valid worked solution, 0 not)")


def _merge(parts: list[dict], pad_id: int) -> dict:
    """Concatenate generation batches row-wise: prompts left-padded, completions right-padded to a common width."""
    if len(parts) == 1:
        return parts[0]

    def padded(key, value, left):
        width = max(p[key].shape[1] for p in parts)
        out = []
        for p in parts:
            t = p[key]
            fill = torch.full((t.shape[0], width - t.shape[1]), value, dtype=t.dtype, device=t.device)
            out.append(torch.cat([fill, t] if left else [t, fill], dim=1))
        return torch.cat(out)

    merged = {"prompt_ids": padded("prompt_ids", pad_id, True), "prompt_mask": padded("prompt_mask", 0, True),
              "completion_ids": padded("completion_ids", pad_id, False),
              "completion_mask": padded("completion_mask", 0, False),
              "advantages": torch.cat([p["advantages"] for p in parts])}
    for key in ("old_per_token_logps", "ref_per_token_logps"):
        if parts[0].get(key) is not None:
            merged[key] = padded(key, 0.0, False)
    return merged


def _rows(batch: dict, keep: torch.Tensor) -> dict:
    return {k: (v[keep] if isinstance(v, torch.Tensor) and v.ndim > 0 else v) for k, v in batch.items()}


def dapo_trainer_class():
    from trl import GRPOTrainer

    class DAPOTrainer(GRPOTrainer):
        """GRPOTrainer with DAPO's dynamic sampling: zero-spread groups are dropped and the batch refilled.

        Each generation round goes through ``GRPOTrainer._generate_and_score_completions`` unchanged (so
        rewards, advantages, old log-probabilities and logging are TRL's). Groups whose advantages are all
        zero (every completion got the same reward) carry no gradient; they are dropped, and a full batch of
        fresh prompts from ``refill_rows`` (a seeded endless shuffle of the train split, each row repeated
        ``num_generations`` times as TRL's sampler does) is generated per extra round (over-sampling, as
        DAPO does: a round costs about the same whatever its size) until the batch holds as many
        informative groups as it was asked for (the first ones found are kept), or ``max_refills`` extra
        rounds are spent (then the batch is smaller). The token normaliser ``num_items_in_batch`` is
        recomputed on the kept rows.
        """

        def __init__(self, *a, refill_rows: list[dict], max_refills: int, refill_seed: int, **kw):
            super().__init__(*a, **kw)
            self._refill_rows, self._max_refills = refill_rows, max_refills
            self._refill_rng = random.Random(f"dapo-refill/{refill_seed}")
            self._refill_order: list[int] = []

        def _next_prompts(self, n_groups: int) -> list[dict]:
            out = []
            for _ in range(n_groups):
                if not self._refill_order:
                    self._refill_order = list(range(len(self._refill_rows)))
                    self._refill_rng.shuffle(self._refill_order)
                out += [dict(self._refill_rows[self._refill_order.pop()])] * self.num_generations
            return out

        def _generate_and_score_completions(self, inputs):
            if not self.model.training:
                return super()._generate_and_score_completions(inputs)
            g = self.num_generations
            want = len(inputs) // g
            parts, n_kept, rounds = [], 0, 0
            batch = inputs
            while True:
                out = super()._generate_and_score_completions(batch)
                informative = out["advantages"].view(-1, g).abs().sum(dim=1) > 0
                take = informative.nonzero().flatten()[: want - n_kept]
                if len(take):
                    rows = (take[:, None] * g + torch.arange(g)).flatten()
                    parts.append(_rows(out, rows))
                    n_kept += len(take)
                if n_kept >= want or rounds >= self._max_refills:
                    break
                rounds += 1
                batch = self._next_prompts(want)  # over-sample: a full batch of fresh prompts per round
            self._metrics["train"]["refills"].append(float(rounds))
            if not parts:  # nothing informative in any round: a zero-advantage batch (no gradient), as GRPO would
                return out
            merged = _merge(parts, self.processing_class.pad_token_id)
            merged["num_items_in_batch"] = merged["completion_mask"].sum()
            return merged

    return DAPOTrainer


def snapshot_callback(steps: list[int], out: Path, init: str, tok, dtype: torch.dtype, card: dict, saved: list):
    """A TrainerCallback keeping a compact copy of the policy at each optimizer step in ``steps``."""
    from transformers import TrainerCallback

    class Snapshots(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step not in steps:
                return
            folder = out.parent / f"{out.name}-s{state.global_step}"
            snap = copy.deepcopy(model).to(dtype)
            save_finetuned(snap, tok, init, folder, {**card, "snapshot_step": state.global_step, "trajectory_of": out.name,
                                                    "dtype": str(dtype).removeprefix("torch."),
                                                    "wall_seconds": round(time.perf_counter() - self.t0, 1)})
            saved.append(str(folder))
            print(f"snapshot at step {state.global_step}: {folder}", flush=True)

    return Snapshots()


def main(argv=None) -> None:
    args = parse_args(argv)
    out, task = start_run(args)
    for step in args.save_at:
        from common import check_out_dir

        check_out_dir(out.parent / f"{out.name}-s{step}")

    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    rows = {"prompt": [task.prompt(q, args.prompt_format) for q in task.questions],
            "gold": [q.gold for q in task.questions], "expr": [q.fields.get("expr") for q in task.questions]}
    reward, reward_card = reward_of(args, task)
    data = Dataset.from_dict(rows)
    model, tok = load_parent(args.init)
    newline_id = tok.convert_tokens_to_ids("\n")
    if newline_id in (None, tok.unk_token_id):
        raise SystemExit(f"the tokenizer of {args.init!r} has no single token for '\\n'")
    model.generation_config.eos_token_id = [tok.eos_token_id, newline_id]  # TRL stops and masks at these
    n_params = sum(p.numel() for p in model.parameters())
    loss_type, epsilon, epsilon_high, overlong_filter, dynamic = RECIPES[args.recipe]
    command = "python experiments/zoo/rl_grpo.py " + " ".join(sys.argv[1:] if argv is None else argv)
    card = {
        "recipe": args.recipe, "command": command, "seed": args.seed, "parent": str(args.init),
        "parent_card": parent_summary(args.init), "steps": args.steps, "task": f"{task.name} train split, {args.prompt_format} format",
        "train_task": task.name, "prompt_format": args.prompt_format,
        "reward": reward_card, "reward_kind": args.reward,
        "loss_type": loss_type, "epsilon": epsilon, "epsilon_high": epsilon_high if epsilon_high is not None else epsilon,
        "num_iterations": args.num_iterations, "overlong_filtering": overlong_filter, "dynamic_sampling": dynamic,
        "max_refills": args.max_refills if dynamic else 0,
        "lr": args.lr, "optim": args.optim, "scheduler": args.scheduler, "warmup_steps": args.warmup_steps,
        "beta": args.beta, "num_generations": args.num_generations, "prompts_per_step": args.prompts_per_step,
        "temperature": args.temperature, "top_k": 0, "top_p": 1.0, "max_completion_length": args.max_completion_length,
        "stop": ["\n", tok.eos_token], "n_train": len(task.questions), "threads": args.threads, "parameters": n_params,
        "versions": library_versions(),
    }
    printer = PrintLogs(LOG_KEYS)
    saved: list[str] = []
    callbacks = [printer]
    if args.save_at:
        callbacks.append(snapshot_callback(args.save_at, out, args.init, tok, getattr(torch, args.snapshot_dtype),
                                           card, saved))
    with tempfile.TemporaryDirectory(prefix="rl_grpo_") as tmp:
        config = GRPOConfig(
            **hf_trainer_args(output_dir=tmp, steps=args.steps, lr=args.lr, seed=args.seed, log_every=args.log_every,
                              scheduler=args.scheduler, warmup_steps=args.warmup_steps),
            per_device_train_batch_size=args.prompts_per_step * args.num_generations,
            num_generations=args.num_generations, max_completion_length=args.max_completion_length,
            temperature=args.temperature, top_k=0, top_p=1.0, beta=args.beta, loss_type=loss_type,
            num_iterations=args.num_iterations, epsilon=epsilon, epsilon_high=epsilon_high,
            mask_truncated_completions=overlong_filter, scale_rewards="group", shuffle_dataset=True,
            optim=args.optim,
        )
        kwargs = dict(model=model, reward_funcs=reward, args=config, train_dataset=data,
                      processing_class=tok, callbacks=callbacks)
        if dynamic:
            refill = [{"prompt": p, "gold": g, "expr": e} for p, g, e in zip(rows["prompt"], rows["gold"], rows["expr"])]
            trainer = dapo_trainer_class()(**kwargs, refill_rows=refill, max_refills=args.max_refills,
                                           refill_seed=args.seed)
        else:
            trainer = GRPOTrainer(**kwargs)
        trainer.remove_callback(PrinterCallback)  # disable_tqdm adds it; it prints every raw log dict
        print(f"{args.recipe}: {n_params:,} parameters, {args.steps} steps x {args.prompts_per_step} prompts x "
              f"{args.num_generations} generations ({args.num_iterations} step(s) per batch), lr {args.lr:g}, "
              f"beta {args.beta:g}, T {args.temperature:g}, {torch.get_num_threads()} thread(s)", flush=True)
        t0 = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - t0
        model = trainer.accelerator.unwrap_model(trainer.model)
    rewards = [row["reward"] for row in printer.history if "reward" in row]
    save_finetuned(model, tok, args.init, out, {
        **card, "wall_seconds": round(wall, 1), "seconds_per_step": round(wall / args.steps, 3),
        "snapshots": saved, "reward_log": printer.history,
        "reward_first_last": [rewards[0], rewards[-1]] if rewards else None,
    })
    print(f"saved {out} after {wall:.0f}s ({wall / args.steps:.2f}s/step)", flush=True)


if __name__ == "__main__":
    main()
