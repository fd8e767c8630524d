"""The probe run's edges (issue 36, findings 3, 6, 8 and the degenerate probes): every probe bounded and checked
before the model loads, a direction file identified by its SHA-256, unions beside the run's identity.

* a budget that cannot fit in memory (``embedding_noise:k=100000000``, ``graft:...:k=30000000``,
  ``routes:budget=1000000000``) is one line, counted by arithmetic (no candidate made), before the model loads;
* a degenerate probe (a noise ratio or an alpha that drowns the prompt, a seed beyond 64 bits, digits of another
  script, a key that draws nothing, the same probe under two labels) is one line naming the value and the fix;
* a union naming no probe (``sampling+grfat``) and a graft position outside every prompt are refused before the
  model loads; unions are not part of the run's identity: a resume, or a complete run run again, may name others;
* a steer probe's direction file is read once per run and its SHA-256 recorded: a resume with another file is
  refused naming the file and both hashes, the same file resumes to the bank of an uninterrupted run.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reachlens import ExecConfig, Protocol, ReachlensError, load_task, read_run
from reachlens.cli import main
from reachlens.models.source import ModelSource
from reachlens.probes import GraftProbe, parse_probe, probe
from reachlens.store import PartsDir

MEMORY = 16 << 30
"""The memory the bound is checked against (fixed, so the refusals hold on a machine of any size)."""


@pytest.fixture
def no_load(monkeypatch):
    """The model must not load: every refusal here comes before it; and a fixed memory to bound by."""
    monkeypatch.setattr(ModelSource, "load", lambda self: pytest.fail(f"{self.spec!r} was loaded"))
    monkeypatch.setattr("reachlens.engine.memory.machine_memory", lambda: MEMORY)


def refused(capsys, model: Path, out: Path, probes: list[str], *extra: str) -> str:
    """The one line ``reachlens probe`` exits 2 with (nothing written to ``out``)."""
    argv = ["probe", str(model), "--task", "arith", "--n", "3", "--max-new-tokens", "8", "--out", str(out), *extra]
    code = main(argv + [x for p in probes for x in ("--probe", p)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert not out.exists()
    return lines[0]


FIT = MEMORY // 2 // (1024 + 64 * 8)
"""The most completions of 8 tokens that fit: the audit's bound (ROW_BYTES + ROW_BYTES_PER_TOKEN per token)."""


