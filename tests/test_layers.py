"""The layer order of ARCHITECTURE.md, over the import graph of ``reachlens/``.

Each layer imports only from itself and the layers above it (earlier in :data:`LAYERS`), and no two modules
import each other, directly or through others, at module level or inside a function (a lazy import that closes a
cycle is a cycle). The graph is read from the source (``ast``): nothing is imported to build it. An import inside
a function (a lazy one, for a heavy or optional dependency) keeps the order too, save the few named in
:data:`LAZY_UPWARD` with their reason. A module of more than :data:`MAX_LINES` lines says at its top why it is one
file.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "reachlens"

LAYERS = (
    ("reachlens.errors", "reachlens.version", "reachlens._registry", "reachlens._verbosity", "reachlens.escape",
     "reachlens.stats", "reachlens.power"),
    ("reachlens.protocol", "reachlens.execution"),
    ("reachlens.engine",),
    ("reachlens.models",),
    ("reachlens.grading",),
    ("reachlens.tasks",),
    ("reachlens.interventions",),
    ("reachlens.records",),
    ("reachlens.selectors",),
    ("reachlens.store",),
    ("reachlens.runner",),
    ("reachlens.studies",),
    ("reachlens.routing",),
    ("reachlens.probes",),
    ("reachlens.report",),
    ("reachlens.view",),
    ("reachlens.cli",),
    ("reachlens", "reachlens.__main__"),
)
"""From the bottom of the stack (imports nothing of reachlens) to its top (the package's public surface)."""

LAZY_UPWARD: dict[tuple[str, str], str] = {}
"""Imports inside a function that reach a lower layer, and why (each one a place to mend, not a pattern)."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _statements(body):
    """Module-level statements, including those inside a top-level ``if``/``try`` (not inside functions)."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _statements(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _statements(node.body + node.orelse + node.finalbody + [h for x in node.handlers for h in x.body])


def imports_of(path: Path, *, lazy: bool = False) -> set[str]:
    """The reachlens modules ``path`` imports at module level, and with ``lazy`` inside its functions too
    (``from X import y`` counts X, and X.y when y is a module of the package)."""
    tree = ast.parse(path.read_text())
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree) if lazy else _statements(tree.body):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "reachlens"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            if base.split(".")[0] != "reachlens":
                continue
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names if _is_module(f"{base}.{a.name}")}
    return found - {name}


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def layer_of(module: str) -> int:
    best = None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (i, len(prefix))
    if best is None:
        raise AssertionError(f"{module} is in no layer of LAYERS; add its package to the order (and to ARCHITECTURE.md)")
    return best[0]


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}


def test_every_module_imports_only_from_its_layer_and_those_above(graph):
    bad = sorted(f"{m} (layer {layer_of(m)}) imports {dep} (layer {layer_of(dep)})"
                 for m, deps in graph.items() for dep in deps
                 if layer_of(dep) > layer_of(m) and not m.startswith(dep + "."))
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_lazy_imports_keep_the_order_too():
    bad = []
    for path in PACKAGE.rglob("*.py"):
        m = module_name(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.ImportFrom) and (sub.module or "").split(".")[0] == "reachlens":
                        dep = sub.module
                        if layer_of(dep) > layer_of(m) and not m.startswith(dep + ".") and (m, dep) not in LAZY_UPWARD:
                            bad.append(f"{m}.{node.name} imports {dep}")
    assert not bad, "lazy imports against the layer order:\n" + "\n".join(sorted(bad))


@pytest.fixture(scope="module")
def lazy_graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p, lazy=True) for p in PACKAGE.rglob("*.py")}


MAX_LINES = 400
"""Past this many lines a module says, at the top of its docstring's text, why it is one file."""


def test_a_long_module_says_why_it_is_one_file():
    long = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        doc = (ast.get_docstring(ast.parse(text)) or "").lower()
        if text.count("\n") > MAX_LINES and not ("one module" in doc or "one file" in doc):
            long.append(f"{module_name(path)} ({text.count(chr(10))} lines)")
    assert not long, "modules over 400 lines that do not say why they are one file: " + ", ".join(sorted(long))


def test_no_import_cycle_through_a_lazy_import(lazy_graph):
    test_no_import_cycle(lazy_graph)


def test_no_import_cycle(graph):
    cycle: list[str] = []
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> bool:
        state[m] = 1
        for dep in sorted(graph.get(m, ())):
            if m.startswith(dep + "."):  # a module imports its own package's __init__ (running it first anyway)
                continue
            if state.get(dep) == 1:
                cycle.extend(path[path.index(dep):] + [dep] if dep in path else [m, dep])
                return True
            if state.get(dep) is None and visit(dep, [*path, dep]):
                return True
        state[m] = 2
        return False

    for m in sorted(graph):
        if state.get(m) is None and visit(m, [m]):
            break
    assert not cycle, "an import cycle: " + " -> ".join(cycle)


def test_the_check_fails_on_an_import_against_the_order(tmp_path, monkeypatch):
    """The test itself: a store module importing a study is caught; the graph it reads is the real one."""
    real = {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}
    assert {"reachlens.store", "reachlens.runner.executor"} <= real["reachlens.runner.jobs"]
    fake = {"reachlens.store.x": {"reachlens.studies.auditing"}, "reachlens.studies.auditing": set()}
    with pytest.raises(AssertionError, match=r"reachlens.store.x \(layer \d+\) imports reachlens.studies.auditing"):
        test_every_module_imports_only_from_its_layer_and_those_above(fake)
    with pytest.raises(AssertionError, match="an import cycle: reachlens.a.x -> reachlens.a.y -> reachlens.a.x"):
        test_no_import_cycle({"reachlens.a.x": {"reachlens.a.y"}, "reachlens.a.y": {"reachlens.a.x"}})
    # an import inside a function counts for cycles: the lazy graph holds it, the module-level one does not
    path = tmp_path / "reachlens" / "a" / "x.py"
    path.parent.mkdir(parents=True)
    path.write_text("def f():\n    from reachlens.a.y import g\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "reachlens")
    assert imports_of(path, lazy=True) == {"reachlens.a.y"} and imports_of(path) == set()
