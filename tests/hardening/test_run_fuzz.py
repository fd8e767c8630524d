"""A fuzz test over run records: wrong types, hostile strings and escape sequences in run.json and summary.json,
through ``show``, ``report`` and a resume (issue 25, second pass).

Whatever a record holds: no traceback (a refusal is one error line, exit 2); nothing on the terminal holds a raw
control byte; a page and its Markdown hold no payload as markup and no control byte; a resume either refuses in
one line or gives back the very audit the directory held. Hypothesis draws the edits (derandomized, so CI sees the
same examples every run); one tiny finished audit is made per session and copied for each example.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import tempfile
from pathlib import Path

import pytest
from hostile import CONTROL, ESC, IMG, SCRIPT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pandas.testing import assert_frame_equal

from reachlens.errors import ReachlensError

MARK = "<x-pwn>"
"""A tag no page of reachlens writes: found raw in a page or its Markdown, a string went in unescaped."""
DELETE = object()

FIELDS = [
    "kind", "status", "started", "finished", "protocol", "options", "model", "data", "exec", "reachlens_version",
    "command", "protocol_hash", "task_source", "protocol.task", "protocol.split", "protocol.k", "protocol.temperature",
    "protocol.seed", "protocol.prompt_format", "protocol.stop", "protocol.grader", "protocol.system", "model.spec",
    "model.fingerprint", "data.sha256", "data.generator", "exec.dtype", "exec.device", "exec.max_batch_rows",
    "options.note", "command.0", "summary.model", "summary.D", "summary.pass_at_k", "summary.n",
]
"""Where an edit goes: a field of run.json (dotted: inside a field; ``command.0``: the command's first word), or of
summary.json (``summary.``)."""

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
hostile_text = st.one_of(
    st.sampled_from([SCRIPT, IMG, ESC, "a|b\nc", "\r\n", "=HYPERLINK(1)", "../../x", "\u202e", "audit", "complete",
                     "2026-01-01T00:00:00+00:00", "float32", "cpu", "zoo:base"]),
    _text.map(lambda s: f"{MARK}{s}\x1b[2J\x9b|\n"),
)
values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), hostile_text),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.one_of(_text, hostile_text), inner, max_size=3)),
    max_leaves=5,
)
edits = st.lists(st.tuples(st.sampled_from(FIELDS), st.one_of(values, st.just(DELETE))), min_size=1, max_size=3)


def _apply(d: dict, path: list[str], value) -> None:
    for part in path[:-1]:
        if isinstance(d, list):
            return
        if not isinstance(d.get(part), (dict, list)):
            d[part] = {}
        d = d[part]
    last = path[-1]
    if isinstance(d, list):
        if d:
            d[0] = value if value is not DELETE else None
    elif value is DELETE:
        d.pop(last, None)
    else:
        d[last] = value


def _run(*argv) -> tuple[int, str, str]:
    from reachlens.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def _check_terminal(code: int, out: str, err: str) -> None:
    assert code in (0, 2), (code, err)
    assert not CONTROL & set(out + err), repr(out + err)
    if code == 2:
        assert len([ln for ln in err.splitlines() if "error:" in ln]) == 1, err


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(edits=edits)
def test_any_record_is_shown_reported_and_resumed_without_a_traceback_or_an_injection(
        edits, finished_audit, tiny_model, audit_setup, scratch) -> None:
    from plotly.offline import get_plotlyjs

    from reachlens import audit
    from reachlens.store import read_run

    run = Path(tempfile.mkdtemp(dir=scratch)) / "run"
    shutil.copytree(finished_audit, run)
    record, summary = json.loads((run / "run.json").read_text()), json.loads((run / "summary.json").read_text())
    for field, value in edits:
        target, path = (summary, field.split(".")[1:]) if field.startswith("summary.") else (record, field.split("."))
        if path[0] == "command" and len(path) > 1:
            path = ["command", "0"] if isinstance(record.get("command"), list) else ["command"]
        _apply(target, path, value)
    (run / "run.json").write_text(json.dumps(record, allow_nan=True))
    (run / "summary.json").write_text(json.dumps(summary, allow_nan=True))

    _check_terminal(*_run("show", run))

    code, out, err = _run("report", run, "--out", run / "report")
    _check_terminal(code, out, err)
    if code == 0:
        page = (run / "report" / "report.html").read_text().replace(get_plotlyjs(), "")
        md = (run / "report" / "report.md").read_text()
        for text in (page, md):
            assert MARK not in text and SCRIPT not in text and IMG not in text and not CONTROL & set(text)

    task, protocol, ex = audit_setup
    try:
        resumed = audit(tiny_model, task, protocol, out=run, exec_config=ex)
    except ReachlensError as err:
        assert "\n" not in str(err).strip() or "Traceback" not in str(err)
        return
    held = read_run(finished_audit)
    assert_frame_equal(resumed.questions, held.questions)
    assert_frame_equal(resumed.samples, held.samples)
    assert math.isclose(resumed.summary()["O_K"], held.summary()["O_K"])