@pytest.mark.parametrize("spec, says, most", [
    ("embedding_noise:k=100000000", "probe 'embedding_noise:k=100000000': 1 question(s) decoded together, "
                                    "100,000,001 candidates each: 100,000,001 completions need about", FIT - 1),
    ("graft:kind=noise:layer=1:k=30000000", "30,000,001 completions need about", FIT - 1),  # beside the greedy row
    ("routes:budget=1000000000", "probe 'routes:budget=1000000000': 3 question(s) decoded together, "
                                 "1,000,000,000 candidates each: 3,000,000,000 completions", FIT // 3),
    ("sampling:k=3000000000", "3,000,000,000 completions need about", FIT),
])
def test_a_budget_beyond_memory_is_one_line_before_the_model_loads(spec, says, most, tiny_dir, tmp_path, capsys,
                                                                   no_load):
    line = refused(capsys, tiny_dir, tmp_path / "out", [spec])
    assert says in line and "more than half of the 16.0 GiB this process may use" in line
    assert f"give it at most {most:,} candidates per question (its budget)" in line


def test_a_budget_is_counted_not_enumerated(monkeypatch):
    monkeypatch.setattr(GraftProbe, "_plan", lambda self: pytest.fail("every arm was built"))
    assert parse_probe("graft:kind=noise,zero:layer=1,2:k=30000000").budget == 2 * (30000000 + 1)
    assert parse_probe("embedding_noise:k=100000000").budget == 100000000
    assert parse_probe("routes:budget=1000000000").budget == 1000000000


@pytest.mark.parametrize("spec, says", [
    ("embedding_noise:ratio=1e30", "embedding_noise ratio=1e+30 drowns the prompt"),
    ("steer:layer=1:alphas=-4,1e30", "steer alpha=1e+30 drowns every activation"),
    ("graft:kind=noise:layer=1:seed=18446744073709551616", "seed=18446744073709551616 is beyond 64 bits"),
    ("sampling:seed=-9223372036854775809", "seed=-9223372036854775809 is beyond 64 bits"),
    ("sampling:k=١٢", "k='١٢' must be an integer (digits 0-9)"),
    ("embedding_noise:ratio=٠.١", "ratio='٠.١' must be a finite number (digits 0-9"),
    ("steer:layer=١:alphas=4", "layer='١' must be an integer (digits 0-9)"),
    ("sampling:k=1_0", "k='1_0' must be an integer"),
    ("graft:kind=zero:layer=1:k=3", "graft k=3 draws nothing: kind=zero is not random; drop k="),
    ("graft:kind=zero,mean:layer=1:seed=3", "graft seed=3 draws nothing"),
    ("steer:layer=1:alphas=4:direction=v.npy:seed=2", "steer seed=2 draws nothing"),
])
def test_a_degenerate_probe_is_one_line_naming_its_value(spec, says, tiny_dir, tmp_path, capsys, no_load):
    with pytest.raises(ReachlensError) as err:
        parse_probe(spec)
    assert says in str(err.value) and "\n" not in str(err.value)
    assert says in refused(capsys, tiny_dir, tmp_path / "out", [spec])


@pytest.mark.parametrize("probes, says", [
    (["graft:kind=noise:layer=1", "graft:kind=noise:layer=1:seed=0"],
     "probes 'graft:kind=noise:layer=1' and 'graft:kind=noise:layer=1:seed=0' are the same probe (seed=0 is the "
     "run's seed)"),
    (["sampling:k=2", "sampling:k=2:seed=0"], "are the same probe"),
    (["graft:kind=zero:layer=1", "graft:kind=zero,mean:layer=1"], "both make arm 'graft:zero@L1'"),
])
def test_the_same_probe_under_two_labels_is_refused(probes, says, tiny_dir, tmp_path, capsys, no_load):
    assert says in refused(capsys, tiny_dir, tmp_path / "out", probes)


def test_another_seed_is_another_probe(tiny_dir, tmp_path, capsys, no_load):
    """seed=1 under the run's seed 0 draws other candidates: both are kept (refused here only by the union)."""
    line = refused(capsys, tiny_dir, tmp_path / "out", ["graft:kind=noise:layer=1", "graft:kind=noise:layer=1:seed=1"],
                   "--union", "graft+nope")
    assert "'nope' names no probe" in line


@pytest.mark.parametrize("union, says", [
    ("sampling+grfat", "union 'sampling+grfat': 'grfat' names no probe, family or arm of this run (did you mean "
                       "'graft'?); it could be 'greedy', 'sampling', 'graft', 'sampling:k=2', 'graft:kind=zero:layer=1'"),
    ("greedy+arm:graft:zero@L7", "'arm:graft:zero@L7' names no probe"),
    ("graft", "names one source"),
])
def test_a_union_is_checked_before_the_model_loads(union, says, tiny_dir, tmp_path, capsys, no_load):
    assert says in refused(capsys, tiny_dir, tmp_path / "out", ["sampling:k=2", "graft:kind=zero:layer=1"],
                           "--union", union)


def test_a_graft_position_outside_every_prompt_is_refused_before_the_model_loads(tiny_dir, tmp_path, capsys, no_load):
    line = refused(capsys, tiny_dir, tmp_path / "out", ["graft:kind=zero:layer=1:position=-99999"])
    task = load_task("arith", n=3)
    assert "graft position=-99999 is outside question" in line and "use -1 (the last token)" in line
    assert any(f"{q.question_id!r}" in line for q in task.questions)


# --- unions beside the identity -------------------------------------------------------------------------
N, TOKENS = 4, 6
GREEDY = Protocol.greedy("arith", max_new_tokens=TOKENS)
EXEC = ExecConfig(max_batch_rows=6)


class Stop(Exception):
    pass


def stopped_after(model, task, specs, out: Path, parts: int, **kw) -> None:
    def progress(done: int, total: int) -> None:
        if len(PartsDir(out).part_files()) >= parts:
            raise Stop

    with pytest.raises(Stop):
        probe(model, task, specs, protocol=GREEDY, exec_config=EXEC, out=out, progress=progress, **kw)


def test_unions_may_change_on_resume_and_on_a_complete_run(tiny_model, tmp_path):
    task = load_task("arith", n=N)
    specs = ["sampling:k=2:temperature=1", "graft:kind=zero:layer=1"]
    out = tmp_path / "run"
    stopped_after(tiny_model, task, specs, out, 1, unions=["sampling+graft"])
    run = probe(tiny_model, task, specs, protocol=GREEDY, exec_config=EXEC, out=out, unions=["greedy+graft"])
    assert run.record.status == "complete" and list(run.summary()["unions"]) == ["O[greedy+graft]"]
    assert "unions" not in run.record.options and json.loads((out / "run.json").read_text())["unions"] == ["O[greedy+graft]"]
    again = probe(tiny_model, task, specs, protocol=GREEDY, exec_config=EXEC, out=out,
                  unions=["sampling+graft", "greedy+sampling"])  # re-summarized, nothing decoded
    assert list(read_run(out).summary()["unions"]) == ["O[sampling+graft]", "O[greedy+sampling]"]
    pd.testing.assert_frame_equal(again.candidates, run.candidates)
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["unions"]) == {"O[sampling+graft]", "O[greedy+sampling]"}  # written with sorted keys


