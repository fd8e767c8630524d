"""``reachlens show DIR``: the record (run.json) and summary of any run directory.

Any run a reachlens command wrote: an audit, a comparison (``compare --out``), a routing run, a
recognition run, a causal sweep, a control, a training audit (``reachlens demo``). It prints the run
format's version and the run's status: ``complete``; ``running`` while a writer holds it; ``interrupted``
when it was stopped, or killed outright; ``failed`` when an error stopped it.

A run may come from someone else: every string it prints (the record's and the summary's) goes through
:func:`reachlens.escape.visible`, so a control byte (an OSC or CSI sequence, a carriage return, a newline that
would fake a line) is printed as its escape, never acted on by the terminal.
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
    from reachlens.cli._common import echo
    from reachlens.store import RunDir, read_record

    record = read_record(args.dir)
    echo(format_run(record, RunDir(args.dir).summary()))
    return 0


def _value(v) -> str:
    """A stored value on one line, every control character escaped."""
    from reachlens.escape import visible

    if v is None:
        return "-"
    if isinstance(v, float):
        return "undefined" if v != v else f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{visible(k)}={_value(x)}" for k, x in v.items()) if v else "-"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return visible(v)


_MAX_ROWS = 40


def _cell(x) -> str:
    """One table cell: a number to 4 significant digits, a pair as an interval, a mapping of mappings by its size."""
    if isinstance(x, (list, tuple)) and len(x) == 2 and all(isinstance(y, (int, float)) or y is None for y in x):
        return f"[{_value(x[0])}, {_value(x[1])}]"
    if isinstance(x, dict) and x and all(isinstance(y, dict) for y in x.values()):
        return f"{len(x)} entries"
    return _value(x).replace("|", "\\|")


def _table_lines(key: str, value) -> list[str]:
    """A summary entry that is a list of records (or a mapping of names to records) as an indented table under its
    key, at most :data:`_MAX_ROWS` rows; nothing for any other value (printed on one line)."""
    if isinstance(value, dict) and value and all(isinstance(x, dict) for x in value.values()):
        records = [{"name": name, **x} for name, x in value.items()]
    elif isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        records = value
    else:
        return []
    columns = list(dict.fromkeys(c for r in records for c in r))
    lines = [f"  {_value(key)}:", "    | " + " | ".join(_value(c) for c in columns) + " |",
             "    |" + "---|" * len(columns)]
    lines += ["    | " + " | ".join(_cell(r.get(c)) for c in columns) + " |" for r in records[:_MAX_ROWS]]
    if len(records) > _MAX_ROWS:
        lines.append(f"    ... {len(records) - _MAX_ROWS} more rows (reachlens report DIR shows them all)")
    return lines


def _model(model: dict) -> str:
    if "spec" in model or "fingerprint" in model:
        fp = str(model.get("fingerprint"))
        return f"{_value(model.get('spec'))} ({_value(fp[:23])}{'...' if len(fp) > 23 else ''})"
    return "; ".join(f"{_value(role)}: {_model(m) if isinstance(m, dict) else _value(m)}"
                     for role, m in model.items()) or "-"


def reach_lines(s: dict) -> list[str]:
    """An audit's (a routing run's) reach beside its lucky-guess null and, when trace-graded, its verified reach (one
    line each). A probe run's null is a column of its ``probes`` and ``unions`` tables (``O_null``, ...)."""
    def num(key: str) -> str:
        x = s.get(key)
        return "undefined" if not isinstance(x, (int, float)) or x != x else f"{x:.3f}"

    if "O_K" not in s or "O_K_null" not in s:
        return []
    k = s.get("k", s.get("budget", "K"))  # a routing run's K is its budget
    ci = s.get("O_K_minus_null_ci") or [None, None]
    lines = [f"  reach:    O_{_value(k)}={num('O_K')}  lucky-guess null O_{_value(k)}^null={num('O_K_null')} (95th pct "
             f"{num('O_K_null_p95')})  O_K - null={num('O_K_minus_null')} [{_value(ci[0])}, {_value(ci[1])}]"]
    if isinstance(s.get("O_K_trace"), (int, float)) and s["O_K_trace"] == s["O_K_trace"]:
        more = "" if "maj_K_trace" not in s else (  # an audit's; a routing run has D^trace and O_K^trace alone
            f"  maj^trace={num('maj_K_trace')}  reached only through invalid solutions={num('O_K_minus_O_K_trace')}  "
            f"checkable samples={num('checkable_share')} ({_value(s.get('trace_grader'))})")
        lines.append(f"  verified: D^trace={num('D_trace')}  O_{_value(k)}^trace={num('O_K_trace')}{more}")
    else:
        lines.append("  verified: not trace-graded (`reachlens rescore DIR --trace` adds D^trace, O_K^trace)")
    return lines


