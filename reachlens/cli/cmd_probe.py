"""``reachlens probe MODEL --task T --n N --probe SPEC [--probe SPEC ...] --out DIR``: one candidate bank."""

from __future__ import annotations

import argparse

from reachlens.cli._common import add_format_args, add_model_args, add_stop_arg, add_task_args, echo, positive_int, stops_from_args
from reachlens.cli._scale_args import add_scale_args, exec_from_args, source_from_args

NAME = "probe"
HELP = "reachable under which probe? sampling, routes, grafts, embedding noise, steering: one candidate bank"

_EPILOG = """probe specs (NAME[:key=value[:key=value...]]; lists comma-separated):
  sampling:k=6:temperature=0.7          K samples (the audit's probe)
  routes:space=skip:search=random:budget=8   K layer routes (routing's probe)
  graft:kind=zero,noise:layer=3         activation grafts at the last prompt token (an intervention)
  graft:kind=zero:layer=3:placebo=true  the same grafts at a random prompt position (the control)
  embedding_noise:ratio=0.1:k=4         noise on the prompt's embeddings (an intervention)
  steer:layer=2:alphas=-4,4             a random unit direction added at every step (an intervention)
A bad key names the keys its family knows."""


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP, epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(p)
    add_task_args(p)
    p.add_argument("--probe", action="append", required=True, metavar="SPEC",
                   help="a probe, NAME[:key=value...] (repeatable; see below)")
    p.add_argument("--union", action="append", default=None, metavar="A+B",
                   help="a named union to report, e.g. sampling+graft (repeatable; default: greedy with each "
                        "family, and all families together)")
    p.add_argument("--max-new-tokens", type=positive_int("--max-new-tokens"), default=None,
                   help="decode length of every candidate (default: the task's own, else 256)")
    add_format_args(p)
    p.add_argument("--seed", type=int, default=0, help="seed of every probe that names none")
    add_stop_arg(p)
    p.add_argument("--max-batch-rows", type=positive_int("--max-batch-rows"), default=1024,
                   help="most completions decoded together (fixes the slices a resumed run decodes)")
    p.add_argument("--out", required=True, help="probe run directory (re-running resumes it)")
    add_scale_args(p, backend=False)
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.cli._progress import RunProgress
    from reachlens.probes import parse_probe, probe
    from reachlens.protocol import Protocol
    from reachlens.tasks import load_task

    task = load_task(args.task, args.data, split=args.split, n=args.n)
    probes = [parse_probe(s) for s in args.probe]  # a bad spec is refused before the model loads
    length = {} if args.max_new_tokens is None else {"max_new_tokens": args.max_new_tokens}
    protocol = Protocol.deployment(task, split=args.split, prompt_format=args.prompt_format, system=args.system, seed=args.seed,
                                   stop=stops_from_args(args, task), **length)
    # the runner refuses a bad --out or another run in it before the model loads (the line shows after 0.5 s)
    with RunProgress(f"probe {args.model}", "q") as bar:
        result = probe(source_from_args(args), task, probes, out=args.out, protocol=protocol, unions=args.union,
                       exec_config=exec_from_args(args), progress=bar.done)
    s = result.summary()
    echo(f"{args.model} on {args.task} (n={s['n']}): D={_num(s['D'])} [{_num(s['D_ci'][0])}, {_num(s['D_ci'][1])}]"
          f"   -> {args.out}")
    named = {**{f"O[{label}]": p for label, p in s["probes"].items()}, **s["unions"]}
    width = max(map(len, named))
    for name, p in named.items():
        tag = "  [intervention]" if p["kind"] == "intervention" else ""
        gap = "" if "selection_gap" not in p else (f"  selection gap {_num(p['selection_gap'], '+')} "
                                                   f"[{_num(p['selection_gap_ci'][0], '+')}, {_num(p['selection_gap_ci'][1], '+')}]")
        echo(f"  {name:<{width}}  {_num(p['O'])}  [{_num(p['O_ci'][0])}, {_num(p['O_ci'][1])}]{gap}{tag}")
    echo(f"tables and charts: reachlens report {args.out}")
    return 0


def _num(x, sign: str = "") -> str:
    return "undefined" if x is None or x != x else f"{x:{sign}.3f}"
