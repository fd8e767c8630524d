"""``reachlens elicit MODEL --task T --demos 1,2,4,8,16 --control zoo:base --out DIR``: training-based elicitation."""

from __future__ import annotations

import argparse
import math
import os

from reachlens.cli._common import (
    CLIError,
    add_model_args,
    add_protocol_args,
    add_task_args,
    comma_list,
    echo,
    positive_int,
    protocol_from_args,
)
from reachlens.cli._scale_args import add_scale_args, exec_from_args

NAME = "elicit"
HELP = ("training-based reach: fine-tune copies of MODEL and a never-locked control on the same few train "
        "demonstrations, audit all, and report the model's uplift minus the control's")


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    add_model_args(p)
    add_task_args(p)
    add_protocol_args(p)
    p.add_argument("--demos", type=comma_list("--demos", int), default=[1, 2, 4, 8, 16],
                   help="numbers of demonstrations to fine-tune on, comma-separated (default 1,2,4,8,16)")
    p.add_argument("--control", default="zoo:base", help="the never-locked control, fine-tuned alike (default zoo:base)")
    p.add_argument("--train-data", default=None,
                   help="the task's train split as a data file (default: the task's own train split by name)")
    p.add_argument("--method", choices=["sft", "rl"], default="sft",
                   help="sft: supervised fine-tune on N worked demonstrations (default); rl: GRPO (TRL, the zoo's "
                        "recipe) on N train questions, rewarded by the task's trace grader where it has one, else "
                        "its grader")
    p.add_argument("--steps", type=positive_int("--steps"), default=20, help="optimizer steps per fine-tune (default 20)")
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate of each fine-tune (default 1e-4 with sft, 1e-5 with rl)")
    p.add_argument("--rl-generations", type=positive_int("--rl-generations"), default=8,
                   help="rl: samples per question in a group (default 8)")
    p.add_argument("--rl-prompts", type=positive_int("--rl-prompts"), default=4,
                   help="rl: questions per generated batch (default 4)")
    p.add_argument("--held-out", type=int, default=0, metavar="N",
                   help="early stopping: each fine-tune keeps the step (every --eval-every, step 0 included) with the "
                        "best greedy accuracy on N more train questions, per model (default 0: off, every step kept)")
    p.add_argument("--eval-every", type=positive_int("--eval-every"), default=5,
                   help="steps between two held-out measurements (default 5)")
    p.add_argument("--train-seed", type=int, default=0,
                   help="seed of the demonstrations' draw and of the fine-tunes (default 0)")
    p.add_argument("--unseen-by", type=comma_list("--unseen-by", str), default=[],
                   help="other locks, comma-separated, whose training questions no demonstration or held-out question "
                        "may be (the model's and the control's are always excluded)")
    p.add_argument("--placebo", choices=["shuffled", "wrong_values", "weak", "answer_only"], default=None,
                   help="placebo demonstrations on the same drawn questions instead of the gold worked solutions: "
                        "shuffled (solutions shuffled among the questions), wrong_values (right first step, every "
                        "number after it changed), weak (--weak-model's own greedy outputs), answer_only (the gold "
                        "answer without its steps); default none (the gold)")
    p.add_argument("--weak-model", default=None, help="--placebo weak: the weaker model whose greedy outputs are the targets")
    p.add_argument("--out", required=True, help="run directory (re-running resumes it)")
    add_scale_args(p, backend=False)
    return p


def check_train_args(args: argparse.Namespace) -> None:
    """Refuse, before anything loads, what would train on the audited questions or train nothing sensible: a data
    file with no ``--train-data`` (the demonstrations are never drawn from the file the audits read), the same file
    as both, and a learning rate that is not a finite positive number."""
    if args.lr is None:
        args.lr = 1e-5 if args.method == "rl" else 1e-4
    if args.method == "rl" and args.held_out:
        raise CLIError(f"--held-out {args.held_out}: early stopping is for --method sft; RL runs its --steps")
    if args.method == "rl" and args.rl_generations < 2:
        raise CLIError(f"--rl-generations {args.rl_generations}: a GRPO group needs at least 2 samples")
    if (args.placebo == "weak") != (args.weak_model is not None):
        raise CLIError(f"--placebo {args.placebo} with --weak-model {args.weak_model}: --weak-model goes with "
                       "--placebo weak and only with it")
    if args.placebo is not None and args.method == "rl":
        raise CLIError(f"--placebo {args.placebo}: placebos change the demonstrations' targets; use --method sft")
    if not (math.isfinite(args.lr) and args.lr > 0):
        raise CLIError(f"--lr must be a finite number above 0, got {args.lr!r}")
    if args.data is not None and args.train_data is None:
        raise CLIError(f"--data {args.data!r} is what the audits read; name the demonstrations' file with "
                       "--train-data (elicit never trains on the questions it audits)")
    if args.data is not None and os.path.realpath(args.data) == os.path.realpath(args.train_data):
        raise CLIError(f"--train-data {args.train_data!r} is the --data file the audits read; give the task's "
                       "train file")


def run(args: argparse.Namespace) -> int:
    from reachlens.cli._progress import RunProgress, Tally
    from reachlens.engine.memory import check_budget
    from reachlens.store import RunDir
    from reachlens.studies import FineTune, elicit
    from reachlens.studies.rl_finetune import RLConfig
    from reachlens.tasks import load_task

    check_train_args(args)
    task = load_task(args.task, args.data, split=args.split, n=args.n)
    protocol = protocol_from_args(args, task)
    exec_config = exec_from_args(args)
    check_budget(protocol, exec_config.max_batch_rows)
    RunDir(args.out).check_target()  # a file or a folder of other files: refused before anything trains
    pool = None if args.train_data is None else load_task(args.task, args.train_data, split="train")
    finetune = FineTune(steps=args.steps, lr=args.lr, seed=args.train_seed, held_out=args.held_out,
                        eval_every=args.eval_every)
    with RunProgress(f"elicit {args.model}") as bar:  # each step's line above it, the decodes' tokens on it
        result = elicit(args.model, task, protocol, out=args.out, demos=args.demos, control=args.control,
                        finetune=finetune, pool=pool, exec_config=exec_config, progress=Tally(bar.done), log=bar.write,
                        unseen_by=args.unseen_by, placebo=args.placebo, weak_model=args.weak_model,
                        rl=None if args.method == "sft" else RLConfig(
                            steps=args.steps, lr=args.lr, prompts_per_step=args.rl_prompts,
                            num_generations=args.rl_generations, seed=args.train_seed))
    _print_table(result, args, protocol.k)
    return 0


def _print_table(result, args: argparse.Namespace, k: int) -> None:
    """Per n and metric the model's uplift, the control's (labelled: the matched twin or an unmatched reference)
    and their difference, under the run's demonstrations (the gold or a placebo)."""
    from reachlens.studies.placebo import control_role

    role = control_role(args.control)
    shown = "gold demonstrations" if args.placebo is None else f"placebo {args.placebo}"
    echo(f"training-based reach of {args.model} against {args.control} ({role}) on {args.task} "
         f"(n={result.audits['model'].n}, K={k}), {shown}: model minus control uplift, 95% paired interval"
         f"   -> {args.out}")
    for r in result.difference().itertuples():
        echo(f"  n={r.n_demos:<3} {r.metric:<4} model {r.uplift_model:+.3f}  control ({role}) "
             f"{r.uplift_control:+.3f}  difference {r.difference:+.3f} [{r.difference_lo:+.3f}, "
             f"{r.difference_hi:+.3f}]  p={r.p:.3g}")
