"""Imports every file-based task loader so that each registers its task name.

Registered: ``jsonl``, ``csv`` (generic field mapping), ``gsm8k``, ``arc``, ``piqa``, ``logiqa`` and
``math500``. Importing a loader module only defines functions and constants; it reads no data.
"""

from __future__ import annotations

from reachlens.tasks.arc import load_arc
from reachlens.tasks.gsm8k import load_gsm8k
from reachlens.tasks.jsonl import load_csv, load_jsonl, read_csv, read_jsonl
from reachlens.tasks.logiqa import load_logiqa
from reachlens.tasks.math500 import load_math500
from reachlens.tasks.piqa import load_piqa

__all__ = [
    "load_arc", "load_csv", "load_gsm8k", "load_jsonl", "load_logiqa", "load_math500", "load_piqa",
    "read_csv", "read_jsonl",
]
