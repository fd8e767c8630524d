"""Every decoding command's progress moves while it decodes (issue 53, the rest of finding 2).

Before: ``reachlens control length`` on SmolLM2-135M-Instruct printed nothing for 3 minutes, and so did
``recognize``, ``silence``, ``steer``, ``units`` and ``elicit`` until their tables. Now each shows the line of
:mod:`reachlens.cli._progress` (as ``audit``, ``probe`` and ``route`` do): the tokens decoded, the rows finished, the
rate and the time the decode has left. Each engine step takes 10 s of a fake clock (``slow_steps``), so the log
(stderr is no terminal here) gets a plain line every 30 s of that work: lines written while rows were still
decoding, their token counts rising, then the closing line with every row done.

The reference for the rows: each command's own tables, read back from its run directory (rows decoded = rows in
its tables), and the token counts bounded by rows x max_new_tokens.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from progress_clock import slow_steps  # noqa: F401  (the fixture)

from reachlens.cli.main import main

MAX_NEW = 12


def _progress(err: str, label: str) -> list[tuple[int, int, int]]:
    """(tokens, rows finished, rows) of every progress line of ``label`` on stderr, in order."""
    found = []
    for line in err.splitlines():
        if line.startswith(label + ":"):
            m = re.search(r"([\d,]+) tokens, ([\d,]+)/([\d,]+) rows done", line)
            if m:
                found.append(tuple(int(g.replace(",", "")) for g in m.groups()))
    return found


def _moves(err: str, label: str) -> tuple[int, int, int]:
    """Lines of ``label`` while rows were decoding, with rising token counts, then a closing line with every row
    done; that closing line's (tokens, finished, rows)."""
    lines = _progress(err, label)
    assert len(lines) >= 2, err
    during = [ln for ln in lines[:-1] if ln[1] < ln[2]]
    assert during, lines  # written before the decode ended, not only at its end
    assert during[0][0] > 0 and [t for t, _, _ in lines] == sorted(t for t, _, _ in lines), lines
    tokens, finished, rows = lines[-1]
    assert finished == rows and tokens > during[0][0], lines
    return lines[-1]


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """The zoo base's recognition of arith_mc (6 questions) and a failure set and healthy panel of 2 each (the
    causal commands' input, made up as the families' CLI test makes it)."""
    root = tmp_path_factory.mktemp("rec")
    assert main(["recognize", "zoo:base", "--task", "arith_mc", "--n", "6", "--max-new-tokens", str(MAX_NEW),
                 "--min-failures", "1", "--out", str(root / "rec")]) in (0, 2)
    ids = pd.read_parquet(root / "rec" / "questions.parquet")["question_id"].tolist()
    made = {**json.loads((root / "rec" / "sets.json").read_text()), "failure": ids[:2], "healthy": ids[2:4]}
    (root / "sets.json").write_text(json.dumps(made))
    return root / "sets.json"


def test_recognize_shows_its_decode_moving(tmp_path, capfd, slow_steps):
    code = main(["recognize", "zoo:base", "--task", "arith_mc", "--n", "4", "--max-new-tokens", str(MAX_NEW),
                 "--min-failures", "1", "--out", str(tmp_path / "rec")])
    err = capfd.readouterr().err
    assert code in (0, 2), err  # 2: fewer failures than the rule asks (the tables are written)
    tokens, _, rows = _moves(err, "recognize zoo:base")
    assert rows == len(pd.read_parquet(tmp_path / "rec" / "questions.parquet")) == 4 and tokens <= rows * MAX_NEW
    assert "recognize zoo:base: 4/4 questions, " in err  # the job's finished questions, beside the decode's count


@pytest.mark.parametrize("command,extra", [
    ("silence", ["--layers", "0,1", "--components", "mlp"]),
    ("steer", ["--layer", "1", "--alphas", "0,1"]),
    ("units", ["--layer", "1", "--units", "4"]),
])
def test_a_causal_sweep_shows_its_decode_moving(command, extra, sets, tmp_path, capfd, slow_steps):
    capfd.readouterr()
    code = main([command, "zoo:base", "--sets", str(sets), *extra, "--out", str(tmp_path / command)])
    err = capfd.readouterr().err
    assert code == 0, err
    label = {"silence": "silence zoo:base", "steer": "steer zoo:base L1 mlp_out", "units": "units zoo:base L1"}
    _, _, rows = _moves(err, label[command])
    decoded = pd.read_parquet(tmp_path / command / f"{command}_per_question.parquet")
    assert rows == len(decoded)  # one greedy row per question and condition, all in the one decode


