"""``reachlens recognize MODEL --task T --out DIR``: recognition vs generation, failure set, healthy panel."""

from __future__ import annotations

import argparse

from reachlens.cli._common import add_model_args, add_task_args, echo, positive_int
from reachlens.cli._scale_args import exec_from_args, source_from_args
from reachlens.cli.flags import ExecutionFlags, ProtocolFlags, add_flags, renamed

NAME = "recognize"
HELP = "score options by likelihood (lm-eval acc/acc_norm) and generate greedily; pick the failure set"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    add_model_args(p)
    add_task_args(p)
    p.add_argument("--task-seed", type=int, default=0, help="seed of a generated task (such as arith_mc; default 0)")
    p.add_argument("--recognition-format", default=None, help="prompt format scored as context (default: the task's)")
    add_flags(p, ProtocolFlags, only=("max_new_tokens", "prompt_format", "system"))
    p.add_argument("--fewshot-as-multiturn", action="store_true",
                   help="lm-eval's --fewshot_as_multiturn: refused, reachlens' tasks are zero-shot (nothing to turn)")
    p.add_argument("--batch-size", type=positive_int("--batch-size"), default=32, help="rows per scoring forward of the option likelihoods (lm-eval's batch_size; default 32)")
    p.add_argument("--max-length", type=positive_int("--max-length"), default=None,
                   help="scoring window in tokens, lm-eval's max_length: longer inputs lose their left end "
                        "(default: the model config's window; the run records the one used)")
    p.add_argument("--metric", choices=("acc", "acc_norm"), default="acc", help="which recognition picks the sets")
    p.add_argument("--min-failures", type=positive_int("--min-failures"), default=8,
                   help="refuse when fewer questions are recognized right but generated wrong (default 8)")
    p.add_argument("--max-failures", type=positive_int("--max-failures"), default=None,
                   help="keep at most this many failures, the first in task order (default all)")
    p.add_argument("--max-healthy", type=positive_int("--max-healthy"), default=None,
                   help="keep at most this many healthy questions, the first in task order (default all)")
    add_flags(p, ExecutionFlags)
    p.add_argument("--out", required=True, help="run directory (tables, summary, sets.json; a re-run resumes it)")
    renamed(p, "--seed", "--task-seed")  # --seed is the sample stream's in every command that samples
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.cli._common import CLIError
    from reachlens.cli._progress import RunProgress
    from reachlens.protocol import Protocol
    from reachlens.store import RunDir
    from reachlens.studies.recognition import (
        FailureRule,
        FailureSetTooSmall,
        RecognitionConfig,
        TaskSpec,
        generation_protocol,
        select_sets,
    )
    from reachlens.studies.recognition_job import recognize

    if args.fewshot_as_multiturn:
        raise CLIError("--fewshot-as-multiturn turns few-shot examples into chat turns, and reachlens' recognition "
                       "contexts are zero-shot (lm-eval renders 0 shots the same with or without it); drop it")
    spec = TaskSpec(args.task, args.data, args.split, args.n, args.task_seed)
    task = spec.load()
    length = {} if args.max_new_tokens is None else {"max_new_tokens": args.max_new_tokens}
    protocol = generation_protocol(task, Protocol.deployment(task, split=args.split, prompt_format=args.prompt_format,
                                                             system=args.system, **length))
    config = RecognitionConfig(args.recognition_format, batch_size=args.batch_size, max_batch_rows=args.max_batch_rows,
                               max_length=args.max_length).resolved(task)
    rule = FailureRule(args.metric, args.min_failures, args.max_failures, args.max_healthy)
    out = RunDir(args.out)
    out.check_target()  # a file or a folder of other files: refused before the model loads
    with RunProgress(f"recognize {args.model}", "questions") as bar:
        result = recognize(source_from_args(args), task, protocol, config, rule=rule, spec=spec, out=out.path,
                           exec_config=exec_from_args(args), progress=bar.done)
    s = result.summary()
    echo(f"{args.model} on {args.task} (n={s['n']}): acc={s['acc']:.3f}  acc_norm={s['acc_norm']:.3f}  "
          f"D={s['D']:.3f}  recognized-not-realized={s['recognized_not_realized']}")
    sets = result.sets
    if sets is None:
        try:
            select_sets(result, rule, spec)
        except FailureSetTooSmall as err:  # the rule's shortfall, in its own words
            raise CLIError(f"{err} (tables written to {out.path})") from None
    echo(f"failure set: {len(sets.failure)}  healthy panel: {len(sets.healthy)}   -> {out.path / 'sets.json'}")
    return 0
