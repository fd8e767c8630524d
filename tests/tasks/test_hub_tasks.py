"""Benchmarks by name: the hub datasets lm-eval-harness reads, read through ``datasets``, offline.

Each test writes a copy of a benchmark in the layout of its hub repository (parquet under the config's
folder and the repository's README, as ``git clone`` of the dataset repo gives) from the original file,
with its own conversion (the one the hub's publishers applied), then checks that ``load_task`` reading
that copy through ``datasets.load_dataset`` gives the same questions as reading the original file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURE_DATA

from reachlens.errors import ReachlensError
from reachlens.tasks import load_task

# task, original file under the data folder, hub repository, config folder (None: the data/ layout)
BENCHMARKS = [
    ("gsm8k", "gsm8k/test.jsonl", "openai/gsm8k"),
    ("arc", "arc_challenge/ARC-Challenge-Test.jsonl", "allenai/ai2_arc"),
    ("math500", "math500/test.jsonl", "HuggingFaceH4/MATH-500"),
    ("piqa", "piqa/valid.jsonl", "baber/piqa"),
    ("logiqa", "logiqa/Test.txt", "EleutherAI/logiqa"),
]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _readme(configs: dict[str, dict[str, str]]) -> str:
    """A dataset card whose YAML header maps each config's splits to files, as hub repositories do."""
    lines = ["---", "configs:"]
    for config, splits in configs.items():
        lines += [f"- config_name: {config}", "  data_files:"]
        for split, pattern in splits.items():
            lines += [f"  - split: {split}", f"    path: {pattern}"]
    return "\n".join([*lines, "---", "", "A copy made by the test.", ""])


def _parquet(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)


def _logiqa_rows(text: str) -> list[dict]:
    """The rows of EleutherAI/logiqa: its loading script's reading of the authors' file."""
    def normalize(s: str) -> str:
        return s.replace(".", ". ").strip()

    rows = []
    for block in text.strip().split("\n\n"):
        lines = block.split("\n")
        rows.append({"label": lines[0].strip(), "context": normalize(lines[1]), "question": normalize(lines[2]),
                     "options": [normalize(option[2:]) for option in lines[3:]]})
    return rows