@pytest.mark.parametrize("kind,extra", [("length", ["--max-new-tokens", "48"]),
                                        ("temperature", ["--temperatures", "1.2"])])
def test_a_control_shows_its_reruns_moving(kind, extra, zoo_audit_dirs, tmp_path, capfd, slow_steps):
    audits = zoo_audit_dirs
    capfd.readouterr()
    code = main(["control", kind, str(audits / "base"), str(audits / "sft"), *extra, "--out", str(tmp_path / kind)])
    err = capfd.readouterr().err
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if ln.startswith(f"control {kind}:")]
    tokens, _, rows = _moves(err, f"control {kind}")
    table = pd.read_parquet(tmp_path / kind / f"{kind}_control.parquet")
    # the reruns' rows: each question's K=4 samples and its greedy row; length: both audits' 10 questions again
    questions = 2 * 10 if kind == "length" else int(table["n_reprobed"].iloc[0])
    assert questions > 0 and rows == questions * 5 and tokens <= rows * max(48, 40), table
    assert f"control {kind}: {questions}/{questions} q" in lines[-1]


def test_elicit_shows_its_steps_and_its_audits_decoding(tmp_path, capfd, slow_steps):
    code = main(["elicit", "zoo:locked", "--task", "arith_hard", "--n", "3", "--k", "2", "--max-new-tokens", "48",
                 "--demos", "1", "--control", "zoo:base", "--steps", "1", "--out", str(tmp_path / "eli")])
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "fine-tune model on 1 demonstration(s)" in out and "audit 4 of 4 models" in out  # each step's line
    tokens, _, rows = _moves(err, "elicit zoo:locked")
    assert rows == 4 * 3 * 3 and tokens <= rows * 48  # 4 models x 3 questions x (K=2 samples + the greedy row)


class _Events:
    """A listener that keeps every decode event, and the slices' progress between them."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []

    def decode(self, rows, max_new_tokens):
        self.seen.append(("decode", rows, max_new_tokens))

    def step(self, tokens, finished, unused):
        self.seen.append(("step", tokens, finished))

    def done(self, done, total):
        self.seen.append(("done", done, total))

    def totals(self) -> tuple[int, int, int]:
        """(rows started, tokens, rows finished) over every event."""
        return (sum(e[1] for e in self.seen if e[0] == "decode"), sum(e[1] for e in self.seen if e[0] == "step"),
                sum(e[2] for e in self.seen if e[0] == "step"))


def test_a_pool_of_workers_reports_its_decodes_steps_to_this_process(tmp_path):
    """``--workers 2``: the decodes run in two other processes, and their steps reach this process' listeners as they
    happen (before their slice is done), counting what the same audit decoded in this process counts."""
    from reachlens import Protocol, load_task
    from reachlens.engine.progress import listening
    from reachlens.execution import ExecConfig
    from reachlens.studies import audit

    task, protocol = load_task("arith", n=4), Protocol("arith", k=4, temperature=1.0, max_new_tokens=24)
    here, pooled = _Events(), _Events()
    with listening(here):
        audit("zoo:base", task, protocol, exec_config=ExecConfig(max_batch_rows=10))
    with listening(pooled):
        audit("zoo:base", task, protocol, out=tmp_path / "a", progress=pooled.done,
              exec_config=ExecConfig(max_batch_rows=10, workers=2))
    assert pooled.totals() == here.totals() and here.totals()[0] == 4 * 5
    first_slice = next(i for i, e in enumerate(pooled.seen) if e[0] == "done" and e[1] > 0)
    assert any(e[0] == "step" for e in pooled.seen[:first_slice]), pooled.seen


def test_demo_shows_its_decodes_moving(tmp_path, capfd, monkeypatch):
    """``reachlens demo`` (two worker processes): a ``decoding:`` line of the workers' tokens between the audits'
    lines, written while rows were decoding. The board's clock advances 10 s a reading."""
    from reachlens.studies import _progress as board_module

    now = [0.0]

    def clock():
        now[0] += 10.0
        return now[0]

    monkeypatch.setattr(board_module, "perf_counter", clock)
    code = main(["demo", "--out", str(tmp_path / "demo"), "--n", "2", "--k", "2", "--extended-k", "4",
                 "--max-new-tokens", "24", "--workers", "2"])
    err = capfd.readouterr().err
    assert code == 0, err
    lines = _progress(err, "decoding")
    during = [ln for ln in lines if ln[1] < ln[2]]
    assert during and during[0][0] > 0, err
    assert [t for t, _, _ in lines] == sorted(t for t, _, _ in lines)
