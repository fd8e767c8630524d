"""The viewer's filter: a short expression over a question table's columns, read without ``eval``.

A view is linked and reproduced by its filter, written in the address bar (``?filter=...``) and accepted as it is
by :func:`~reachlens.view.questions_of` in Python: ``fate == "gained" and base_n_correct >= 1``. The grammar is a
small part of Python's: column names, string, number and boolean literals (``True``, ``False``), a list or tuple of
them, the comparisons ``== != < <= > >= in not in``, ``and``, ``or``, ``not``, parentheses and a bare boolean
column (``base_reachable``). It is parsed with :mod:`ast` and evaluated here, node by node, on a DataFrame's
columns: an address is data, never code (no call, attribute, subscript or name but a column is accepted), and a
filter that does not parse or names an unknown column is one line naming it and the columns there are.

>>> import pandas as pd
>>> df = pd.DataFrame({"fate": ["gained", "kept"], "base_n_correct": [2, 0]})
>>> matches(df, 'fate == "gained" and base_n_correct >= 1').tolist()
[True, False]
"""

from __future__ import annotations

import ast
import operator
from typing import Any

import numpy as np
import pandas as pd

from reachlens.errors import ReachlensError

__all__ = ["FILTER_CHARS", "matches"]

FILTER_CHARS = 2000
"""The longest filter accepted (an address is not a program)."""

_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}


def matches(df: pd.DataFrame, expression: str | None) -> pd.Series:
    """The rows of ``df`` that ``expression`` holds for (a boolean Series on ``df``'s index; all when empty).

    Raises:
        ReachlensError: the expression does not parse, uses anything beyond the grammar above, or names a column
            ``df`` does not have (the message lists those it has).
    """
    text = (expression or "").strip()
    if not text:
        return pd.Series(True, index=df.index)
    if len(text) > FILTER_CHARS:
        raise ReachlensError(f"filter of {len(text)} characters is longer than {FILTER_CHARS}; write a shorter one")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as err:
        raise ReachlensError(f"filter {text!r} does not parse ({err.msg}); write e.g. "
                             "'fate == \"gained\" and base_n_correct >= 1'") from None
    out = _eval(tree.body, df, text)
    if not isinstance(out, pd.Series):
        return pd.Series(bool(out), index=df.index)
    return out.fillna(False).astype(bool)


def _eval(node: ast.AST, df: pd.DataFrame, text: str) -> Any:
    if isinstance(node, ast.BoolOp):
        parts = [_as_mask(_eval(v, df, text), df) for v in node.values]
        combine = np.logical_and if isinstance(node.op, ast.And) else np.logical_or
        out = parts[0]
        for p in parts[1:]:
            out = pd.Series(combine(out, p), index=df.index)
        return out
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return ~_as_mask(_eval(node.operand, df, text), df)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _eval(node.operand, df, text)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value
    if isinstance(node, ast.Compare):
        return _compare(node, df, text)
    if isinstance(node, ast.Name):
        if node.id in ("True", "False"):
            return node.id == "True"
        if node.id not in df.columns:
            raise ReachlensError(f"filter {text!r} names {node.id!r}, which is no column here; the columns are "
                                 f"{', '.join(map(str, df.columns))}")
        return df[node.id]
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool)):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e, text) for e in node.elts]
    raise ReachlensError(f"filter {text!r}: {ast.get_source_segment(text, node) or type(node).__name__!r} is not "
                         "allowed (columns, literals, comparisons, in, and, or, not, parentheses)")


def _literal(node: ast.AST, text: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, (int, float)):
        return -node.operand.value
    raise ReachlensError(f"filter {text!r}: a list holds literals only")


def _compare(node: ast.Compare, df: pd.DataFrame, text: str) -> pd.Series:
    left = _eval(node.left, df, text)
    out = pd.Series(True, index=df.index)
    for op, right_node in zip(node.ops, node.comparators):
        right = _eval(right_node, df, text)
        if isinstance(op, (ast.In, ast.NotIn)):
            if not isinstance(right, list) or not isinstance(left, pd.Series):
                raise ReachlensError(f"filter {text!r}: write 'COLUMN in [a, b]'")
            hit = left.isin(right)
            hit = ~hit if isinstance(op, ast.NotIn) else hit
        elif type(op) in _COMPARE:
            hit = _compare_one(_COMPARE[type(op)], left, right, text)
        else:
            raise ReachlensError(f"filter {text!r}: 'is' is not allowed; write == or !=")
        out = out & _as_mask(hit, df)
        left = right
    return out


def _compare_one(op, left: Any, right: Any, text: str) -> Any:
    try:
        return op(left, right)
    except TypeError:
        raise ReachlensError(f"filter {text!r} compares values of different types (a text with a number?)") from None


def _as_mask(value: Any, df: pd.DataFrame) -> pd.Series:
    if isinstance(value, pd.Series):
        return value.fillna(False).astype(bool)
    return pd.Series(bool(value), index=df.index)
