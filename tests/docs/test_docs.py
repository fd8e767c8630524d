"""The documentation: the site builds with ``mkdocs build --strict`` (no broken link, no missing snippet or
reference), the README stays a short front page whose command table and Python example are true, and no
results table is kept in two places."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"

_ROW = re.compile(r"^\s*\|(.+)\|\s*$")
_RULE = re.compile(r"^\s*\|?\s*:?-{3,}")
_FIGURE = re.compile(r"(?<![\w.])[-+]?\d*\.\d+")  # a decimal figure: 0.197, +0.030, 2.84


def _sources() -> list[Path]:
    """Every Markdown file a result may be written in: the README, the docs pages, the notes, the benchmarks'
    README, the architecture, the zoo's model cards."""
    files = [README, REPO / "ARCHITECTURE.md", REPO / "benchmarks" / "README.md"]
    files += sorted((REPO / "docs").rglob("*.md")) + sorted((REPO / "notes").glob("*.md"))
    files += sorted((REPO / "reachlens" / "assets" / "zoo").glob("*/MODEL_CARD.md"))
    return [f for f in files if f.is_file()]


def results_rows(text: str) -> set[str]:
    """The rows of the Markdown tables in ``text`` that hold a decimal figure, whitespace normalized."""
    rows, fenced = set(), False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and _ROW.match(line) and not _RULE.match(line) and _FIGURE.search(line):
            rows.add(" ".join(line.split()))
    return rows


def duplicated_results(files: list[Path], root: Path = REPO) -> dict[str, list[str]]:
    """Results row -> the files (relative to ``root``) it appears in, for each row found in more than one."""
    where = defaultdict(list)
    for f in files:
        for row in results_rows(f.read_text()):
            where[row].append(str(f.relative_to(root)))
    return {row: found for row, found in where.items() if len(found) > 1}


def test_no_results_table_is_kept_in_two_places():
    dup = duplicated_results(_sources())
    assert not dup, "results rows kept in two places (include one file from the other instead):\n" + "\n".join(
        f"{', '.join(found)}: {row[:100]}" for row, found in dup.items())


def test_the_duplicate_check_catches_a_copied_table(tmp_path):
    table = "| model | D | O_64 |\n|---|---|---|\n| base | 0.197 | 0.673 |\n| grpo | 0.227 | 0.670 |\n"
    (tmp_path / "a.md").write_text("# A\n\n" + table)
    (tmp_path / "b.md").write_text("# B\n\nCopied:\n\n" + table.replace("| 0.197 |", "|  0.197 |"))
    (tmp_path / "c.md").write_text("```text\n| base | 0.197 | 0.673 |\n```\n| name | kind |\n|---|---|\n| x | y |\n")
    dup = duplicated_results([tmp_path / n for n in ("a.md", "b.md", "c.md")], tmp_path)
    assert set(dup) == {"| base | 0.197 | 0.673 |", "| grpo | 0.227 | 0.670 |"}  # a fenced row is not a table
    assert dup["| base | 0.197 | 0.673 |"] == ["a.md", "b.md"]


def test_the_readme_is_a_short_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail into docs/"
    assert "docs/img/" in README.read_text() and (REPO / "docs" / "img" / "realized-vs-reachable.png").is_file()


def test_the_readme_command_table_lists_every_command():
    from reachlens.cli.main import build_parser

    _, mods = build_parser()
    table = README.read_text().split("[start:verbs]")[1].split("[end:verbs]")[0]
    listed = set(re.findall(r"^\| `reachlens ([a-z]+)", table, re.M))
    assert listed == set(mods), f"README's command table: missing {set(mods) - listed}, unknown {listed - set(mods)}"


def test_the_readme_python_example_runs(tmp_path):
    """The README's example, on 4 questions and K=4 instead of its 50 and 32, in a scratch folder."""
    block = README.read_text().split("[start:python]")[1].split("```python\n")[1].split("```")[0]
    small = block.replace("n=50", "n=4").replace("k=32", "k=4")
    assert small.count("n=4") == 1 and small.count("k=4") == 1, "the example's n or k changed: update this test"
    out = subprocess.run([sys.executable, "-c", small], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-3000:]
    first, second = out.stdout.strip().splitlines()
    D, O_K, gap = map(float, first.split())
    assert 0 <= D <= 1 and 0 <= O_K <= 1 and gap == pytest.approx(O_K - D)
    assert (tmp_path / "runs" / "base" / "run.json").is_file() and (tmp_path / "runs" / "grpo" / "run.json").is_file()


def test_the_site_builds_strict(tmp_path):
    """``mkdocs build --strict``: a broken link, an anchor that does not exist, a page left out of the nav, a
    missing snippet or a reference the API pages cannot resolve fails the build."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"),
                          "--site-dir", str(tmp_path / "site")], cwd=REPO, capture_output=True, text=True,
                         timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-5000:]
    site = tmp_path / "site"
    for page in ("index.html", "getting-started/index.html", "api/reachlens/index.html", "zoo-cards/index.html",
                 "cli/index.html", "benchmarks/index.html", "studies/probes/index.html", "api/probes/index.html",
                 "api/selectors/index.html"):
        assert (site / page).is_file(), page
    cards = (site / "zoo-cards" / "index.html").read_text()
    assert "zoo:base" in cards and "zoo:grpo" in cards  # generated from the shipped cards
    cli = (site / "cli" / "index.html").read_text()
    assert "--extended-k" in cli and "budget control" in cli  # every command's --help, from the parser
    assert "placebo=true" in cli  # reachlens probe's epilog: the probe specs
    api = (site / "api" / "selectors" / "index.html").read_text()
    assert "selection_gap" in api and "selector_table" in api  # the API reference resolved from the docstrings
