"""The argparse types of reachlens' flags: each reads one value or says, in one line, what it must be."""

from __future__ import annotations

import argparse

__all__ = ["comma_list", "nonneg_float", "positive_int"]


def positive_int(name: str):
    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {s!r}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {v}")
        return v

    return parse


def nonneg_float(name: str):
    def parse(s: str) -> float:
        try:
            v = float(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {s!r}") from None
        if not v >= 0:
            raise argparse.ArgumentTypeError(f"{name} must be >= 0, got {v}")
        return v

    return parse


def comma_list(name: str, kind):
    """An argparse type: ``"0,1,2"`` -> ``[0, 1, 2]`` with ``kind`` applied to each item."""

    def parse(s: str) -> list:
        try:
            return [kind(x) for x in s.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a comma-separated list, got {s!r}") from None

    return parse
