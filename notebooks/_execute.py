"""Execute the notebooks and store them with their outputs (``make notebooks``).

    python notebooks/_execute.py                        # every notebook under notebooks/
    python notebooks/_execute.py notebooks/layer_routing.ipynb

Each notebook runs top to bottom in a scratch folder (nothing it writes lands in the repository), with plotly
rendering every figure twice: interactive (``application/vnd.plotly.v1+json``, for Jupyter) and as a static PNG
(``image/png``, drawn by kaleido in headless Chromium), because GitHub shows notebooks without running their
JavaScript. The notebook's metadata records, under ``reachlens``, the hash of its code cells
(:func:`code_hash`), when and how long it ran, and the versions it ran with; ``tests/notebooks`` fails when a
code cell changed after that without re-executing.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parent
STATIC = "plotly_mimetype+png"
"""The plotly renderer the stored notebooks are executed with: interactive and a PNG for GitHub."""


def code_hash(nb) -> str:
    """SHA-256 of the notebook's code cells' sources, in order (markdown cells and outputs left out)."""
    sources = [c["source"] if isinstance(c["source"], str) else "".join(c["source"])
               for c in nb["cells"] if c["cell_type"] == "code"]
    return "sha256:" + hashlib.sha256(json.dumps(sources).encode()).hexdigest()


def execute(path: Path, *, renderer: str = STATIC, timeout: int = 1200):
    """Run the notebook at ``path`` in a scratch folder; return it with its outputs and the seconds it took."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    os.environ["PLOTLY_RENDERER"] = renderer  # the kernel inherits it; plotly reads it at import
    with tempfile.TemporaryDirectory(prefix=f"{path.stem}-") as scratch:
        t0 = time.perf_counter()
        NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                       resources={"metadata": {"path": scratch}}).execute()
        seconds = time.perf_counter() - t0
    return nb, seconds


def _versions() -> dict[str, str]:
    import torch
    import transformers

    import reachlens

    return {"reachlens": reachlens.__version__, "torch": torch.__version__, "transformers": transformers.__version__}


def main(paths: list[str]) -> int:
    import nbformat

    targets = [Path(p) for p in paths] or sorted(NOTEBOOKS.glob("*.ipynb"))
    for path in targets:
        nb, seconds = execute(path)
        nb.metadata["reachlens"] = {"code_sha256": code_hash(nb), "executed": datetime.now(timezone.utc).isoformat(
            timespec="seconds"), "seconds": round(seconds, 1), "renderer": STATIC, **_versions()}
        nbformat.write(nb, path)
        print(f"{path.name}: {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
