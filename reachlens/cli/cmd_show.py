"""``reachlens show DIR``: the record (run.json) and summary of any run directory.

Any run a reachlens command wrote: an audit, a comparison (``compare --out``), a routing run, a
recognition run, a causal sweep, a control, a training audit (``reachlens demo``). It prints the run
format's version and the run's status: ``complete``; ``running`` while a writer holds it; ``interrupted``
when it was stopped, or killed outright; ``failed`` when an error stopped it.
"""

from __future__ import annotations

import argparse

NAME = "show"
HELP = "print a run directory's record (kind, status, protocol, model, data, command) and summary"


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("dir", help="a run directory (audit, comparison, routing, recognition, ...)")
    return p


def run(args: argparse.Namespace) -> int:
    from reachlens.store import RunDir, read_record

    record = read_record(args.dir)
    print(format_run(record, RunDir(args.dir).summary()))
    return 0


def _value(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "undefined" if v != v else f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_value(x)}" for k, x in v.items()) if v else "-"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def _model(model: dict) -> str:
    if "spec" in model or "fingerprint" in model:
        fp = str(model.get("fingerprint"))
        return f"{model.get('spec')} ({fp[:23]}{'...' if len(fp) > 23 else ''})"
    return "; ".join(f"{role}: {_model(m) if isinstance(m, dict) else m}" for role, m in model.items()) or "-"


def format_run(record, summary: dict | None) -> str:
    """The lines ``reachlens show`` prints for one run."""
    from reachlens.store import FORMAT_VERSION

    ended = f", finished {record.finished}" if record.finished else ""
    lines = [f"kind:       {record.kind}", f"format:     reachlens-run, version {FORMAT_VERSION}",
             f"status:     {record.status} (started {record.started or '-'}{ended})",
             f"model:      {_model(record.model)}"]
    if record.protocol is not None:
        p = record.protocol
        stop = "(the task's)" if p.stop is None else repr(list(p.stop))
        grader = p.grader or "(the task's)"
        lines.append(f"protocol:   task={p.task} split={p.split} k={p.k} temperature={p.temperature} top_p={p.top_p} "
                     f"max_new_tokens={p.max_new_tokens} prompt_format={p.prompt_format} "
                     f"stop={stop} grader={grader} "
                     f"seed={p.seed} (hash {p.hash})")
        if p.chat_template is not None or p.system is not None:
            system = "(the template's own)" if p.system is None else repr(p.system)
            lines.append(f"{'':<12}chat template {p.chat_template or '(not bound)'}, system turn {system}")
    for key, value in record.options.items():
        lines.append(f"{'options:' if key == next(iter(record.options)) else '':<12}{key}: {_value(value)}")
    data = record.data or {}
    lines.append(f"data:       {_value({k: (v[:12] + '...' if isinstance(v, str) and len(v) == 64 else v) for k, v in data.items()}) if data else 'unknown'}")
    lines.append(f"exec:       {_value(record.exec) if record.exec else 'not recorded'}")
    lines.append(f"reachlens:  {record.reachlens_version or 'unknown'}")
    lines.append(f"command:    {' '.join(record.command) if record.command else '-'}")
    if summary is None:
        lines.append(f"summary:    none ({'the run has not finished' if record.status != 'failed' else 'the run failed'})")
    else:
        lines.append("summary:")
        for key, value in summary.items():
            if key in ("model", "model_fingerprint", "data", "protocol_hash", "task"):
                continue  # in the header already
            # a number the run could not define is stored as null (a summary holds no NaN)
            lines.append(f"  {key}: {'undefined' if value is None else _value(value)}")
    return "\n".join(lines)