def write_hub_copy(name: str, original: Path, dest: Path) -> Path:
    """A copy of ``original`` in the layout of the benchmark's hub repository, under ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    if name == "gsm8k":
        _parquet(_jsonl(original), dest / "main" / "test-00000-of-00001.parquet")
        (dest / "README.md").write_text(_readme({"main": {"test": "main/test-*"}}))
    elif name == "arc":
        rows = [{"id": r["id"], "question": r["question"]["stem"],
                 "choices": {"text": [c["text"] for c in r["question"]["choices"]],
                             "label": [c["label"] for c in r["question"]["choices"]]},
                 "answerKey": r["answerKey"]} for r in _jsonl(original)]
        _parquet(rows, dest / "ARC-Challenge" / "test-00000-of-00001.parquet")
        (dest / "README.md").write_text(_readme({"ARC-Challenge": {"test": "ARC-Challenge/test-*"}}))
    elif name == "math500":  # HuggingFaceH4/MATH-500 holds the JSONL itself at its root
        (dest / "test.jsonl").write_bytes(original.read_bytes())
    elif name == "piqa":
        labels = original.with_name(f"{original.stem}-labels.lst").read_text().split()
        rows = [{**r, "label": int(label)} for r, label in zip(_jsonl(original), labels, strict=True)]
        _parquet(rows, dest / "data" / "validation-00000-of-00001.parquet")
        (dest / "README.md").write_text(_readme({"default": {"validation": "data/validation-*"}}))
    elif name == "logiqa":
        _parquet(_logiqa_rows(original.read_text(encoding="utf-8")), dest / "logiqa" / "test-00000-of-00001.parquet")
        (dest / "README.md").write_text(_readme({"logiqa": {"test": "logiqa/test-*"}}))
    else:
        raise AssertionError(name)
    return dest


def _same_questions(hub, local) -> None:
    assert len(hub) == len(local)
    for a, b in zip(hub.questions, local.questions):
        assert a == b, (a, b)
    assert (hub.grader, hub.default_format, hub.stop) == (local.grader, local.default_format, local.stop)
    assert all(hub.prompt(q) == local.prompt(q) for q in local.questions)


@pytest.mark.parametrize(("name", "rel", "repo"), BENCHMARKS)
def test_a_copy_in_the_hub_layout_loads_the_same_questions_as_the_file(tmp_path, name, rel, repo):
    hub = load_task(name, write_hub_copy(name, FIXTURE_DATA / rel, tmp_path / repo))
    _same_questions(hub, load_task(name, FIXTURE_DATA / rel))
    assert f"a copy of {repo} (" in hub.source


@pytest.mark.parametrize(("name", "rel", "repo"), BENCHMARKS)
def test_the_full_benchmark_in_the_hub_layout_loads_the_same_questions(tmp_path, shared_data, name, rel, repo):
    hub = load_task(name, write_hub_copy(name, shared_data / rel, tmp_path / repo))
    local = load_task(name, shared_data / rel)
    _same_questions(hub, local)
    assert len(hub) == {"gsm8k": 1319, "arc": 1172, "math500": 500, "piqa": 1838, "logiqa": 651}[name]


def test_hub_splits_follow_lm_eval(tmp_path):
    copy = write_hub_copy("piqa", FIXTURE_DATA / "piqa/valid.jsonl", tmp_path / "baber/piqa")
    # PIQA's test labels are private: "test" reads the validation split, as lm-eval does
    assert load_task("piqa", copy, split="test").questions == load_task("piqa", copy, split="validation").questions
    with pytest.raises(ReachlensError, match=r"task 'gsm8k' has no split 'dev' on the hub \(openai/gsm8k\); "
                                             r"pass one of \['test', 'train'\]"):
        load_task("gsm8k", split="dev")
    task = load_task("arc", write_hub_copy("arc", FIXTURE_DATA / "arc_challenge/ARC-Challenge-Test.jsonl",
                                           tmp_path / "allenai/ai2_arc"), n=2)
    assert [q.question_id for q in task.questions] == ["Fixture_0001", "Fixture_0002"]


def test_a_folder_that_is_no_hub_copy_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReachlensError) as info:
        load_task("gsm8k", tmp_path / "empty")
    message = str(info.value)
    assert "'openai/gsm8k (main, test)'" not in message and "is not a copy of openai/gsm8k (main, test)" in message
    assert "\n" not in message


def test_a_loading_script_copy_is_one_line_naming_data(tmp_path):
    """datasets 4 and later refuse a repository that is only a loading script (as some hub datasets were)."""
    copy = tmp_path / "EleutherAI" / "logiqa"
    copy.mkdir(parents=True)
    (copy / "logiqa.py").write_text("import datasets\n")
    with pytest.raises(ReachlensError, match=r"is a loading script, .*data=PATH") as info:
        load_task("logiqa", copy)
    assert "\n" not in str(info.value)


def test_logiqa_keeps_its_authors_text_only_from_their_file(tmp_path):
    copy = write_hub_copy("logiqa", FIXTURE_DATA / "logiqa/Test.txt", tmp_path / "EleutherAI/logiqa")
    assert load_task("logiqa", copy).metadata["acbd_order"] is None  # the hub rows no longer show the prefixes
    with pytest.raises(ReachlensError, match=r"only their Test\.txt has .*data=PATH"):
        load_task("logiqa", copy, lm_eval_text=False)


def _offline_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    return {**env, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home"), "OMP_NUM_THREADS": "1"}


def test_by_name_offline_the_audit_exits_2_with_one_line_naming_the_dataset_and_data(tmp_path):
    out = tmp_path / "D"
    cmd = [sys.executable, "-m", "reachlens", "audit", "zoo:base", "--task", "gsm8k", "--n", "2", "--k", "2",
           "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=_offline_env(tmp_path), cwd=tmp_path, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("reachlens audit: error: task 'gsm8k' reads the hub dataset openai/gsm8k (main, test)")
    assert "--data PATH" in lines[0] and "OfflineModeIsEnabled" in lines[0]
    assert not out.exists()  # refused before anything was written


def test_by_name_in_python_offline_raises_the_user_error(tmp_path):
    code = ("from reachlens.errors import ReachlensError\nfrom reachlens.tasks import load_task\n"
            "try:\n    load_task('arc')\nexcept ReachlensError as err:\n    print(err)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_offline_env(tmp_path),
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "reads the hub dataset allenai/ai2_arc (ARC-Challenge, test)" in done.stdout


def test_the_cli_audits_a_hub_copy_given_as_data(tmp_path, tiny_dir):
    from reachlens.cli import main

    copy = write_hub_copy("gsm8k", FIXTURE_DATA / "gsm8k/test.jsonl", tmp_path / "openai/gsm8k")
    out = tmp_path / "audit"
    assert main(["audit", str(tiny_dir), "--task", "gsm8k", "--data", str(copy), "--n", "2", "--k", "2",
                 "--max-new-tokens", "4", "--out", str(out)]) == 0
    questions = pd.read_parquet(out / "questions.parquet")
    assert questions["question_id"].tolist() == ["gsm8k-0", "gsm8k-1"]
    assert questions["gold"].tolist() == ["180", "1600"]