def study_lines(s: dict) -> list[str]:
    """A study's summary (``reachlens demo``, ``report``): each checkpoint's reach beside its null and verified reach
    (:func:`reach_lines`), each pair's delta by answers and by verified solutions."""
    def delta(row: dict, key: str, p: str) -> str:
        x, ci = row.get(f"delta_{key}"), row.get(f"delta_{key}_ci") or [row.get(f"delta_{key}_lo"), row.get(f"delta_{key}_hi")]
        if not isinstance(x, (int, float)) or x != x:
            return "undefined"
        return f"{x:+.3f} [{_value(ci[0])}, {_value(ci[1])}] (McNemar p {_value(row.get(p))})"

    audits, pairs = s.get("audits"), s.get("pairs")
    if not isinstance(audits, dict) or not isinstance(pairs, dict):
        return []
    lines = []
    for name, a in audits.items():
        if isinstance(a, dict) and (more := reach_lines(a)):
            lines += [f"  {_value(name)}:"] + ["  " + line for line in more]
    for name, row in pairs.items():
        if isinstance(row, dict):
            lines.append(f"  {_value(name)}: delta O_K={delta(row, 'O_K', 'p_reachable')}  "
                         f"delta O_K^trace={delta(row, 'O_K_trace', 'p_O_K_trace')}")
    return lines


def format_run(record, summary: dict | None) -> str:
    """The lines ``reachlens show`` prints for one run."""
    from reachlens.store import FORMAT_VERSION

    v = _value
    ended = f", finished {v(record.finished)}" if record.finished else ""
    lines = [f"kind:       {v(record.kind)}", f"format:     reachlens-run, version {FORMAT_VERSION}",
             f"status:     {v(record.status)} (started {v(record.started)}{ended})",
             f"model:      {_model(record.model)}"]
    if record.protocol is not None:
        p = record.protocol
        stop = "(the task's)" if p.stop is None else v(repr(list(p.stop)))
        grader = v(p.grader) if p.grader else "(the task's)"
        lines.append(f"protocol:   task={v(p.task)} split={v(p.split)} k={v(p.k)} temperature={v(p.temperature)} "
                     f"top_p={v(p.top_p)} max_new_tokens={v(p.max_new_tokens)} prompt_format={v(p.prompt_format)} "
                     f"stop={stop} grader={grader} seed={v(p.seed)} (hash {p.hash})")
        if p.chat_template is not None or p.system is not None:
            system = "(the template's own)" if p.system is None else v(repr(p.system))
            lines.append(f"{'':<12}chat template {v(p.chat_template or '(not bound)')}, system turn {system}")
    for key, value in record.options.items():
        lines.append(f"{'options:' if key == next(iter(record.options)) else '':<12}{v(key)}: {v(value)}")
    data = record.data or {}
    lines.append(f"data:       {v({k: (x[:12] + '...' if isinstance(x, str) and len(x) == 64 else x) for k, x in data.items()}) if data else 'unknown'}")
    lines.append(f"exec:       {v(record.exec) if record.exec else 'not recorded'}")
    lines.append(f"reachlens:  {v(record.reachlens_version or 'unknown')}")
    lines.append(f"command:    {v(' '.join(record.command)) if record.command else '-'}")
    if summary is None:
        lines.append(f"summary:    none ({'the run has not finished' if record.status != 'failed' else 'the run failed'})")
    else:
        lines.append("summary:")
        lines += reach_lines(summary) + study_lines(summary)
        for key, value in summary.items():
            if key in ("model", "model_fingerprint", "data", "protocol_hash", "task"):
                continue  # in the header already
            table = _table_lines(key, value)
            # a number the run could not define is stored as null (a summary holds no NaN)
            lines += table or [f"  {v(key)}: {'undefined' if value is None else v(value)}"]
    return "\n".join(lines)
