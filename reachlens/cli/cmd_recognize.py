"""``reachlens recognize MODEL --task T --out DIR``: recognition vs generation, failure set, healthy panel."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from reachlens.cli._common import add_model_args, add_task_args, load_model_from_args, positive_int

NAME = "recognize"
HELP = "score options by likelihood (lm-eval acc/acc_norm) and generate greedily; pick the failure set"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    add_model_args(p)
    add_task_args(p)
    p.add_argument("--seed", type=int, default=0, help="task seed (generated tasks such as arith_mc)")
    p.add_argument("--recognition-format", default=None, help="prompt format scored as context (default: the task's)")
    p.add_argument("--prompt-format", default=None, help="prompt format for generation (default: the task's)")
    p.add_argument("--max-new-tokens", type=positive_int("--max-new-tokens"), default=96)
    p.add_argument("--batch-size", type=positive_int("--batch-size"), default=32, help="rows per scoring forward")
    p.add_argument("--metric", choices=("acc", "acc_norm"), default="acc", help="which recognition picks the sets")
    p.add_argument("--min-failures", type=positive_int("--min-failures"), default=8)
    p.add_argument("--max-failures", type=positive_int("--max-failures"), default=None)
    p.add_argument("--max-healthy", type=positive_int("--max-healthy"), default=None)
    p.add_argument("--out", required=True, help="output directory (tables, summary.json, sets.json)")
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.cli._common import CLIError
    from reachlens.store import write_json
    from reachlens.studies.recognition import (
        FailureRule,
        FailureSetTooSmall,
        RecognitionConfig,
        TaskSpec,
        compare_modes,
        select_sets,
    )

    spec = TaskSpec(args.task, args.data, args.split, args.n, args.seed)
    task = spec.load()
    config = RecognitionConfig(args.recognition_format, args.prompt_format, args.max_new_tokens,
                               batch_size=args.batch_size).resolved(task)
    rule = FailureRule(args.metric, args.min_failures, args.max_failures, args.max_healthy)
    model = load_model_from_args(args)
    result = compare_modes(model, task, config)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result.options.to_parquet(out / "options.parquet", index=False)
    result.questions.to_parquet(out / "questions.parquet", index=False)
    result.questions.drop(columns=["gen_text"]).to_csv(out / "questions.csv", index=False)
    result.records.to_parquet(out / "records.parquet", index=False)
    summary = {**result.summary(), "task": dataclasses.asdict(spec)}
    write_json(out / "summary.json", summary)  # (an undefined number is null, never NaN)
    s = result.summary()
    print(f"{args.model} on {args.task} (n={s['n']}): acc={s['acc']:.3f}  acc_norm={s['acc_norm']:.3f}  "
          f"generation={s['generation_acc']:.3f}  recognized-but-generated-wrong={s['rec_right_gen_wrong']}")
    try:
        sets = select_sets(result, rule, spec)
    except FailureSetTooSmall as err:
        raise CLIError(f"{err} (tables written to {out})") from None
    sets.save(out / "sets.json")
    print(f"failure set: {len(sets.failure)}  healthy panel: {len(sets.healthy)}   -> {out / 'sets.json'}")
    return 0
