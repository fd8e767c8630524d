"""Benchmarks by name: the Hugging Face hub datasets lm-evaluation-harness reads, through ``datasets``.

``load_task("gsm8k")`` (no path) reads the same dataset, config and split as lm-eval's task of that
name, with ``datasets.load_dataset``, which caches it (``HF_DATASETS_CACHE``) and works offline once
cached. A local folder laid out like the hub repository (``git clone`` of the dataset repo, or parquet
files under the repo's paths with its README) is read the same way: ``load_task("gsm8k", folder)``.

=========  ============================  ================  ==============================================
task       hub dataset                   config            split read for ``split="test"``
=========  ============================  ================  ==============================================
gsm8k      ``openai/gsm8k``              ``main``          ``test``
arc        ``allenai/ai2_arc``           ``ARC-Challenge``  ``test``
math500    ``HuggingFaceH4/MATH-500``    (default)         ``test``
piqa       ``baber/piqa``                (default)         ``validation`` (PIQA's test labels are private)
logiqa     ``EleutherAI/logiqa``         ``logiqa``        ``test``
=========  ============================  ================  ==============================================

Rows keep their hub order, so the ids that count records (``gsm8k-{i}``, ``piqa-{i}``, ``logiqa-{i}``)
equal lm-eval's ``doc_id``. Row numbers in error messages are 1-based.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
import tempfile
from pathlib import Path
from typing import Any

from reachlens.errors import ReachlensError

__all__ = ["HubDataset", "is_hub_copy", "read_hub"]


@dataclass(frozen=True)
class HubDataset:
    """Where a benchmark lives on the hub, as lm-eval's task yaml names it."""

    path: str
    """The dataset repository (lm-eval's ``dataset_path``), e.g. ``"openai/gsm8k"``."""
    name: str | None
    """The config (lm-eval's ``dataset_name``), or None for the default one."""
    splits: Mapping[str, str] = field(default_factory=lambda: {"test": "test"})
    """reachlens split name -> the hub split it reads."""

    def split(self, task: str, split: str) -> str:
        try:
            return self.splits[split]
        except KeyError:
            raise ReachlensError(
                f"task {task!r} has no split {split!r} on the hub ({self.path}); pass one of {sorted(self.splits)}"
            ) from None

    def describe(self, split: str) -> str:
        """``"openai/gsm8k (main, test)"``: the dataset, config and hub split."""
        return f"{self.path} ({self.name or 'default'}, {split})"


def is_hub_copy(path: str | Path | None) -> bool:
    """True when ``path`` asks for the hub: None (by name) or a folder (a copy in the hub's layout)."""
    return path is None or Path(path).is_dir()


def read_hub(
    task: str, dataset: HubDataset, split: str, local: str | Path | None = None, required: Sequence[str] = ()
) -> tuple[str, Iterator[tuple[int, dict[str, Any]]]]:
    """``(source, rows)``: the split's rows as ``(row_number, record)`` pairs, 1-based, in hub order.

    ``local`` is a folder holding a copy of the repository in the hub's layout; None reads the hub
    (or ``datasets``' cache of it); a local copy is read afresh each time. Each row must have the
    ``required`` fields, non-empty.

    Raises:
        DataError: a row lacks a required field (names the source and the row).
        ReachlensError: the hub cannot be reached and the dataset is not cached (one line naming the
            dataset and ``--data``), the dataset is unknown, or ``local`` is not a copy of it.
    """
    import datasets

    hub_split = dataset.split(task, split)
    where = dataset.describe(hub_split)
    if local is None:
        try:
            rows = datasets.load_dataset(dataset.path, dataset.name, split=hub_split)
        except ConnectionError as err:
            raise ReachlensError(
                f"task {task!r} reads the hub dataset {where}, which is not in the local cache and the hub "
                f"cannot be reached ({_reason(err)}); connect once to cache it, or pass a local file with "
                "data=PATH"
            ) from err
        except datasets.exceptions.DatasetNotFoundError as err:
            raise ReachlensError(
                f"task {task!r}: the hub dataset {where} was not found ({_reason(err)}); pass a local file "
                "with data=PATH"
            ) from err
        except RuntimeError as err:
            _refuse_script(task, where, err)
            raise
        source = f"hf:{dataset.path}/{dataset.name or 'default'}/{hub_split}"
    else:
        # datasets keys its cache of a local folder by the folder's name and file patterns, so two copies
        # laid out alike would share one entry: read a copy afresh, into memory, with a throwaway cache
        folder = Path(local).resolve()
        with tempfile.TemporaryDirectory(prefix="reachlens-hub-copy-") as cache:
            try:
                rows = datasets.load_dataset(str(folder), dataset.name, split=hub_split, cache_dir=cache,
                                             keep_in_memory=True).to_list()
            except (FileNotFoundError, ValueError) as err:
                raise ReachlensError(
                    f"{str(local)!r} is not a copy of {where} in the hub's layout ({_reason(err)}); pass the "
                    f"folder of a clone of the dataset repository {dataset.path}, or a data file"
                ) from err
            except RuntimeError as err:
                _refuse_script(task, where, err)
                raise
        source = f"{folder} (a copy of {where})"
    return source, _checked(rows, required, source)


def _checked(rows: Any, required: Sequence[str], source: str) -> Iterator[tuple[int, dict[str, Any]]]:
    from reachlens.tasks.jsonl import check_fields

    for number, row in enumerate(rows, start=1):
        record = dict(row)
        check_fields(record, required, source, number)
        yield number, record


def _refuse_script(task: str, where: str, err: RuntimeError) -> None:
    """datasets 4 and later no longer run a dataset's loading script: say so in one line (else re-raise)."""
    if "scripts are no longer supported" in str(err):
        raise ReachlensError(
            f"task {task!r}: {where} is a loading script, which the installed datasets no longer runs "
            f"({_reason(err)}); pass the original file with data=PATH"
        ) from err


def _reason(err: BaseException) -> str:
    """The first line of an exception's message (the CLI prints one line)."""
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
