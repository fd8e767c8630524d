"""Every notebook under notebooks/ is stored executed, with its outputs, so that a reader on GitHub sees its
figures (each as a PNG: GitHub runs no JavaScript), and those outputs are its current code's: the hash of its code
cells recorded when ``make notebooks`` executed it must still match.

Executing all of them takes minutes of CI time, so the suite executes the cheapest (by the seconds its last
execution recorded) top to bottom, and checks the others' stored outputs; ``make notebooks`` executes them all
(and stops at the first cell that fails)."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(ROOT.glob("*.ipynb"))


def _executor():
    spec = importlib.util.spec_from_file_location("notebooks_execute", ROOT / "_execute.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXEC = _executor()


def stored_output_problems(nb) -> list[str]:
    """What is wrong with a stored notebook's outputs (empty: they are its current code's, whole, with a figure)."""
    problems = []
    recorded = nb.metadata.get("reachlens", {}).get("code_sha256")
    if recorded != EXEC.code_hash(nb):
        problems.append("its code cells changed since it was executed (or it never was): run `make notebooks`")
    code = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.get("execution_count") for c in code]
    if counts != list(range(1, len(code) + 1)):
        problems.append(f"not executed top to bottom in one run (execution counts {counts})")
    outputs = [o for c in code for o in c.get("outputs", [])]
    if any(o.get("output_type") == "error" for o in outputs):
        problems.append("a stored output is an error")
    if not any("image/png" in o.get("data", {}) for o in outputs):
        problems.append("no figure stored as an image/png output")
    return problems


def test_there_are_notebooks():
    assert {p.name for p in NOTEBOOKS} >= {"training_audit.ipynb", "layer_routing.ipynb",
                                           "recognition_and_silencing.ipynb", "your_own_checkpoint.ipynb"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_outputs_are_current_and_show_a_figure(path):
    assert stored_output_problems(nbformat.read(path, as_version=4)) == []


def test_an_edited_code_cell_makes_the_stored_outputs_stale():
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    edited = copy.deepcopy(nb)
    cell = next(c for c in edited.cells if c.cell_type == "code")
    cell.source += "\n1 + 1"
    assert stored_output_problems(edited)[0].startswith("its code cells changed")
    unrun = copy.deepcopy(nb)
    for c in unrun.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    assert {p.split(" (")[0].split(":")[0] for p in stored_output_problems(unrun)} == {
        "not executed top to bottom in one run", "no figure stored as an image/png output"}
    edited_markdown = copy.deepcopy(nb)
    next(c for c in edited_markdown.cells if c.cell_type == "markdown").source += " More prose."
    assert stored_output_problems(edited_markdown) == []  # prose is not code: no re-execution needed


def test_the_cheapest_notebook_executes():
    """Top to bottom in a scratch folder; figures as plotly's interactive output only (no Chromium needed)."""
    seconds = {p: nbformat.read(p, as_version=4).metadata.get("reachlens", {}).get("seconds", float("inf"))
               for p in NOTEBOOKS}
    path = min(NOTEBOOKS, key=seconds.__getitem__)
    nb, _ = EXEC.execute(path, renderer="plotly_mimetype")  # a cell that raises fails here, naming it
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), path.name
    assert any(o.get("output_type") == "display_data" for c in code for o in c.outputs), f"{path.name} drew nothing"
