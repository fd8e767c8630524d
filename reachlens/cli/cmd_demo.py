"""``reachlens demo --out DIR``: the main job. The training audit of the shipped zoo, with report.

Audits base, GRPO, DAPO, SFT and SFT-then-GRPO on the arith_hard test split (``--task arith`` for the
pretraining mix) with the paper's protocol shape (n=300, T=0.8, K=200, budget control at 400), with the prompt-format control for the models
trained in their own format (SFT and SFT-then-GRPO), the temperature control (each pair's questions
that left the reachable set re-probed at T = 0.6, 1.0, 1.2) and the length control (a pair whose
shares of outputs cut at max_new_tokens differ by more than 2 points is audited again at twice the
length), audits the GRPO run's snapshots (``grpo-s25`` ...: the trajectory, base at step 0 and ``grpo`` at its
last step, read as realization and reachability over training), compares each descendant with its parent,
writes the report, and prints where it is and every
table: each delta with its paired bootstrap interval, exact McNemar p and Holm-adjusted p.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from reachlens.cli._common import comma_list, echo, positive_int
from reachlens.cli._scale_args import exec_from_args
from reachlens.cli.flags import ExecutionFlags, ModelFlags, ProtocolFlags, TaskFlags, add_flags, renamed

PRESETS = {
    "--task": "the demo is the zoo's study: its test tier",
    "--n": "the paper's protocol shape, n=300",
    "--k": "the paper's protocol shape, K=200",
    "--out": "the study's own folder, runs/demo",
    "--max-batch-rows": "the zoo's models are tiny: 4096 rows a batch (20 questions of K+1 rows a slice)",
    "--workers": "its checkpoints audited side by side, two processes",
}
"""Shared flags this command presets to another default (:mod:`reachlens.cli.flags`), and why."""

NAME = "demo"
HELP = "the main job: training audit of the shipped zoo with its report"

DEMO_MODELS = {"base": "zoo:base", "grpo": "zoo:grpo", "dapo": "zoo:dapo", "sft": "zoo:sft", "sft-grpo": "zoo:sft-grpo"}
DEMO_PAIRS = (("base", "grpo"), ("base", "dapo"), ("base", "sft"), ("sft", "sft-grpo"))
TRAJECTORY_RUN = "grpo"
"""The zoo run whose snapshots (``training.json``: ``trajectory_of``, ``snapshot_step``) the demo audits."""


def trajectory(entries) -> dict[str, int]:
    """Checkpoint name -> optimizer step of the zoo's :data:`TRAJECTORY_RUN` (its parent at 0, its own last
    step, every snapshot between); empty when the zoo has no snapshots of it."""
    by_name = {e.name: e for e in entries}
    run = by_name.get(TRAJECTORY_RUN)
    snaps = {e.name: int(e.training["snapshot_step"]) for e in entries
             if e.training.get("trajectory_of") == TRAJECTORY_RUN and "snapshot_step" in e.training}
    if run is None or not snaps:
        return {}
    parent = Path(run.training.get("parent", "")).name
    if parent not in by_name:
        return {}
    return {parent: 0, **dict(sorted(snaps.items(), key=lambda kv: kv[1])), TRAJECTORY_RUN: int(run.training["steps"])}


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("--out", default="runs/demo",
                   help="the study's directory (default runs/demo; re-running resumes)")
    add_flags(p, TaskFlags, only=("task", "n"), defaults={"task": "arith_hard", "n": 300},
              help={"task": "the zoo's test tier: arith_hard (3-6 operations, room both ways; default) or arith (the "
                            "pretraining mix, near the reachable ceiling)",
                    "n": "questions of the test split (default 300)"})
    add_flags(p, ProtocolFlags, only=("k", "max_new_tokens"), defaults={"k": 200},
              help={"k": "samples per question, the budget K of O_K (default 200)"})
    p.add_argument("--extended-k", type=positive_int("--extended-k"), default=400,
                   help="budget control: extend every audit to this K from the same seed stream (default 400)")
    p.add_argument("--temperatures", type=comma_list("--temperatures", float), default=[0.6, 1.0, 1.2],
                   help="temperature control: re-probe each pair's left questions at these (default 0.6,1.0,1.2)")
    p.add_argument("--length-max-new-tokens", type=positive_int("--length-max-new-tokens"), default=None,
                   help="length control: rerun flagged pairs at this decode length (default twice --max-new-tokens, "
                        "at most what the zoo's context leaves after the longest prompt)")
    add_flags(p, ModelFlags, only=("device", "dtype"))
    add_flags(p, ExecutionFlags, defaults={"max_batch_rows": 4096, "workers": 2},
              help={"max_batch_rows": "most completions decoded together (the zoo's models are tiny; default 4096)",
                    "workers": "checkpoints audited side by side, one process and one torch thread each (with --ray: "
                               "Ray actors, each holding one model replica; default 2)"})
    renamed(p, "--budget-k", "--extended-k")  # the budget is spelled k
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.cli._common import CLIError
    from reachlens.models.zoo import native_format, zoo_entries
    from reachlens.protocol import Protocol
    from reachlens.report import text_summary, write_report
    from reachlens.studies.training_audit import StudyPlan, run_training_audit
    from reachlens.tasks import load_task

    entries = zoo_entries()
    have = {e.name for e in entries}
    missing = sorted(set(DEMO_MODELS) - have)
    if missing:
        raise CLIError(f"zoo models {missing} are missing; build them with `make zoo`")
    steps = trajectory(entries)
    models = {**DEMO_MODELS, **{name: f"zoo:{name}" for name in steps}}
    # each checkpoint's native prompt format, as its training recorded it; the audits share "qa"
    native = {name: native_format(spec) or "qa" for name, spec in models.items()}
    if args.task not in ("arith_hard", "arith"):
        raise CLIError(f"--task {args.task!r} is not one of the zoo's tiers; use arith_hard or arith")
    task = load_task(args.task, n=args.n)
    max_new = args.max_new_tokens or task.max_new_tokens
    length_max_new = args.length_max_new_tokens or min(2 * max_new, _room(task, native.values()))
    plan = StudyPlan(models, DEMO_PAIRS, Protocol(args.task, k=args.k, temperature=0.8, max_new_tokens=max_new),
                     n=args.n, extended_k=args.extended_k, native_formats={n: f for n, f in native.items() if f != "qa"},
                     control_temperatures=tuple(args.temperatures), length_max_new_tokens=length_max_new,
                     trajectory=steps)
    t0 = time.perf_counter()
    study = run_training_audit(plan, args.out, exec_config=exec_from_args(args))  # --workers: processes or actors
    html_path, _ = write_report(study, args.out)
    echo(f"\nreport: {html_path}  ({time.perf_counter() - t0:.0f} s)\n")
    echo(text_summary(study))
    return 0


def _room(task, formats) -> int:
    """New tokens the zoo's context leaves after the task's longest prompt (any of ``formats``): the zoo's
    character tokenizer writes one token per character and adds none."""
    import json

    from reachlens.models.zoo import zoo_root

    n_ctx = json.loads((zoo_root() / "base" / "config.json").read_text())["max_position_embeddings"]
    longest = max(len(task.prompt(q, f)) for q in task.questions for f in {"qa", *formats})
    return n_ctx - longest

