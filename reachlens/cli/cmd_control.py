"""``reachlens control temperature|length BASE TRAINED ...``: rerun part of a comparison under one changed field.

* ``temperature``: re-probe the questions that left the reachable set (base-reachable,
  trained-unreachable) with the trained model at each of ``--temperatures``, same K, same seed stream;
  prints temperature x (n re-probed, n reachable again, share, 95 % Wilson interval).
* ``length``: audit both checkpoints again at ``--max-new-tokens`` (above the audits' own) and print
  the deltas at both lengths with their intervals and tests, beside the truncation shares.

BASE and TRAINED are audit directories; each checkpoint is loaded from the spec its audit recorded
(``--base-model``/``--trained-model`` override it: a moved folder) and checked against the audit's
fingerprint. ``--out DIR`` is the control's run (kind ``temperature_control`` or ``length_control``: its
record, summary and table ``{kind}.parquet``) holding its reruns, each an audit directory named by
:func:`reachlens.store.rerun_name` (``trained--questions=...--temperature=0.6``; ``base--max_new_tokens=N``
and ``trained--max_new_tokens=N``); ``reachlens show DIR`` and ``reachlens report DIR`` read it, and
re-running the command resumes. The reruns decode on the runner: ``--workers N`` processes side by side (or Ray
actors with ``--ray``) give the tables of one process.
"""

from __future__ import annotations

import argparse

from reachlens.cli._common import comma_list, echo
from reachlens.cli._scale_args import add_scale_args, exec_from_args
from reachlens.cli.flags import ModelFlags, ProtocolFlags, add_flags

NAME = "control"
HELP = "the temperature and length controls of a comparison (rerun part of it under one changed field)"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("base", help="the parent's audit directory")
    p.add_argument("trained", help="the descendant's audit directory")
    p.add_argument("--out", required=True, help="directory for the rerun audits and the table (re-running resumes)")
    p.add_argument("--data", default=None, help="the data file the audits were made on (file-based tasks)")
    p.add_argument("--trained-model", default=None, help="load the descendant from here (default: its audit's spec)")
    add_flags(p, ModelFlags, only=("device", "dtype"))
    add_scale_args(p, backend=False)  # the reruns decode on the runner: --workers, --ray as everywhere


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    kinds = p.add_subparsers(dest="control", required=True)
    t = kinds.add_parser("temperature", help="re-probe the questions that left the reachable set at other temperatures")
    _common(t)
    t.add_argument("--temperatures", type=comma_list("--temperatures", float), default=[0.6, 1.0, 1.2],
                   help="comma-separated temperatures (default 0.6,1.0,1.2)")
    n = kinds.add_parser("length", help="rerun both audits at a longer decode (truncation parity)")
    _common(n)
    add_flags(n, ProtocolFlags, only=("max_new_tokens",),
              help={"max_new_tokens": "the longer decode length (above the audits' own; required)"})
    n.add_argument("--base-model", default=None, help="load the parent from here (default: its audit's spec)")
    return p


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from reachlens.cli._common import CLIError
    from reachlens.cli._progress import RunProgress, Tally
    from reachlens.models import ModelSource
    from reachlens.store import RunDir
    from reachlens.studies import AuditResult, compare
    from reachlens.studies.controls import length_control, temperature_control
    from reachlens.tasks import load_task

    if args.control == "length" and args.max_new_tokens is None:
        raise CLIError("control length needs --max-new-tokens N, the longer decode length (above the audits' own)")
    for d in (args.base, args.trained):
        if not Path(d).is_dir():
            raise CLIError(f"{d!r} is not an audit directory")
    base, trained = AuditResult.load(args.base), AuditResult.load(args.trained)
    before = compare(base, trained)  # refuses unlike audits before any model loads
    if args.control == "temperature" and (not args.temperatures or any(not t > 0 for t in args.temperatures)):
        raise CLIError(f"--temperatures {','.join(map(str, args.temperatures))!r}: give temperatures > 0, e.g. 0.6,1.0,1.2")
    if args.control == "length" and args.max_new_tokens <= base.protocol.max_new_tokens:
        raise CLIError(f"--max-new-tokens {args.max_new_tokens} must exceed the audits' {base.protocol.max_new_tokens}")
    RunDir(args.out).check_target()  # a file or a folder of other files is refused before any model loads
    exec_config = exec_from_args(args)
    task = load_task(trained.protocol.task, args.data, split=trained.protocol.split)
    source = lambda spec, result: ModelSource.from_exec(spec or result.model["spec"], exec_config)  # noqa: E731
    with RunProgress(f"control {args.control}", "q") as bar:  # the reruns' questions, and their decodes' tokens
        tally = Tally(bar.done)
        if args.control == "temperature":
            control = temperature_control(source(args.trained_model, trained), task, base, trained, args.temperatures,
                                          out=args.out, exec_config=exec_config, progress=tally)
        else:
            control = length_control(base, trained, args.max_new_tokens, task=task, out=args.out,
                                     exec_config=exec_config, progress=tally,
                                     models=(source(args.base_model, base), source(args.trained_model, trained)))
    if args.control == "temperature":
        head = (f"{int(control.table()['n_reprobed'].iloc[0])} questions left the reachable set (K={trained.k}, "
                f"T={trained.protocol.temperature}); re-probed with {trained.model['spec']}:")
    else:
        t = before.summary()["truncation"]
        head = (f"cut at max_new_tokens={t['max_new_tokens']}: samples {t['samples_base']:.1%} (base) vs "
                f"{t['samples_trained']:.1%} (trained), deployed {t['deployed_base']:.1%} vs "
                f"{t['deployed_trained']:.1%}")
    echo(head)
    echo(control.table().to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    echo(f"-> {args.out}")
    return 0
