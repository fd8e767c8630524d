"""`reachlens view` does not hold a question's whole table: opening a question of a run with 10x the samples costs
the server at most twice the memory (issue 58, item 4), measured by benchmarks/bench_view.py in fresh processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_question_of_ten_times_the_samples_costs_at_most_twice_the_memory(tmp_path) -> None:
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_view.py"), "--work", str(tmp_path),
                          "--n", "40", "--k", "300", "--audits", "2", "--chars", "300"],
                         capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads(out.stdout.strip().splitlines()[-1])
    small, large = results["K=300"], results["K=3000"]
    assert large["peak_gain"] <= 2 * max(small["peak_gain"], 4 << 20), results
