"""Quiet dependencies while a reachlens command runs.

transformers, huggingface_hub, datasets and TransformerLens print progress bars ("Loading weights",
"Generating test split") and info or warning logs between reachlens' own lines. :func:`quiet_dependencies`
turns those off with each library's own switches (its logging verbosity and its progress-bar flag) and
ignores the warnings raised from inside those libraries; errors still raise, and ERROR logs still print.
Everything is restored on exit. The CLI wraps every command in it; library calls are left alone.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["dependencies_quiet", "quiet_dependencies"]

_LIBRARIES = ("transformers", "transformer_lens", "huggingface_hub", "datasets", "accelerate")
_WARNING_MODULES = r"(transformers|transformer_lens|huggingface_hub|datasets|accelerate)(\.|$)"
_depth = 0


class _DropLibraryRecords(logging.Filter):
    """Drops records below ERROR that a library logged through the root logger (``logging.warning(...)``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        path = record.pathname.replace("\\", "/")
        return not any(f"/{name}/" in path for name in _LIBRARIES)


def dependencies_quiet() -> bool:
    """Whether :func:`quiet_dependencies` is in force (so worker processes can be made quiet too)."""
    return _depth > 0


@contextmanager
def quiet_dependencies() -> Iterator[None]:
    """Silence the libraries' progress bars, info and warnings inside the block; restore them after."""
    global _depth
    import datasets
    import huggingface_hub.utils as hub
    import transformers.utils.logging as hf_logging

    loggers = [logging.getLogger(name) for name in _LIBRARIES]
    saved = (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled(), hub.are_progress_bars_disabled(),
             datasets.logging.get_verbosity(), datasets.is_progress_bar_enabled(), [lg.level for lg in loggers])
    root_filter = _DropLibraryRecords()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    hub.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    logging.getLogger().addFilter(root_filter)
    _depth += 1
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=_WARNING_MODULES)
            yield
    finally:
        _depth -= 1
        logging.getLogger().removeFilter(root_filter)
        verbosity, hf_bars, hub_off, ds_verbosity, ds_bars, levels = saved
        hf_logging.set_verbosity(verbosity)
        (hf_logging.enable_progress_bar if hf_bars else hf_logging.disable_progress_bar)()
        (hub.disable_progress_bars if hub_off else hub.enable_progress_bars)()
        datasets.logging.set_verbosity(ds_verbosity)
        (datasets.enable_progress_bars if ds_bars else datasets.disable_progress_bars)()
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
