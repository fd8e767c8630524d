"""The full benchmark files in ``../shared/data`` for the grading tests (CI has them; a clone need not).

Absent, the tests that read them skip with a reason; under ``CI=true`` the conftest turns that skip
into a failure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import SHARED_DATA

__all__ = ["read_jsonl", "shared_data_dir"]


def shared_data_dir() -> Path:
    """``../shared/data`` (or ``$REACHLENS_SHARED/data``); skips the calling test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"needs the full benchmark files in {SHARED_DATA} (../shared/data beside the clone, or "
                    "REACHLENS_SHARED=DIR): absent")
    return SHARED_DATA


def read_jsonl(relative: str) -> list[dict[str, Any]]:
    """The records of ``shared/data/<relative>``; a missing file in a present folder is a failure."""
    path = shared_data_dir() / relative
    assert path.is_file(), f"data file {str(path)!r} is missing; see its folder's SOURCE.md"
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]
