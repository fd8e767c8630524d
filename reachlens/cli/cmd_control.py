"""``reachlens control temperature|length BASE TRAINED ...``: rerun part of a comparison under one changed field.

* ``temperature``: re-probe the questions that left the reachable set (base-reachable,
  trained-unreachable) with the trained model at each of ``--temperatures``, same K, same seed stream;
  prints temperature x (n re-probed, n reachable again, share, 95 % Wilson interval).
* ``length``: audit both checkpoints again at ``--max-new-tokens`` (above the audits' own) and print
  the deltas at both lengths with their intervals and tests, beside the truncation shares.

BASE and TRAINED are audit directories; each checkpoint is loaded from the spec its audit recorded
(``--base-model``/``--trained-model`` override it: a moved folder) and checked against the audit's
fingerprint. ``--out DIR`` receives the rerun audit directories and the table (``temperature.csv`` or
``length.csv``); re-running the command resumes.
"""

from __future__ import annotations

import argparse

from reachlens.cli._common import DTYPES, comma_list, positive_int

NAME = "control"
HELP = "the temperature and length controls of a comparison (rerun part of it under one changed field)"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("base", help="the parent's audit directory")
    p.add_argument("trained", help="the descendant's audit directory")
    p.add_argument("--out", required=True, help="directory for the rerun audits and the table (re-running resumes)")
    p.add_argument("--data", default=None, help="the data file the audits were made on (file-based tasks)")
    p.add_argument("--trained-model", default=None, help="load the descendant from here (default: its audit's spec)")
    p.add_argument("--max-batch-rows", type=positive_int("--max-batch-rows"), default=1024)
    p.add_argument("--device", default="cpu", help="where the models run (default cpu)")
    p.add_argument("--dtype", default="float32", choices=DTYPES)


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    kinds = p.add_subparsers(dest="control", required=True)
    t = kinds.add_parser("temperature", help="re-probe the questions that left the reachable set at other temperatures")
    _common(t)
    t.add_argument("--temperatures", type=comma_list("--temperatures", float), default=[0.6, 1.0, 1.2],
                   help="comma-separated temperatures (default 0.6,1.0,1.2)")
    n = kinds.add_parser("length", help="rerun both audits at a longer decode (truncation parity)")
    _common(n)
    n.add_argument("--max-new-tokens", type=positive_int("--max-new-tokens"), required=True,
                   help="the longer decode length (above the audits' own)")
    n.add_argument("--base-model", default=None, help="load the parent from here (default: its audit's spec)")
    return p


def _task(result, data):
    from reachlens.tasks import load_task

    return load_task(result.protocol.task, data, split=result.protocol.split)


def _load(spec: str, args: argparse.Namespace):
    import torch

    from reachlens.models import load_model

    return load_model(spec, device=args.device, dtype=getattr(torch, args.dtype))


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from reachlens.cli._common import CLIError
    from reachlens.studies import AuditResult, compare
    from reachlens.studies.controls import length_table, rerun_at_length, temperature_control

    for d in (args.base, args.trained):
        if not Path(d).is_dir():
            raise CLIError(f"{d!r} is not an audit directory")
    base, trained = AuditResult.load(args.base), AuditResult.load(args.trained)
    before = compare(base, trained)  # refuses unlike audits before any model loads
    out = Path(args.out)
    task = _task(trained, args.data)
    fmt = lambda x: f"{x:.3f}"  # noqa: E731
    if args.control == "temperature":
        if any(not t > 0 for t in args.temperatures) or not args.temperatures:
            raise CLIError(f"--temperatures {','.join(map(str, args.temperatures))!r}: give temperatures > 0, "
                           "e.g. 0.6,1.0,1.2")
        model = _load(args.trained_model or trained.model["spec"], args)
        table = temperature_control(model, task, base, trained, args.temperatures, out=out,
                                    max_batch_rows=args.max_batch_rows)
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "temperature.csv", index=False)
        print(f"{len(table) and table['n_reprobed'].iloc[0]} questions left the reachable set "
              f"(K={trained.k}, T={trained.protocol.temperature}); re-probed with {trained.model['spec']}:")
        print(table.to_string(index=False, float_format=fmt))
    else:
        if args.max_new_tokens <= base.protocol.max_new_tokens:
            raise CLIError(f"--max-new-tokens {args.max_new_tokens} must exceed the audits' "
                           f"{base.protocol.max_new_tokens}")
        longer = {}
        for side, result, spec in (("base", base, args.base_model), ("trained", trained, args.trained_model)):
            model = _load(spec or result.model["spec"], args)
            longer[side] = rerun_at_length(model, task, result, args.max_new_tokens, out=out / side,
                                           max_batch_rows=args.max_batch_rows)
            del model
        table = length_table(before, compare(longer["base"], longer["trained"]))
        table.to_csv(out / "length.csv", index=False)
        t = before.summary["truncation"]
        print(f"cut at max_new_tokens={t['max_new_tokens']}: samples {t['samples_base']:.1%} (base) vs "
              f"{t['samples_trained']:.1%} (trained), deployed {t['deployed_base']:.1%} vs {t['deployed_trained']:.1%}")
        print(table.to_string(index=False, float_format=fmt))
    print(f"-> {out}")
    return 0
