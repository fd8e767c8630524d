"""``reachlens control temperature|length BASE TRAINED ...``: rerun part of a comparison under one changed field.

* ``temperature``: re-probe the questions that left the reachable set (base-reachable,
  trained-unreachable) with the trained model at each of ``--temperatures``, same K, same seed stream;
  prints temperature x (n re-probed, n reachable again, share, 95 % Wilson interval).
* ``length``: audit both checkpoints again at ``--max-new-tokens`` (above the audits' own) and print
  the deltas at both lengths with their intervals and tests, beside the truncation shares.

BASE and TRAINED are audit directories; each checkpoint is loaded from the spec its audit recorded
(``--base-model``/``--trained-model`` override it: a moved folder) and checked against the audit's
fingerprint. ``--out DIR`` is a run directory of kind ``temperature_control`` or ``length_control``
(``run.json``, ``summary.json``, the table as ``{kind}.csv``) holding the rerun audit directories
(``T{t}/``; ``base/`` and ``trained/``); ``reachlens show DIR`` and ``reachlens report DIR`` read it, and
re-running the command resumes.
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
    from reachlens.store import RunDir, RunRecord
    from reachlens.studies import AuditResult, compare
    from reachlens.studies.controls import length_table, rerun_at_length, temperature_control

    for d in (args.base, args.trained):
        if not Path(d).is_dir():
            raise CLIError(f"{d!r} is not an audit directory")
    base, trained = AuditResult.load(args.base), AuditResult.load(args.trained)
    before = compare(base, trained)  # refuses unlike audits before any model loads
    kind = f"{args.control}_control"
    options = {"base_dir": str(Path(args.base).resolve()), "trained_dir": str(Path(args.trained).resolve())}
    if args.control == "temperature":
        if not args.temperatures or any(not t > 0 for t in args.temperatures):
            raise CLIError(f"--temperatures {','.join(map(str, args.temperatures))!r}: give temperatures > 0, "
                           "e.g. 0.6,1.0,1.2")
        options["temperatures"] = list(args.temperatures)
    elif args.max_new_tokens <= base.protocol.max_new_tokens:
        raise CLIError(f"--max-new-tokens {args.max_new_tokens} must exceed the audits' {base.protocol.max_new_tokens}")
    else:
        options["max_new_tokens"] = args.max_new_tokens
    run = RunDir(args.out)
    run.check_target()  # a file or a folder of other files is refused before any model loads
    record = RunRecord.new(kind, trained.protocol, {"base": base.model, "trained": trained.model},
                           trained.data or None, options)
    task = _task(trained, args.data)
    fmt = lambda x: f"{x:.3f}"  # noqa: E731
    with run.writer():
        run.start(record)  # a directory holding another run is refused, naming what differs
        if args.control == "temperature":
            model = _load(args.trained_model or trained.model["spec"], args)
            table = temperature_control(model, task, base, trained, args.temperatures, out=run.path,
                                        max_batch_rows=args.max_batch_rows)
            head = (f"{int(table['n_reprobed'].iloc[0])} questions left the reachable set (K={trained.k}, "
                    f"T={trained.protocol.temperature}); re-probed with {trained.model['spec']}:")
            summary = {"left": int(table["n_reprobed"].iloc[0]),
                       "temperatures": {f"{r.temperature:g}": {"n_reprobed": r.n_reprobed, "n_reachable": r.n_reachable,
                                                               "share": r.share, "share_ci": [r.share_lo, r.share_hi]}
                                        for r in table[table["source"] == "re-probe"].itertuples()}}
        else:
            longer = {}
            for side, result, spec in (("base", base, args.base_model), ("trained", trained, args.trained_model)):
                model = _load(spec or result.model["spec"], args)
                longer[side] = rerun_at_length(model, task, result, args.max_new_tokens, out=run.path / side,
                                               max_batch_rows=args.max_batch_rows)
                del model
            table = length_table(before, compare(longer["base"], longer["trained"]))
            t = before.summary()["truncation"]
            head = (f"cut at max_new_tokens={t['max_new_tokens']}: samples {t['samples_base']:.1%} (base) vs "
                    f"{t['samples_trained']:.1%} (trained), deployed {t['deployed_base']:.1%} vs "
                    f"{t['deployed_trained']:.1%}")
            summary = {"truncation": t, "lengths": table.to_dict("records")}
        table.to_csv(run.path / f"{kind}.csv", index=False)
        run.write_summary(summary)
    print(head)
    print(table.to_string(index=False, float_format=fmt))
    print(f"-> {run.path}")
    return 0
