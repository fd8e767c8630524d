"""A run's identity is its protocol, its model and its data (issue 13, item 3).

Resume, ``rerun`` (the budget control), ``rescore`` and ``compare`` check all of it and name what differs; compare
also checks the golds question by question. Before issue 13 the data file was no part of a run:
``--data B.jsonl`` resumed into A's directory and reported A's questions.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import pytest

from reachlens import Protocol, ProtocolMismatch, audit, load_task, rerun, rescore
from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig
from reachlens.store.convert import convert
from reachlens.studies import compare

PROTO = Protocol("gsm8k", k=2, temperature=1.0, max_new_tokens=8)


def gsm8k_file(path: Path, golds: list[int]) -> Path:
    """A GSM8K-format file: same questions, these gold answers."""
    rows = [{"question": f"What is {i}+{g - i}?", "answer": f"{i}+{g - i}={g}\n#### {g}"} for i, g in enumerate(golds)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def files(tmp_path):
    return (gsm8k_file(tmp_path / "A.jsonl", [3, 5, 7]), gsm8k_file(tmp_path / "B.jsonl", [3, 6, 7]))


def test_a_resume_on_another_data_file_is_refused_naming_it(tiny_model, files, tmp_path) -> None:
    a, b = files
    out = tmp_path / "G"
    audit(tiny_model, load_task("gsm8k", a), PROTO, out=out, exec_config=ExecConfig(max_batch_rows=6))
    with pytest.raises(ProtocolMismatch, match=r"data.questions_sha256, data.sha256 .*pass the same data file") as err:
        audit(tiny_model, load_task("gsm8k", b), PROTO, out=out, exec_config=ExecConfig(max_batch_rows=6))
    assert "data.sha256" in err.value.differences
    # a copy of the same file elsewhere is the same data
    copy = tmp_path / "elsewhere" / "A.jsonl"
    copy.parent.mkdir()
    copy.write_bytes(a.read_bytes())
    assert audit(tiny_model, load_task("gsm8k", copy), PROTO, out=out, exec_config=ExecConfig(max_batch_rows=6)).n == 3


def test_the_data_identity_is_recorded(tiny_model, files, tmp_path) -> None:
    import hashlib

    a, _ = files
    r = audit(tiny_model, load_task("gsm8k", a), PROTO, out=tmp_path / "G", exec_config=ExecConfig(max_batch_rows=6))
    header = json.loads((tmp_path / "G" / "run.json").read_text())
    assert header["data"]["sha256"] == hashlib.sha256(a.read_bytes()).hexdigest() == r.data["sha256"]
    gen = load_task("arith", n=3, seed=4).data_identity
    assert (gen["generator"], gen["seed"], gen["split"]) == ("arith", 4, "test") and gen["questions_sha256"]
    assert load_task("arith", n=5, seed=4).data_identity == gen  # the whole task's, whatever n


def test_compare_refuses_audits_of_different_data(tiny_model, files, tmp_path) -> None:
    a, b = files
    ra = audit(tiny_model, load_task("gsm8k", a), PROTO, out=tmp_path / "A", exec_config=ExecConfig(max_batch_rows=6))
    rb = audit(tiny_model, load_task("gsm8k", b), PROTO, out=tmp_path / "B", exec_config=ExecConfig(max_batch_rows=6))
    with pytest.raises(ProtocolMismatch, match="made on different data"):
        compare(tmp_path / "A", tmp_path / "B")
    # directories written before data identity: golds are compared question by question
    for d in ("A", "B"):
        header = json.loads((tmp_path / d / "run.json").read_text())
        header.pop("data")
        (tmp_path / d / "run.json").write_text(json.dumps(header))
    with pytest.warns(UserWarning, match="no data identity"):
        with pytest.raises(ProtocolMismatch, match=r"disagree on the gold answer of 1 of 3 questions") as err:
            compare(tmp_path / "A", tmp_path / "B")
    assert "gsm8k-1" in str(err.value)
    assert compare(ra, ra).summary()["n"] == 3 and rb.n == 3


def test_an_old_directory_without_data_identity_resumes_with_a_note(tiny_model, files, tmp_path) -> None:
    a, _ = files
    out = tmp_path / "G"
    first = audit(tiny_model, load_task("gsm8k", a), PROTO, out=out, exec_config=ExecConfig(max_batch_rows=6))
    header = json.loads((out / "run.json").read_text())
    legacy = {"format": "reachlens-audit", "protocol": header["protocol"], "protocol_hash": header["protocol_hash"],
              "model": {"spec": header["model"]["spec"], "fingerprint": old_fingerprint(Path(header["model"]["spec"]))},
              "task_source": header["task_source"], "n_questions": header["n_questions"]}
    (out / "run.json").unlink()
    (out / "protocol.json").write_text(json.dumps(legacy))  # as reachlens wrote it before issue 13
    with pytest.raises(ReachlensError, match="if an older reachlens wrote it, `reachlens convert"):
        audit(tiny_model, load_task("gsm8k", a), PROTO, out=out, exec_config=ExecConfig(max_batch_rows=6))
    convert(out)
    with pytest.warns(UserWarning, match="records no data identity"):
        again = audit(tiny_model, load_task("gsm8k", a), PROTO, out=out, exec_config=ExecConfig(max_batch_rows=6))
    assert again.questions.equals(first.questions)
    # convert made the old fingerprint the model's full one, and the resume recorded the execution settings the
    # directory did not record; rescore agrees
    header = json.loads((out / "run.json").read_text())
    assert header["model"] == first.model and header["exec"]["max_batch_rows"] == 6
    assert rescore(out).questions.equals(first.questions)


def old_fingerprint(folder: Path) -> str:
    """The fingerprint reachlens recorded before full hashing, written out here from its description: per
    ``.safetensors`` and ``.json`` file in name order, ``NAME:SIZE``, its first MiB and, past 2 MiB, its last."""
    h = hashlib.sha256()
    for f in sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".json") and p.is_file()):
        data = f.read_bytes()
        h.update(f"{f.name}:{len(data)}".encode() + data[: 1 << 20] + (data[-(1 << 20):] if len(data) > 2 << 20 else b""))
    return h.hexdigest()[:16]


def test_convert_keeps_an_old_fingerprint_whose_files_changed_and_resume_refuses_it(tiny_model, files, tmp_path) -> None:
    a, _ = files
    folder = Path(tiny_model.reachlens_identity.spec)
    out = tmp_path / "H"
    audit(tiny_model, load_task("gsm8k", a), PROTO, out=out, exec_config=ExecConfig(max_batch_rows=6))
    header = json.loads((out / "run.json").read_text())
    stale = old_fingerprint(folder)[::-1]  # the model's files were others when this directory was written
    (out / "run.json").unlink()
    (out / "protocol.json").write_text(json.dumps({
        "format": "reachlens-audit", "protocol": header["protocol"], "protocol_hash": header["protocol_hash"],
        "model": {"spec": str(folder), "fingerprint": stale}, "task_source": header["task_source"],
        "n_questions": header["n_questions"]}))
    what = [w for d, w in convert(out) if d == out][0]
    assert "its files are not the ones recorded (fingerprint kept)" in what
    assert json.loads((out / "run.json").read_text())["model"]["fingerprint"] == stale
    with pytest.raises(ProtocolMismatch, match="model"):
        audit(tiny_model, load_task("gsm8k", a), PROTO, out=out, exec_config=ExecConfig(max_batch_rows=6))


def test_a_budget_rerun_checks_model_and_data(tiny_model, files, tmp_path, monkeypatch) -> None:
    from reachlens.models import ModelIdentity

    a, b = files
    base = audit(tiny_model, load_task("gsm8k", a), PROTO, out=tmp_path / "A", exec_config=ExecConfig(max_batch_rows=6))
    with pytest.raises(ProtocolMismatch, match="the audit to extend was made with another model or data in .*data.sha256"):
        rerun(tmp_path / "A", model=tiny_model, task=load_task("gsm8k", b), k=4)
    monkeypatch.setattr(tiny_model, "reachlens_identity", ModelIdentity(base.model["spec"], "sha256:0000"))
    with pytest.raises(ProtocolMismatch, match="model.fingerprint"):
        rerun(tmp_path / "A", model=tiny_model, task=load_task("gsm8k", a), k=4)
    monkeypatch.undo()
    with pytest.raises(ReachlensError, match="the audit was made on the data file .*pass the task"):
        rerun(tmp_path / "A", model=tiny_model, k=4)
    big = rerun(tmp_path / "A", model=tiny_model, task=load_task("gsm8k", a), k=4, into=tmp_path)
    assert big.k == 4 and big.data == base.data and big.location == tmp_path / "A--k=4"
    assert big.record.extra["change"] == {"k": 4} and big.record.status == "complete"


def test_rescore_refuses_a_directory_that_is_not_one_run(tiny_model, files, tmp_path) -> None:
    a, _ = files
    out = tmp_path / "G"
    audit(tiny_model, load_task("gsm8k", a), PROTO, out=out, exec_config=ExecConfig(max_batch_rows=6))
    summary = json.loads((out / "summary.json").read_text())
    summary["model_fingerprint"] = "sha256:ffffffffffffffff"  # e.g. a summary copied from another run
    (out / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ProtocolMismatch, match=r"is not one run: .*model.fingerprint"):
        rescore(out)


def test_a_jsonl_task_runs_from_the_cli(capsys, tiny_dir, tmp_path) -> None:
    """Item 7: ``--task jsonl`` / ``--task csv`` used to be refused ("protocol is for task 'jsonl' but
    the task given is 'jsonl:q'")."""
    from reachlens.cli import main

    (tmp_path / "q.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n{"question": "2+3?", "answer": "5"}\n')
    (tmp_path / "q.csv").write_text("question,answer\n1+1?,2\n2+3?,5\n")
    for kind in ("jsonl", "csv"):
        with warnings.catch_warnings():
            code = main(["audit", str(tiny_dir), "--task", kind, "--data", str(tmp_path / f"q.{kind}"), "--k", "2",
                         "--max-new-tokens", "6", "--out", str(tmp_path / kind)])
        err = capsys.readouterr().err
        assert code == 0, err
        assert json.loads((tmp_path / kind / "summary.json").read_text())["n"] == 2
