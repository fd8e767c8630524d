"""``reachlens probe MODEL --task T --n N --probe SPEC [--probe SPEC ...] --out DIR``: one candidate bank."""

from __future__ import annotations

import argparse

from reachlens.cli._common import add_model_args, add_task_args, echo, stops_from_args
from reachlens.cli.flags import ProtocolFlags, add_flags
from reachlens.cli._scale_args import add_scale_args, exec_from_args, source_from_args

NAME = "probe"
HELP = "reachable under which probe? sampling, routes, few-shot, grafts, noise, steering: one candidate bank"

def register(sub) -> argparse.ArgumentParser:
    from reachlens.probes.spec import families_help

    # the families as registered when the parser is built: every family reachlens ships, and any a plug-in added
    p = sub.add_parser(NAME, help=HELP, epilog=families_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(p)
    add_task_args(p)
    p.add_argument("--probe", action="append", required=True, metavar="SPEC",
                   help="a probe, NAME[:key=value...] (repeatable; see below)")
    p.add_argument("--union", action="append", default=None, metavar="A+B",
                   help="a named union to report, e.g. sampling+graft (repeatable; default: greedy with each "
                        "family, and all families together)")
    add_flags(p, ProtocolFlags, only=("max_new_tokens", "prompt_format", "system", "stop", "seed"))
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
    verified = f"  D^trace={_num(s['D_trace'])}" if "D_trace" in s else ""
    echo(f"{args.model} on {args.task} (n={s['n']}): D={_num(s['D'])} [{_num(s['D_ci'][0])}, {_num(s['D_ci'][1])}]"
          f"{verified}   -> {args.out}")
    named = {**{f"O[{label}]": p for label, p in s["probes"].items()}, **s["unions"]}
    width = max(map(len, named))
    for name, p in named.items():
        tag = "  [intervention]" if p["kind"] == "intervention" else ""
        gap = "" if "selection_gap" not in p else (f"  selection gap {_num(p['selection_gap'], '+')} "
                                                   f"[{_num(p['selection_gap_ci'][0], '+')}, {_num(p['selection_gap_ci'][1], '+')}]")
        solved = f"  verified {_num(p['O_trace'])}" if "O_trace" in p else ""
        null = f"  null {_num(p['O_null'])} (95th pct {_num(p['O_null_p95'])})" if "O_null" in p else ""
        echo(f"  {name:<{width}}  {_num(p['O'])}  [{_num(p['O_ci'][0])}, {_num(p['O_ci'][1])}]{null}{solved}{gap}{tag}")
    echo(f"tables and charts: reachlens report {args.out}")
    return 0


def _num(x, sign: str = "") -> str:
    return "undefined" if x is None or x != x else f"{x:{sign}.3f}"
