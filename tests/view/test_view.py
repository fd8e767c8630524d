"""The viewer without a browser: its filter language, its lazy reads, its paired figures against `reachlens compare`
on the same subset, and its server's refusals (issue 58)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reachlens import Protocol
from reachlens.cli import main
from reachlens.errors import ReachlensError
from reachlens.store import read_run
from reachlens.studies import AuditResult, compare
from reachlens.tasks import load_task
from reachlens.view import CSP, View, matches, paired_figures, questions_of, select, serve
from reachlens.view.samples import BATCH_ROWS, RowIndex

P = Protocol("arith", k=6, temperature=1.0, max_new_tokens=12)


def _audit(rng: np.random.Generator, n: int, k: int, spec: str, ids: list[str] | None = None) -> AuditResult:
    """An audit made by hand with random grades: question i's samples correct with a rate drawn per question."""
    qids = ids or [f"q{i}" for i in range(n)]
    rate = rng.uniform(0, 1, len(qids)) ** 2
    correct = rng.uniform(0, 1, (len(qids), k)) < rate[:, None]
    realized = rng.uniform(0, 1, len(qids)) < rate
    samples = pd.DataFrame([{"question_id": q, "candidate_idx": j, "text": f"{q} sample {j}: {int(c)}",
                             "answer": "7" if c else str(j % 3), "correct": bool(c), "scored": True,
                             "finish_reason": "stop", "n_tokens": 3, "mean_logprob": -0.5}
                            for q, row in zip(qids, correct) for j, c in enumerate(row)])
    n_correct = correct.sum(axis=1)
    questions = pd.DataFrame({
        "question_id": qids, "realized": realized, "reachable": n_correct > 0, "n_correct": n_correct,
        "n_scored": k, "k": k, "propensity": n_correct / k, "deployed_answer": np.where(realized, "7", "3"),
        "deployed_text": [f"deployed {q}" for q in qids], "deployed_scored": True, "deployed_finish": "stop",
        "gold": "7", "labels": None})
    return AuditResult.new(P.with_k(k).resolved(load_task("arith", n=1)), {"spec": spec, "fingerprint": spec},
                           questions, samples, {"generator": "hand"})


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Path:
    """Two audits of 60 questions and their comparison, saved side by side."""
    root = tmp_path_factory.mktemp("pair")
    rng = np.random.default_rng(5)
    _audit(rng, 60, 6, "zoo:base").save(root / "base")
    _audit(rng, 60, 6, "zoo:grpo").save(root / "grpo")
    assert main(["compare", str(root / "base"), str(root / "grpo"), "--out", str(root / "cmp")]) == 0
    return root


def test_the_filter_reads_its_grammar_and_nothing_else() -> None:
    df = pd.DataFrame({"fate": ["gained", "kept", "gained"], "n": [2, 0, 0], "ok": [True, False, True]})
    assert matches(df, 'fate == "gained" and n >= 1').tolist() == [True, False, False]
    assert matches(df, 'not ok or fate in ["kept"]').tolist() == [False, True, False]
    assert matches(df, "(n > -1) and (fate != 'kept')").tolist() == [True, False, True]
    assert matches(df, "").tolist() == [True] * 3
    for bad, words in [("__import__('os').system('x')", "not allowed"), ("fate.upper() == 'X'", "not allowed"),
                       ("nope == 1", "'nope', which is no column"), ("fate ==", "does not parse"),
                       ("fate[0] == 'g'", "not allowed"), ("fate is 'x'", "'is' is not allowed"),
                       ("n >= 'a'", "different types")]:
        with pytest.raises(ReachlensError, match=words.replace("(", r"\(")):
            matches(df, bad)


