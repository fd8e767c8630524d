"""The ``reachlens`` command: a thin layer over the Python API.

    reachlens audit MODEL --task TASK [--data PATH] [--split test] [--n N] [--k K] [--temperature T]
                    [--top-p P] [--max-new-tokens M] [--prompt-format F] [--seed S] --out DIR
    reachlens rescore DIR [--grader NAME]

Bad arguments exit with status 2 and one line saying what is wrong and how to fix it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main", "build_parser"]


class CLIError(Exception):
    """A user error: printed as one line, exit status 2."""


def _positive_int(name: str):
    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {s!r}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {v}")
        return v

    return parse


def _nonneg_float(name: str):
    def parse(s: str) -> float:
        try:
            v = float(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {s!r}") from None
        if not v >= 0:
            raise argparse.ArgumentTypeError(f"{name} must be >= 0, got {v}")
        return v

    return parse


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="reachlens", description="Realized vs reachable audits of causal LMs.")
    sub = ap.add_subparsers(dest="command", required=True)

    a = sub.add_parser("audit", help="audit one model: realized (greedy) vs reachable (K samples)")
    a.add_argument("model", help="zoo:NAME, a local HuggingFace folder, or a hub name")
    a.add_argument("--task", required=True, help="task name (arith, gsm8k, arc, math500, piqa, logiqa, jsonl, csv)")
    a.add_argument("--data", default=None, help="data file for file-based tasks")
    a.add_argument("--split", default="test")
    a.add_argument("--n", type=_positive_int("--n"), default=None, help="audit the first N questions")
    a.add_argument("--k", type=_positive_int("--k"), default=64, help="samples per question (budget K)")
    a.add_argument("--temperature", type=_nonneg_float("--temperature"), default=0.8)
    a.add_argument("--top-p", type=float, default=1.0)
    a.add_argument("--max-new-tokens", type=_positive_int("--max-new-tokens"), default=256)
    a.add_argument("--prompt-format", default="default")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--stop", action="append", default=None, help="stop string (repeatable; default: the task's)")
    a.add_argument("--max-batch-rows", type=_positive_int("--max-batch-rows"), default=256)
    a.add_argument("--device", default="cpu")
    a.add_argument("--trust-remote-code", action="store_true", help="allow the model's own code to run")
    a.add_argument("--out", required=True, help="audit directory (re-running resumes it)")

    r = sub.add_parser("rescore", help="re-grade a stored audit without sampling")
    r.add_argument("dir")
    r.add_argument("--grader", default=None, help="grader to use instead of the protocol's")
    return ap


def _cmd_audit(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from reachlens.models import load_model
    from reachlens.protocol import Protocol
    from reachlens.studies import audit
    from reachlens.tasks import load_task

    task = load_task(args.task, args.data, split=args.split, n=args.n, seed=0)
    protocol = Protocol(
        task=args.task, split=args.split, k=args.k, temperature=args.temperature, top_p=args.top_p,
        max_new_tokens=args.max_new_tokens, prompt_format=args.prompt_format, seed=args.seed,
        stop=tuple(args.stop) if args.stop else None,
    ).resolved(task)
    model = load_model(args.model, device=args.device, trust_remote_code=args.trust_remote_code)
    bar = tqdm(total=len(task), unit="q", desc=f"audit {args.model}", file=sys.stderr)

    def tick(done: int) -> None:
        bar.update(done - bar.n)

    result = audit(model, task, protocol, out=args.out, max_batch_rows=args.max_batch_rows, progress=tick)
    bar.close()
    print(f"{args.model} on {args.task} (n={result.n}, K={result.k}, T={protocol.temperature}): "
          f"D={result.D:.3f}  O_{result.k}={result.O_K:.3f}  gap={result.gap:+.3f}   -> {args.out}")
    return 0


def _cmd_rescore(args: argparse.Namespace) -> int:
    from reachlens.studies import rescore

    result = rescore(args.dir, grader=args.grader)
    print(f"rescored {args.dir}: D={result.D:.3f}  O_{result.k}={result.O_K:.3f}  gap={result.gap:+.3f}")
    return 0


COMMANDS = {"audit": _cmd_audit, "rescore": _cmd_rescore}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from reachlens.models.loading import ModelLoadError
    from reachlens.protocol import ProtocolMismatch
    from reachlens.tasks.base import DataError

    try:
        return COMMANDS[args.command](args)
    except (ProtocolMismatch, ModelLoadError, DataError, FileNotFoundError, LookupError, ValueError) as err:
        msg = err.args[0] if isinstance(err, LookupError) and err.args else str(err)
        print(f"reachlens {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
