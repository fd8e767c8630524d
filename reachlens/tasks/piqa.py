"""PIQA: physical commonsense, two candidate solutions per goal (Bisk et al. 2020).

By name (no path) it reads ``baber/piqa`` (the parquet copy lm-eval-harness' ``piqa`` task reads), split
``validation``, whose rows hold ``goal``, ``sol1``, ``sol2`` and ``label``. Otherwise the data is the authors' ``valid.jsonl`` (``goal``, ``sol1``, ``sol2``) plus ``valid-labels.lst``
beside it, one ``0``/``1`` a line, aligned with the JSONL records by position. The two options are
labelled ``A`` (sol1) and ``B`` (sol2); the gold answer is that letter. Option texts are kept exactly
(some end in a space), as lm-eval-harness scores them. The question id is ``piqa-{index}``, the
0-based index of the record in the file, stable for the same file (PIQA has no ids of its own).
"""

from __future__ import annotations

from pathlib import Path

from reachlens.errors import ReachlensError
from reachlens.tasks.base import DataError, Question, Task
from reachlens.tasks.hub import HubDataset, is_hub_copy, read_hub
from reachlens.tasks.jsonl import make_task, mc_formats, read_jsonl
from reachlens.tasks.registry import register_task, require_file

__all__ = ["HUB", "piqa_files", "load_piqa"]

STOP = ("\nQuestion:",)
_SPLIT_FILES = {"test": "valid", "validation": "valid", "valid": "valid", "train": "train"}
HUB = HubDataset("baber/piqa", None, {"test": "validation", "validation": "validation", "valid": "validation",
                                     "train": "train"})


def piqa_files(path: str | Path | None, split: str = "test") -> tuple[Path, Path]:
    """The JSONL file and its labels file, from either the JSONL path or the folder holding it.

    In a folder, ``split`` picks the file: ``"train"`` reads ``train.jsonl``; ``"test"``,
    ``"validation"`` and ``"valid"`` read ``valid.jsonl``, because PIQA's test labels are not
    public (lm-eval-harness evaluates on the validation split too). The labels file of ``X.jsonl``
    is ``X-labels.lst``.

    >>> piqa_files("shared/data/piqa")  # doctest: +SKIP
    (PosixPath('shared/data/piqa/valid.jsonl'), PosixPath('shared/data/piqa/valid-labels.lst'))
    """
    if path is not None and Path(path).is_dir():
        if split not in _SPLIT_FILES:
            raise ReachlensError(f"PIQA has no split {split!r}; pass one of {sorted(_SPLIT_FILES)}")
        path = Path(path) / f"{_SPLIT_FILES[split]}.jsonl"
    data = require_file("piqa", path)
    return data, require_file("piqa", data.with_name(f"{data.stem}-labels.lst"))


def _read_labels(path: Path) -> list[str]:
    """The labels of a labels file, one a line; every line must be ``0`` or ``1``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, label in enumerate(lines, start=1):
        if label.strip() not in ("0", "1"):
            raise DataError(str(path), number, f"label {label!r} is not '0' (sol1) or '1' (sol2)")
    return [label.strip() for label in lines]


@register_task("piqa")
def load_piqa(
    path: str | Path | None = None, split: str = "test", seed: int = 0, *, default_format: str = "mc"
) -> Task:
    """PIQA from the hub (``baber/piqa``) or ``valid.jsonl`` and ``valid-labels.lst``; grader ``"choice"``.

    ``seed`` is unused (nothing is shuffled). ``metadata["recognition_format"]`` is ``"lm_eval"``,
    lm-eval-harness' ``"Question: {goal}\\nAnswer:"`` context.

    Args:
        path: None for the hub, ``valid.jsonl`` or the folder holding it (see :func:`piqa_files`), or a
            folder holding a copy of the hub repository.
        split: which split (hub) or file (a folder of the authors' files) to read; ``"test"`` reads
            the validation split, as lm-eval-harness does.
        default_format: ``"mc"`` (generation of ``A``/``B``) or ``"lm_eval"``.

    >>> len(load_piqa("shared/data/piqa"))  # doctest: +SKIP
    1838
    """
    metadata: dict[str, str] = {"recognition_format": "lm_eval"}
    if is_hub_copy(path) and not _holds_authors_files(path):
        data, rows = read_hub("piqa", HUB, split, path, ("goal", "sol1", "sol2"))
        records, labels = [], []
        for number, row in rows:
            if str(row.get("label")) not in ("0", "1"):
                raise DataError(data, number, f"label {row.get('label')!r} is not 0 (sol1) or 1 (sol2)")
            records.append((number, row))
            labels.append(str(row["label"]))
    else:
        data, labels_file = piqa_files(path, split)
        records = list(read_jsonl(data, ("goal", "sol1", "sol2")))
        labels = _read_labels(labels_file)
        if len(labels) != len(records):
            raise DataError(str(labels_file), None, f"has {len(labels)} labels but {str(data)!r} has "
                            f"{len(records)} records; the two files must align line by line")
        metadata["labels_file"] = str(labels_file)
    questions = [
        Question(
            f"piqa-{index}", {"question": record["goal"], "goal": record["goal"]}, "AB"[int(label)],
            (str(record["sol1"]), str(record["sol2"])), ("A", "B"),
        )
        for index, ((_, record), label) in enumerate(zip(records, labels))
    ]
    return make_task("piqa", data, questions, mc_formats(), default_format, "choice", STOP, metadata)


def _holds_authors_files(path: str | Path | None) -> bool:
    """A folder with the authors' ``valid.jsonl`` or ``train.jsonl`` (not a copy of the hub repository)."""
    return path is not None and any((Path(path) / f"{stem}.jsonl").is_file() for stem in ("valid", "train"))