def test_the_row_index_reads_one_question_s_rows_as_pandas_does(tmp_path) -> None:
    rows = [{"question_id": f"q{i}", "candidate_idx": j, "text": f"t{i}.{j}"} for i in range(7) for j in range(900)]
    df = pd.DataFrame(rows)
    df.to_parquet(tmp_path / "t.parquet", index=False, row_group_size=2500)  # rows of one question across groups
    index = RowIndex(tmp_path / "t.parquet")
    assert 900 < BATCH_ROWS * 2  # a question spans batches and row groups here
    for q in ("q0", "q3", "q6"):
        got = index.rows(q, ["candidate_idx", "text"])
        want = df[df["question_id"] == q][["candidate_idx", "text"]].reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want)
    assert index.count("q4") == 900 and len(index.rows("absent")) == 0


def test_the_row_index_finds_every_run_of_a_question_across_batches(tmp_path, monkeypatch) -> None:
    from reachlens.view import samples

    ids = (["q1"] * 5 + ["q2"] * 3 + ["q1"] * 4 + ["q3"] * 7 + ["q2"] * 2) * 5  # 105 rows, runs cut anywhere
    df = pd.DataFrame({"question_id": ids, "candidate_idx": range(len(ids))})
    df.to_parquet(tmp_path / "t.parquet", index=False, row_group_size=40)
    for batch in (1, 2):  # the index streams batches of BATCH_ROWS rows: 1 and 2 here, in groups of 40
        monkeypatch.setattr(samples, "BATCH_ROWS", batch)
        index = RowIndex(tmp_path / "t.parquet")
        for q in ("q1", "q2", "q3"):
            want = df[df["question_id"] == q]
            assert index.count(q) == len(want)
            assert index.rows(q, ["candidate_idx"])["candidate_idx"].tolist() == want["candidate_idx"].tolist()


def test_the_list_comes_before_the_question_texts_and_fills_them_in(pair, monkeypatch) -> None:
    import threading

    from reachlens.view import render, source

    gate = threading.Event()

    def slow_texts(record):  # the task's rebuild, held until the gate opens
        gate.wait(30)
        return {f"q{i}": f"what is q{i}?" for i in range(60)}

    monkeypatch.setattr(source, "question_texts", slow_texts)
    qs = source.question_sets([pair])[0]
    first = render.list_fragment(qs, View(), wait=False)
    assert 'data-pending="texts"' in first and "what is" not in first and "60 of 60 questions" in first
    threading.Timer(0.2, gate.set).start()
    searched = render.list_fragment(qs, View(search="WHAT IS Q17"), wait=False)  # a search waits for the texts
    assert "data-pending" not in searched and "1 of 60 questions" in searched and "what is q17?" in searched
    table = qs.table(wait=False)
    assert qs.texts_ready and (table["question"] == "what is " + table["question_id"] + "?").all()


def test_a_failure_filling_the_texts_in_the_background_reaches_whoever_waits_for_them(pair, monkeypatch) -> None:
    from reachlens.view import source

    def broken(record):
        raise RuntimeError("a bug while rebuilding the texts")

    monkeypatch.setattr(source, "question_texts", broken)
    qs = source.question_sets([pair])[0]
    assert qs.table(wait=False)["question"].isna().all()  # the list at once, without texts
    with pytest.raises(RuntimeError, match="a bug while rebuilding"):
        qs.table(wait=True)


