"""``reachlens route MODEL --task T --space SPACE --search STRATEGY --k K --out DIR``: one routing cell."""

from __future__ import annotations

import argparse

from reachlens.cli._common import CLIError, add_model_args, add_task_args, echo
from reachlens.cli._scale_args import exec_from_args, source_from_args
from reachlens.cli.flags import ExecutionFlags, ProtocolFlags, add_flags, renamed

PRESETS = {"--k": "a route search's budget: 8 route evaluations a question, as the routes probe's"}
"""Shared flags this command presets to another default (:mod:`reachlens.cli.flags`), and why."""

NAME = "route"
HELP = "search layer routes at a matched budget; reachable (O_K) vs answer-blind selection"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    add_model_args(p)
    add_task_args(p)
    p.add_argument("--space", required=True, help="route space: skip, native or reorder")
    p.add_argument("--search", required=True, help="strategy: random, hill_climb, genetic or mcts")
    add_flags(p, ProtocolFlags, only=("k",), defaults={"k": 8},
              help={"k": "the budget K: route evaluations per question (duplicates count; the identity route is the "
                         "first; default 8)"})
    p.add_argument("--objective", default="confidence", help="answer-blind objective: confidence or lowest_window")
    p.add_argument("--oracle", action="store_true", help="search for correct answers instead (reads the gold answer)")
    p.add_argument("--max-skip", type=int, default=None, help="skip/native: most layers left out (default 2)")
    p.add_argument("--max-repeat", type=int, default=None, help="native: most layers run twice (default 1)")
    p.add_argument("--window", type=int, default=None,
                   help="reorder: a layer moves at most WINDOW-1 places (default 2)")
    add_flags(p, ProtocolFlags, only=("max_new_tokens", "prompt_format", "system"))
    p.add_argument("--verification", default="rescore", help="self-verification prompt: rescore or yes_no")
    p.add_argument("--search-seed", type=int, default=0, help="seed of the route search (default 0)")
    add_flags(p, ExecutionFlags)
    p.add_argument("--out", required=True, help="run directory (searched slices are kept: a re-run resumes it)")
    renamed(p, "--budget", "--k")
    renamed(p, "--seed", "--search-seed")  # --seed is the sample stream's in every command that samples
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.cli._progress import RunProgress
    from reachlens.protocol import Protocol
    from reachlens.routing import STRATEGIES, RoutingConfig, format_recovery, make_space, run_routing
    from reachlens.routing.job import n_layers_of
    from reachlens.store import RunDir
    from reachlens.tasks import load_task

    if args.search not in STRATEGIES:
        raise CLIError(f"unknown --search {args.search!r}; known: {', '.join(STRATEGIES.names())}")
    task = load_task(args.task, args.data, split=args.split, n=args.n)
    length = {} if args.max_new_tokens is None else {"max_new_tokens": args.max_new_tokens}
    protocol = Protocol.deployment(task, split=args.split, prompt_format=args.prompt_format, system=args.system,
                                   **length).resolved(task)
    config = RoutingConfig(budget=args.k, objective=args.objective, oracle=args.oracle, seed=args.search_seed,
                           verification=args.verification)
    RunDir(args.out).check_target()  # a file or a folder of other files: refused before the model loads
    exec_config = exec_from_args(args)
    source = source_from_args(args)
    options = {"max_skip": args.max_skip, "max_repeat": args.max_repeat, "window": args.window}
    given = {k: v for k, v in options.items() if v is not None}
    space = make_space(args.space, n_layers_of(source), **given)
    with RunProgress(f"route {args.search} {space}", "questions") as bar:  # the base decode shows its tokens too
        result = run_routing(source, task, space, args.search, protocol=protocol, config=config, out=args.out,
                             exec_config=exec_config, progress=bar.done)
    s = result.summary()
    echo(f"{args.model} on {args.task} (n={s['n']}, {space}, {args.search}, K={args.k}): "
          f"D={s['D']:.3f}  O_{args.k}={s['O_K']:.3f}   -> {args.out}")
    if "O_K_null" in s:
        echo(f"  lucky-guess null: O_{args.k}^null={s['O_K_null']:.3f} (95th pct {s['O_K_null_p95']:.3f})  "
             f"O_K - null={s['O_K_minus_null']:.3f}")
    if "O_K_trace" in s:
        echo(f"  verified: D^trace={s['D_trace']:.3f}  O_{args.k}^trace={s['O_K_trace']:.3f}")
    for name in result.selectors:
        echo(f"  {name:<14} {s[name]:.3f}   gap recovery {format_recovery(s[f'recovery_{name}'])}")
    return 0