def test_convert_moves_a_format_3_probe_run_s_unions_beside_its_identity(tiny_model, tmp_path):
    out = tmp_path / "run"
    probe(tiny_model, load_task("arith", n=2), ["graft:kind=zero:layer=1"], protocol=GREEDY, exec_config=EXEC, out=out)
    record = json.loads((out / "run.json").read_text())
    unions = record.pop("unions")
    (out / "run.json").write_text(json.dumps({**record, "format_version": 3,
                                              "options": {**record["options"], "unions": unions}}))
    from reachlens.store.record import FORMAT_VERSION  # the format this tree writes (a later step converts further)

    with pytest.raises(ReachlensError, match=f"run format 3, this reachlens reads {FORMAT_VERSION}; rewrite it with "
                                              "`reachlens convert"):
        read_run(out)
    assert main(["convert", str(out)]) == 0
    converted = json.loads((out / "run.json").read_text())
    assert converted["unions"] == unions and "unions" not in converted["options"] and converted["format_version"] == FORMAT_VERSION
    assert read_run(out).unions == unions


# --- a direction file: read once, identified by its SHA-256 ---------------------------------------------
def sha256_of(v: np.ndarray) -> str:
    """The vector's identity as the run records it: its shape, then its float64 values (little-endian)."""
    return hashlib.sha256(repr(tuple(v.shape)).encode() + np.asarray(v, dtype="<f8").tobytes()).hexdigest()


def test_a_direction_file_replaced_before_a_resume_is_refused_and_the_same_file_resumes(tiny_model, tmp_path,
                                                                                       monkeypatch):
    task = load_task("arith", n=N)
    width = tiny_model.cfg.d_model
    first, other = np.random.default_rng(0).normal(size=(2, width)).astype(np.float32)
    path = tmp_path / "v.npy"
    np.save(path, first)
    original = path.read_bytes()
    specs = [f"steer:layer=1:alphas=-3,3:direction={path}"]
    whole = probe(tiny_model, task, specs, protocol=GREEDY, exec_config=EXEC)  # the reference, uninterrupted
    out = tmp_path / "run"
    stopped_after(tiny_model, task, specs, out, 1)
    assert json.loads((out / "run.json").read_text())["options"]["inputs"] == {str(path): sha256_of(first)}

    np.save(path, other)  # another direction under the same name
    with pytest.raises(ReachlensError) as err:
        probe(tiny_model, task, specs, protocol=GREEDY, exec_config=EXEC, out=out)
    line = str(err.value)
    assert "\n" not in line and "options.inputs" in line and str(path) in line
    assert sha256_of(first) in line and sha256_of(other) in line and "restore that file" in line

    path.write_bytes(original)
    reads = []
    from reachlens.probes import activation

    real = activation.read_direction
    monkeypatch.setattr(activation, "read_direction", lambda *a, **k: reads.append(a) or real(*a, **k))
    resumed = probe(tiny_model, task, specs, protocol=GREEDY, exec_config=EXEC, out=out)
    assert len(reads) == 1  # once per run, however many slices decode
    assert resumed.record.status == "complete"
    pd.testing.assert_frame_equal(resumed.candidates, whole.candidates)