def test_a_damaged_table_is_one_line(tmp_path) -> None:
    (tmp_path / "t.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(ReachlensError, match="cannot be read"):
        RowIndex(tmp_path / "t.parquet").rows("q0")


def test_questions_of_is_the_list_the_page_shows(pair) -> None:
    cmp = read_run(pair / "cmp")
    got = questions_of(pair, "0/cmp", 'realized_fate == "gained" and base_reachable', sort="-base_propensity")
    q = cmp.questions
    want = q[(q["realized_fate"] == "gained") & q["base_reachable"]].sort_values("base_propensity", ascending=False,
                                                                                  kind="stable")
    assert got["question_id"].tolist() == want["question_id"].tolist() and len(got) >= 2
    assert (got["base_answer"] == got["question_id"].map(cmp.base.questions.set_index("question_id")
                                                         ["deployed_answer"])).all()
    assert questions_of(pair, "0/cmp", search="Q1")["question_id"].tolist() == \
        [i for i in q["question_id"] if "q1" in i]


def test_paired_figures_of_a_filtered_set_equal_compare_on_that_subset(pair, tmp_path) -> None:
    """The page's paired figures of a filter are `reachlens compare` of the two audits cut to those questions."""
    view = View('base_n_correct >= 1 and trained_propensity < 0.9')
    rows = select(questions_of(pair, "0/cmp"), view)
    assert 10 < len(rows) < 60 and view.post_hoc
    ids = set(rows["question_id"])
    for side in ("base", "grpo"):
        a = read_run(pair / side)
        AuditResult.new(a.protocol, a.model, a.questions[a.questions["question_id"].isin(ids)],
                        a.samples[a.samples["question_id"].isin(ids)], a.data).save(tmp_path / side)
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "grpo"), "--out", str(tmp_path / "cmp")]) == 0
    want = read_run(tmp_path / "cmp").summary()
    got = paired_figures(rows)
    for key in ("n", "gained", "lost", "mcnemar_realized_p", "delta_D", "delta_D_ci", "delta_D_mde", "entered",
                "left", "mcnemar_reachable_p", "delta_O_K", "delta_O_K_ci", "delta_O_K_mde",
                "gained_from_base_reachable", "D_base", "O_K_trained"):
        assert got[key] == pytest.approx(want[key], nan_ok=True), key


def _get(url: str, **headers) -> tuple[int, dict, str]:
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read().decode()


def test_the_server_is_read_only_local_and_says_what_is_wrong_in_one_line(pair) -> None:
    before = {p: p.read_bytes() for p in pair.rglob("*") if p.is_file()}
    server = serve([pair])
    try:
        assert server.server_address[0] == "127.0.0.1" and server.server_address[1] > 0
        status, headers, body = _get(server.url)
        assert status == 200 and headers["Content-Security-Policy"] == CSP and "default-src 'none'" in CSP
        assert "<script src=\"/app.js\"" in body and "<script>" not in body
        status, _, body = _get(server.url + "frag/list?set=0/cmp&filter=" + urllib.request.quote("x.y == 1"))
        assert status == 400 and body.startswith('<p class="problem">') and "Traceback" not in body
        status, _, _ = _get(server.url, Host="evil.example:80")
        assert status == 403
        post = urllib.request.Request(server.url, data=b"x", method="POST")
        with pytest.raises(urllib.error.HTTPError, match="405"):
            urllib.request.urlopen(post)
        status, _, body = _get(server.url + "frag/question?set=0/cmp&question=q3")
        assert status == 200 and body.count("class=\"majority\"") >= 1 and "gold: <b>7</b>" in body
    finally:
        server.shutdown()
    assert before == {p: p.read_bytes() for p in pair.rglob("*") if p.is_file()}  # nothing written


def test_an_unfinished_or_damaged_run_is_shown_as_such(pair, tmp_path) -> None:
    import shutil

    shutil.copytree(pair / "base", tmp_path / "killed")
    record = json.loads((tmp_path / "killed" / "run.json").read_text())
    record.update(status="running", finished=None)
    (tmp_path / "killed" / "run.json").write_text(json.dumps(record))
    (tmp_path / "killed" / "samples.parquet").write_bytes(b"garbage")
    server = serve([tmp_path / "killed"])
    try:
        _, _, sets = _get(server.url + "frag/sets")
        assert "[interrupted]" in sets
        _, _, listing = _get(server.url + "frag/list")
        assert "interrupted, not complete" in listing
        status, _, body = _get(server.url + "frag/question?question=q0")
        assert status == 400 and "cannot be read" in body and "Traceback" not in body
    finally:
        server.shutdown()


def test_view_refuses_a_folder_without_runs_in_one_line(tmp_path, capsys) -> None:
    assert main(["view", str(tmp_path), "--no-browser"]) == 2
    err = capsys.readouterr().err
    assert "holds no reachlens run" in err and "Traceback" not in err
