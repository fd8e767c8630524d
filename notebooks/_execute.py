"""Execute the notebooks and store them with their outputs (``make notebooks``).

    python notebooks/_execute.py                        # every notebook under notebooks/
    python notebooks/_execute.py notebooks/layer_routing.ipynb

Each notebook runs top to bottom in a scratch folder (nothing it writes lands in the repository), with plotly
rendering every figure twice: interactive (``application/vnd.plotly.v1+json``, for Jupyter) and as a static PNG
(``image/png``, drawn by kaleido in headless Chromium), because GitHub shows notebooks without running their
JavaScript; each PNG is drawn at 960 x 540 unless the figure sets its own size. The libraries' progress bars
("Loading weights") are left out of the stored outputs, as the ``reachlens`` command leaves them out: both are
set by an IPython startup file of the scratch profile (:data:`STARTUP`), not in the notebooks. The notebook's
metadata records, under ``reachlens``, the hash of its code cells
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


STARTUP = """\
import warnings
import plotly.io as pio
import huggingface_hub.utils
import transformers.utils.logging
pio.renderers["png"].width, pio.renderers["png"].height = 960, 540
transformers.utils.logging.disable_progress_bar()
huggingface_hub.utils.disable_progress_bars()
warnings.filterwarnings("ignore", message="IProgress not found")
"""
"""Run by the kernel before the notebook's first cell (an IPython startup file)."""


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
    with tempfile.TemporaryDirectory(prefix=f"{path.stem}-") as scratch:
        startup = Path(scratch, "ipython", "profile_default", "startup")
        startup.mkdir(parents=True)
        (startup / "00-notebooks.py").write_text(STARTUP)
        work = Path(scratch, "work")
        work.mkdir()
        # the kernel inherits the environment: plotly reads PLOTLY_RENDERER at import, IPython its IPYTHONDIR
        env = {"PLOTLY_RENDERER": renderer, "IPYTHONDIR": str(Path(scratch, "ipython"))}
        before = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            t0 = time.perf_counter()
            NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                           resources={"metadata": {"path": str(work)}}).execute()
            seconds = time.perf_counter() - t0
        finally:
            for k, v in before.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
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
