"""The GPU suite is for a machine with CUDA (``benchmarks/gpu/run.sh`` runs it there). Elsewhere its tests skip with
their reason; under ``CI=true``, where any skip fails, a machine without CUDA leaves them out of the collection
instead (the CI machine has no GPU: the suite runs on a lent one, by that script)."""

from __future__ import annotations

import os

import torch

IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")  # as tests/conftest.py reads it
collect_ignore_glob = ["test_*.py"] if IN_CI and not torch.cuda.is_available() else []
