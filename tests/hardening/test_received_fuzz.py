"""A fuzz over run directories someone sent you (issue 36, third pass, "What it must show").

Hypothesis draws hostile edits to a copy of a finished audit, received inside a folder that also holds a victim
file and a victim folder: a ``.rewrite.json`` journal naming moves in and out of the run, record fields that
become folder names (a format-0 record, so ``convert`` renames by them), files replaced by symlinks (out of the
run, to ``/dev/zero``, into a loop) and by FIFOs, and planted payload and temporary files. Each directory then
goes through ``show``, ``report``, ``convert``, ``rescore`` and a resume. Whatever it holds: no file outside it is
created, moved or changed (a snapshot of the folder around it, taken before and after), nothing blocks (a FIFO is
never opened), and nothing is a traceback (a refusal is one error line, exit 2; the resume raises only a
``ReachlensError``). The victim folder looks like a run's ``parts/`` (a link to it makes a resume read and
clear its parts there). Derandomized, so CI sees the same examples every run, and the reproductions of the issue
are given as explicit examples besides the drawn ones.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

import pytest
from hostile import snapshot
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reachlens.errors import ReachlensError

FILES = ["run.json", "summary.json", "questions.parquet", "samples.parquet", "payload", ".rewrite.json",
         "report.html", "report.md", "parts", "parts/0.0.questions.parquet", "parts/0.0.samples.parquet", "base",
         "sets.json"]
"""Names in the run a hostile edit replaces or plants."""
PATHS = ["payload", "../victim.txt", "../victim", "../victim/inner.txt", "..", ".", "/", "run.json", "questions.parquet",
         ".run.json.1.0123abcd.tmp", ".summary.json.1.0123abcd.tmp", "../../planted", "x/../../planted", "",
         "base", "parts", "\x00", "a" * 300, "~/.bashrc", "/dev/zero", 7, None, ["run.json"]]
"""What a journal or a record names: plain names, names of the run's own files, paths out of it, junk."""

moves = st.one_of(
    st.lists(st.lists(st.sampled_from(PATHS), min_size=2, max_size=2), min_size=1, max_size=3),
    st.sampled_from(["not a list", {"moves": 1}, [[1, 2, 3]]]),
)
targets = st.sampled_from(["../victim.txt", "../victim", "/dev/zero", ".", "..", "../..", "nowhere", "run.json"])
edit = st.one_of(
    st.tuples(st.just("journal"), moves),
    st.tuples(st.just("link"), st.tuples(st.sampled_from(FILES), targets)),
    st.tuples(st.just("fifo"), st.sampled_from(FILES)),
    st.tuples(st.just("remove"), st.sampled_from(FILES)),
    st.tuples(st.just("record"), st.tuples(st.sampled_from(["options.max_new_tokens", "options.base_dir",
                                                            "options.trained_dir", "options.name", "kind",
                                                            "format_version", "model.spec", "status"]),
                                           st.sampled_from(PATHS + ["length_control", "temperature_control",
                                                                    "training_audit", "running", "...delete"]))),
    st.tuples(st.just("plant"), st.sampled_from([".run.json.9.deadbeef.tmp", "payload", "base/run.json",
                                                  "parts/0.1.questions.parquet", "T0.6/questions.parquet"])),
)
UNFINISHED = [("record", ("status", "running")), ("remove", "summary.json")]
"""A run as a kill leaves it: a resume finishes it, writing its tables and clearing its parts."""


def _set(record: dict, dotted: str, value) -> None:
    *head, last = dotted.split(".")
    for key in head:
        record = record.setdefault(key, {}) if isinstance(record.get(key, {}), dict) else {}
    if value == "...delete":
        record.pop(last, None)
    else:
        record[last] = value


def _replace(run: Path, name: str) -> Path | None:
    """``run/name`` emptied for an edit (None when a folder above it is a link or a FIFO an earlier edit made: the
    test itself never writes through one)."""
    p = run / name
    for above in [q for q in p.parents if run in q.parents]:
        if os.path.lexists(above) and (above.is_symlink() or not above.is_dir()):
            return None
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif os.path.lexists(p):
        p.unlink()
    return p


