"""Whether two run directories hold the same results: every run under each (by its path relative to the root) read
through :func:`~reachlens.read_run`, every table compared with pandas' ``assert_frame_equal`` and every summary
compared as JSON, one verdict line each.

Used for issue 37's "outputs must not change": a run made by the code before a change, converted with
``reachlens convert``, against the same run made by the code after it::

    python experiments/before_after.py runs/before/demo runs/after/demo --ignore wall_seconds

Exit status 0 when every run, table and summary is equal, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd
from pandas.testing import assert_frame_equal

from reachlens import list_runs, read_run

__all__ = ["compare_trees", "main"]


def _runs(root: Path) -> dict[str, Path]:
    return {str(info.path.relative_to(root)) or ".": info.path for info in list_runs(root)}


def _plain(value):
    """``value`` with NaN made comparable (JSON has no NaN; two NaN summaries are equal)."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _compare_run(name: str, a, b, ignore: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(what, verdict) for each table and the summary of two runs."""
    out: list[tuple[str, str]] = []
    ta, tb = a.tables(), b.tables()
    for table in sorted(set(ta) | set(tb)):
        if table not in ta or table not in tb:
            out.append((f"{name}:{table}", f"only in {'A' if table in ta else 'B'}"))
            continue
        try:
            assert_frame_equal(ta[table], tb[table])
            out.append((f"{name}:{table}", f"equal ({len(ta[table])} rows x {ta[table].shape[1]} columns)"))
        except AssertionError as err:
            out.append((f"{name}:{table}", "DIFFER: " + " ".join(str(err).split())[:300]))
    fa, fb = _flat(a.summary()), _flat(b.summary())
    differ = sorted(k for k in set(fa) | set(fb) if fa.get(k, "<absent>") != fb.get(k, "<absent>")
                    and not k.startswith(ignore))
    shown = "; ".join(f"{k}: {fa.get(k, '<absent>')} vs {fb.get(k, '<absent>')}" for k in differ[:6])
    out.append((f"{name}:summary", f"DIFFER at {len(differ)} keys: {shown}" if differ else "equal"))
    return out


def _flat(summary: dict, prefix: str = "") -> dict[str, str]:
    """A summary's leaves by dotted key, each as JSON (NaN as "NaN")."""
    out: dict[str, str] = {}
    for key, value in summary.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = json.dumps(_plain(value), sort_keys=True, default=str)
    return out


def compare_trees(root_a: Path, root_b: Path, ignore: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(what, verdict) for every run, table and summary under two roots; summary keys starting with one of
    ``ignore`` (a measured time) are not compared."""
    runs_a, runs_b = _runs(root_a), _runs(root_b)
    out: list[tuple[str, str]] = []
    for name in sorted(set(runs_a) | set(runs_b)):
        if name not in runs_a or name not in runs_b:
            out.append((name, f"run only in {'A' if name in runs_a else 'B'}"))
            continue
        a, b = read_run(runs_a[name]), read_run(runs_b[name])
        if a.kind != b.kind:
            out.append((name, f"DIFFER: kind {a.kind} vs {b.kind}"))
            continue
        out.extend(_compare_run(f"{name} ({a.kind})", a, b, ignore))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, help="a run directory (or a folder of runs)")
    parser.add_argument("b", type=Path, help="the run directory to compare it with")
    parser.add_argument("--ignore", action="append", default=[], metavar="KEY",
                        help="a summary key (dotted, a prefix) not compared, e.g. wall_seconds (repeatable)")
    args = parser.parse_args(argv)
    pd.set_option("display.width", 200)
    verdicts = compare_trees(args.a, args.b, tuple(args.ignore))
    for what, verdict in verdicts:
        print(f"{what}: {verdict}")
    same = all(v.startswith("equal") for _, v in verdicts) and bool(verdicts)
    print("ALL EQUAL" if same else "NOT EQUAL")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
