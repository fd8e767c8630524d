"""A griffe extension for the API reference: reachlens' docstrings are written for a reader of the source (Sphinx
roles, ``>>>`` examples inline); Markdown needs each made explicit.

* a Sphinx role (``:class:`~reachlens.store.Run```, ``:func:`audit```) becomes the code span a reader sees (the
  last dotted part after a ``~``);
* a ``>>>`` example (its ``...`` continuations and output lines, up to a blank line) becomes a fenced ``pycon``
  block at its own indentation, its ``# doctest:`` flags left out.
"""

from __future__ import annotations

import re

import griffe

_DOCTEST_FLAG = re.compile(r"\s*# doctest: \+[A-Z_, +]+$")
_ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|obj|exc|py:\w+):`(~?)([^`]+)`")


def _code_span(match: re.Match) -> str:
    tilde, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


def _fence_examples(text: str) -> str:
    """Every run of ``>>>`` lines and their output, fenced as ``pycon`` at its indentation."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        if not line.lstrip().startswith(">>>"):
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        block = []
        while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
            block.append(_DOCTEST_FLAG.sub("", lines[i][len(indent):]))
            i += 1
        if out and out[-1].strip():
            out.append("")
        out += [f"{indent}```pycon", *(indent + b for b in block), f"{indent}```", ""]
    return "\n".join(out)


class ReadableDocstrings(griffe.Extension):
    """Sphinx roles as code spans and ``>>>`` examples as fenced blocks, in every docstring."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _fence_examples(_ROLE.sub(_code_span, obj.docstring.value))
