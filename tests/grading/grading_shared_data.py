"""Find the shared data folder (``/work/shared/data``: ``shared/`` sits next to the repo root).

The real-data tests must not skip when the data is missing: they fail with this message instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["read_jsonl", "shared_data_dir"]

REPO_ROOT = Path(__file__).resolve().parents[2]


def shared_data_dir() -> Path:
    """``<repo>/../shared/data``, or an AssertionError that says where it was looked for."""
    data = (REPO_ROOT / ".." / "shared" / "data").resolve()
    assert data.is_dir(), (
        f"shared data folder {str(data)!r} is missing: the real-data grading tests need "
        f"'shared/data' next to the repository root {str(REPO_ROOT)!r} "
        "(with gsm8k/test.jsonl and math500/test.jsonl)"
    )
    return data


def read_jsonl(relative: str) -> list[dict[str, Any]]:
    """The records of ``shared/data/<relative>``, failing clearly if the file is absent."""
    path = shared_data_dir() / relative
    assert path.is_file(), f"data file {str(path)!r} is missing; see its folder's SOURCE.md"
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]