def _apply(run: Path, edits) -> None:
    for what, arg in edits:
        if what == "record":
            path = run / "run.json"
            if path.is_file() and not path.is_symlink():
                record = json.loads(path.read_text())
                _set(record, *arg)
                path.write_text(json.dumps(record))
            continue
        name = {"journal": ".rewrite.json", "link": arg[0] if what == "link" else None}.get(what, arg)
        p = _replace(run, name)
        if p is None:
            continue
        if what == "journal":
            p.write_text(json.dumps({"moves": arg}))
        elif what == "link":
            p.symlink_to(arg[1])
        elif what == "fifo":
            os.mkfifo(p)
        elif what == "remove":
            pass
        else:
            p.write_text("echo PWNED\n")


def _cli(*argv) -> tuple[int, str]:
    from reachlens.cli import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, err.getvalue()


def _release_fifos(run: Path) -> None:
    """Open every FIFO in ``run`` for writing (non-blocking): a reader blocked on one returns."""
    for root, _, files in os.walk(run):
        for name in files:
            p = Path(root) / name
            if stat.S_ISFIFO(os.lstat(p).st_mode):
                with contextlib.suppress(OSError):
                    os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK))


def _bounded(fn, run: Path, seconds: float = 300):
    """``fn()`` in a thread; still running after ``seconds`` (blocked on a FIFO) is a failure."""
    box: dict = {}

    def go() -> None:
        try:
            box["out"] = fn()
        except BaseException as err:  # noqa: BLE001 - handed back to the test
            box["err"] = err

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        _release_fifos(run)
        thread.join(30)
        pytest.fail(f"{fn} blocked (on a FIFO?) for {seconds} s")
    if "err" in box:
        raise box["err"]
    return box["out"]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("received-fuzz")


@settings(max_examples=24, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(edits=st.lists(edit, min_size=1, max_size=4))
@example(edits=[("link", ("parts", "../victim")), ("remove", "questions.parquet"), ("remove", "samples.parquet"),
                *UNFINISHED])  # a killed run whose parts/ links out: a resume would read them there, then clear them
@example(edits=[("fifo", "report.html")])  # report would block opening it
@example(edits=[("fifo", "questions.parquet"), *UNFINISHED])
@example(edits=[("link", ("summary.json", "/dev/zero"))])  # show would read until memory ran out
@example(edits=[("link", ("run.json", "../victim.txt")), ("link", ("report.md", "../victim.txt"))])
@example(edits=[("record", ("kind", "length_control")), ("record", ("format_version", "...delete")),
                ("record", ("options.max_new_tokens", "x/../../planted")), ("plant", "base/run.json")])
def test_a_received_directory_changes_nothing_outside_itself(edits, finished_audit, tiny_model, audit_setup,
                                                             scratch) -> None:
    from reachlens import audit

    parent = Path(tempfile.mkdtemp(dir=scratch))
    (parent / "victim.txt").write_text("the user's own file\n")
    (parent / "victim").mkdir()
    (parent / "victim" / "inner.txt").write_text("inner\n")
    for table in ("questions", "samples"):  # a victim folder that looks like a run's parts/
        shutil.copy(finished_audit / f"{table}.parquet", parent / "victim" / f"00000.{table}.parquet")
    run = Path(shutil.copytree(finished_audit, parent / "received" / "run"))
    _apply(run, edits)
    before = snapshot(parent, run)

    for argv in (["show", run], ["report", run], ["convert", run], ["rescore", run, "--grader", "numeric"]):
        code, err = _bounded(lambda argv=argv: _cli(*argv), run)
        assert code in (0, 2), (argv, err)
        assert "Traceback" not in err and len([ln for ln in err.splitlines() if "error:" in ln]) == (code == 2), err
        assert snapshot(parent, run) == before, argv

    task, protocol, ex = audit_setup
    with contextlib.suppress(ReachlensError):  # a refusal is a user error; anything else fails the test
        _bounded(lambda: audit(tiny_model, task, protocol, out=run, exec_config=ex), run)
    assert snapshot(parent, run) == before, "resume"
    assert (parent / "victim.txt").read_text() == "the user's own file\n"
