"""The ``reachlens`` command line (thin commands over the Python API)."""

from reachlens.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
