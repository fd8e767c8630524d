"""What a new user meets first: `--version`, quiet output, the zoo from package data and in a built wheel,
`reachlens report` on what `reachlens compare --out` wrote, and one progress line per audit."""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, fake_audit

import reachlens
from reachlens.cli import main
from reachlens.store import read_run
from reachlens.models.zoo import zoo_entries, zoo_root
from reachlens.studies._progress import ProgressBoard

PYPI_LIMIT = 100 * 10**6  # PyPI's default upload limit per file


def test_version_is_the_installed_distributions(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"reachlens {importlib.metadata.version('reachlens')}"
    assert reachlens.__version__ == importlib.metadata.version("reachlens")


def test_commands_keep_the_libraries_bars_and_warnings_out_and_restore_them(tiny_dir, tmp_path, capfd, monkeypatch):
    import transformers.utils.logging as hf_logging

    from reachlens.cli import cmd_audit

    monkeypatch.setattr(cmd_audit, "BAR_DELAY", 0)  # a tiny audit may end before the bar's delay: show it at once

    from reachlens.models import load_model

    load_model(str(tiny_dir))  # outside a command the libraries speak as usual: the test can see their bar
    assert "Loading weights" in capfd.readouterr().err
    before = (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled())
    assert main(["audit", str(tiny_dir), "--task", "arith", "--n", "2", "--k", "2", "--max-new-tokens", "4",
                 "--out", str(tmp_path / "a")]) == 0
    out, err = capfd.readouterr()
    assert "Loading weights" not in err and "Warning" not in err, err
    assert "audit " in err  # reachlens' own progress bar stays
    assert "D=" in out
    assert (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()) == before


def test_progress_board_gives_each_audit_a_line_with_its_eta():
    stream = io.StringIO()  # not a terminal: plain lines, never redrawn
    board = ProgressBoard(stream=stream, every=0.0)
    board.update("base K=8", 0, 4)
    board.update("grpo K=8", 0, 4)
    board.update("base K=8", 2, 4)
    board.update("base K=8", 4, 4)
    board.update("grpo K=8", 4, 4)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith("base K=8: 2/4 questions, 0:00 elapsed, ETA 0:0")
    assert lines[1].startswith("base K=8: 4/4 questions in 0:0")
    assert lines[2].startswith("grpo K=8: 4/4 questions in 0:0")


def test_the_zoo_is_package_data_and_reachlens_zoo_overrides_it(tmp_path, monkeypatch, capsys):
    assert zoo_root() == Path(reachlens.__file__).resolve().parent / "assets" / "zoo"
    assert {e.name for e in zoo_entries()} >= {"base", "grpo", "dapo", "sft", "sft-grpo"}
    other = tmp_path / "zoo"
    shutil.copytree(zoo_root() / "base", other / "mine")
    monkeypatch.setenv("REACHLENS_ZOO", str(other))
    assert main(["zoo", "list"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [row.split()[0] for row in rows] == ["mine"]


def test_a_built_wheel_carries_the_zoo_and_runs_from_anywhere(tmp_path):
    """Build the wheel from a copy of the sources, unpack it, and run its CLI from / against the unpacked copy."""
    src = tmp_path / "src"
    shutil.copytree(REPO / "reachlens", src / "reachlens", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    build = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"),
                            str(src)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("reachlens-*.whl"))
    assert wheel.stat().st_size < PYPI_LIMIT, f"{wheel.name}: {wheel.stat().st_size / 2**20:.1f} MiB"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        zf.extractall(tmp_path / "site")
    for entry in zoo_entries():
        for f in entry.path.iterdir():
            assert f"reachlens/assets/zoo/{entry.name}/{f.name}" in names
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "OMP_NUM_THREADS": "1"}
    env.pop("REACHLENS_ZOO", None)
    where = subprocess.run([sys.executable, "-c", "import reachlens.models.zoo as z; print(z.zoo_root())"],
                           capture_output=True, text=True, env=env, cwd="/", timeout=300)
    assert where.stdout.strip() == str(tmp_path / "site" / "reachlens" / "assets" / "zoo"), where.stderr
    listed = subprocess.run([sys.executable, "-m", "reachlens", "zoo", "list"], capture_output=True, text=True,
                            env=env, cwd="/", timeout=300)
    assert listed.returncode == 0 and "sft-grpo" in listed.stdout, listed.stderr


def _audit_dir(path: Path, result) -> Path:
    return result.save(path)


def test_report_renders_the_directory_compare_wrote(tmp_path, capsys):
    base = _audit_dir(tmp_path / "base", fake_audit([True, False, False, False, True], [4, 2, 1, 0, 3], spec="zoo:base"))
    grpo = _audit_dir(tmp_path / "grpo", fake_audit([True, True, True, False, False], [4, 4, 3, 0, 1], spec="zoo:grpo"))
    assert main(["compare", str(base), str(grpo), "--out", str(tmp_path / "cmp")]) == 0
    children = json.loads((tmp_path / "cmp" / "run.json").read_text())["children"]
    summary = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    assert (children, summary["gained"], summary["lost"]) == ({"base": "base", "trained": "grpo"}, 2, 1)
    for source in (base, grpo):  # the comparison holds its audits, under their own names: it moves as one
        pd.testing.assert_frame_equal(read_run(tmp_path / "cmp" / source.name).samples, read_run(source).samples)
    capsys.readouterr()
    assert main(["report", str(tmp_path / "cmp")]) == 0
    assert f"report: {tmp_path / 'cmp' / 'report.html'}" in capsys.readouterr().out
    md = (tmp_path / "cmp" / "report.md").read_text()
    assert "base -> grpo" in md
    # --k in compare cuts both audits in the report too
    assert main(["compare", str(base), str(grpo), "--k", "2", "--out", str(tmp_path / "cmp2")]) == 0
    assert main(["report", str(tmp_path / "cmp2")]) == 0
    assert "K=2" in (tmp_path / "cmp2" / "report.html").read_text()


def test_report_of_a_folder_it_cannot_read_is_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "is not a reachlens run directory (no run.json)" in err


def test_audit_of_the_zoo_on_arith_runs_with_default_flags(tmp_path):
    """`reachlens audit zoo:base --task arith` with no --max-new-tokens: the task's own decode length (96),
    not a 256 that does not fit the zoo's 256-token context."""
    out = tmp_path / "a"
    assert main(["audit", "zoo:base", "--task", "arith", "--n", "2", "--k", "2", "--out", str(out)]) == 0
    protocol = json.loads((out / "run.json").read_text())["protocol"]
    assert protocol["max_new_tokens"] == 96
    # an explicit flag still wins
    out2 = tmp_path / "b"
    assert main(["audit", "zoo:base", "--task", "arith", "--n", "2", "--k", "2", "--max-new-tokens", "40",
                 "--out", str(out2)]) == 0
    assert json.loads((out2 / "run.json").read_text())["protocol"]["max_new_tokens"] == 40
