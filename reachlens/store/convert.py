"""``reachlens convert``: the one step from run directories of an older reachlens to today's format.

Four older shapes are read here, and only here:

* an audit directory whose header is ``protocol.json`` (before ``run.json``);
* a training audit whose plan is ``study.json`` (before ``run.json``, or beside it);
* a ``run.json`` without ``format_version`` (format 0: no status, no times, no execution settings);
* a ``run.json`` of format 1 (a training study's prompt-format control a K-sample rerun).

A format-0 record is given today's fields: its status ``complete`` when the run had written its summary, else
``interrupted``; its execution settings unrecorded (``exec`` null: a resumed run records its own); its model's
fingerprint of the reachlens before full hashing (16 hex digits: the first and last MiB of each file) made the
full one, when the model's files are still there and still give that old fingerprint (else it is kept, and
resuming or comparing the run refuses it as another model). Then the
kind's own :meth:`~reachlens.store.Run.upgrade`, once per format version, brings the directory's layout to
today's (format 0 -> 1: a training study's and a control's reruns renamed by :func:`reachlens.runner.rerun_name`,
tables kept as CSV rewritten as parquet, sidecar files whose content the record now holds removed; 1 -> 2: a
training study's K-sample prompt-format control cut to its first sample per question, nothing decoded), and
the record is written in format :data:`~reachlens.store.FORMAT_VERSION`. Directories are converted deepest
first, each under its writer lock, so a study's audits are current before the study is.

Last, a complete run whose ``summary.json`` lacks keys that today's summary has (an audit's ``maj_K`` and
``selection_gap``, a study's per-checkpoint ones) gets its summary and derived tables made again from what it
stored, in one journaled rewrite: a summary is derived, never patched.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from reachlens.errors import MissingFileError, ReachlensError
from reachlens.protocol import Protocol
from reachlens.store.files import fsync_dir, json_text, read_json, single_name, write_json
from reachlens.store.kinds import RUN_KINDS
from reachlens.store.lock import DirectoryLock
from reachlens.store.record import FORMAT, FORMAT_VERSION, newer_format
from reachlens.store.run_dir import RUN_FILE, SUMMARY_FILE, RunDir

__all__ = ["convert"]

LEGACY_AUDIT = "protocol.json"
LEGACY_STUDY = "study.json"


def convert(path: str | os.PathLike) -> list[tuple[Path, str]]:
    """Convert every run directory at or under ``path`` written in an older format; return ``(directory, what
    changed)`` for each one converted (empty: everything was current already).

    >>> convert("runs/old-demo")  # doctest: +SKIP
    [(PosixPath('runs/old-demo/audits/base'), 'format 0 -> 1'), ...]
    """
    root = Path(path)
    if not root.exists():
        raise MissingFileError(f"{str(root)!r} does not exist; give a run directory to convert")
    if not root.is_dir():
        raise MissingFileError(f"{str(root)!r} is not a directory; give a run directory to convert")
    dirs = list(_walk(root))
    found = {d: v for d in dirs if (v := _version(d)) is not None}
    if not found and not any((d / RUN_FILE).is_file() for d in dirs):
        raise ReachlensError(f"{str(root)!r} holds no reachlens run directory (no {RUN_FILE}, {LEGACY_AUDIT} or "
                             f"{LEGACY_STUDY} in it or under it)")
    changed = []
    for d in sorted(found, key=lambda p: len(p.parts), reverse=True):
        with DirectoryLock(d):
            changed.append((d, _convert(d, found[d])))
    for d in sorted((d for d in _walk(root) if (d / RUN_FILE).is_file()), key=lambda p: len(p.parts), reverse=True):
        RunDir(d).recover()  # a rewrite interrupted after staging is finished (its journal checked) as a writer does
        try:
            what = _refresh_summary(d)
        except ReachlensError as err:  # e.g. a comparison whose audits moved: the rest is still converted
            what = f"summary left as it was, the run cannot be read: {err}"
        if what:
            changed.append((d, what))
    return changed


def _refresh_summary(d: Path) -> str | None:
    """Make a complete run's summary and tables again when today's summary has keys its ``summary.json``
    lacks; say which."""
    cls = RUN_KINDS[RunDir(d).record().kind]
    store = cls.dir_class(d)
    if not store.is_complete():
        return None
    with store.writer():
        run = cls.read(store)
        summary = run.summary()
        new = _new_keys(json.loads(json_text(summary)), read_json(d / SUMMARY_FILE, "run summary"))
        if not new:
            return None
        store.rewrite(run.tables(), summary, None)
    shown = ", ".join(new[:6]) + (f" and {len(new) - 6} more" if len(new) > 6 else "")
    return f"summary made again from its tables (new: {shown})"


def _new_keys(new: Any, old: Any, prefix: str = "") -> list[str]:
    """The keys of ``new`` (nested dicts included, dotted) that ``old`` lacks."""
    if not isinstance(new, dict) or not isinstance(old, dict):
        return []
    out = []
    for key, value in new.items():
        if key not in old:
            out.append(f"{prefix}{key}")
        else:
            out += _new_keys(value, old[key], f"{prefix}{key}.")
    return out


def _walk(folder: Path):
    """``folder`` and every folder under it, links not followed (a link never leads the walk out of the tree or
    round a loop)."""
    yield folder
    for child in sorted(folder.iterdir()):
        if child.is_dir() and not child.is_symlink() and child.name != "parts" and not child.name.startswith("."):
            yield from _walk(child)


def _version(d: Path) -> int | None:
    """The older format version of ``d`` (0 up to today's - 1), or None when it is current or no run at all."""
    if not (d / RUN_FILE).is_file():
        return 0 if (d / LEGACY_AUDIT).is_file() or (d / LEGACY_STUDY).is_file() else None
    header = read_json(d / RUN_FILE, "run record")
    version = header.get("format_version") if isinstance(header, dict) else None
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
        raise ReachlensError(f"{str(d / RUN_FILE)!r} has format_version {version!r}, which no reachlens wrote (an "
                             f"integer from 1 to {FORMAT_VERSION}, or none at all in format 0); it was damaged or "
                             "edited by hand: restore it (nothing was changed)")
    if newer_format(version):
        raise ReachlensError(f"{str(d)!r} is in run format {version}, written by a newer reachlens; this one "
                             f"converts up to {FORMAT_VERSION}: upgrade reachlens (nothing was changed)")
    if (d / LEGACY_STUDY).is_file() or version not in range(1, FORMAT_VERSION + 1):
        return 0
    return None if version == FORMAT_VERSION else version


def _header_v0(d: Path) -> dict[str, Any]:
    """The format-0 record of ``d``, from ``run.json``, ``protocol.json`` or ``study.json``."""
    if (d / RUN_FILE).is_file():
        header = read_json(d / RUN_FILE, "run record")
    elif (d / LEGACY_AUDIT).is_file():
        header = {**read_json(d / LEGACY_AUDIT, "audit header"), "kind": "audit"}
    else:
        plan = read_json(d / LEGACY_STUDY, "study file")["plan"]
        header = {"kind": "training_audit", "protocol": plan["protocol"], "model": dict(plan["models"]),
                  "data": None, "options": {k: v for k, v in plan.items() if k != "protocol"}}
    if not isinstance(header, dict) or "model" not in header:
        raise ReachlensError(f"{str(d)!r} holds no readable run record; it was not written by reachlens")
    return header


def _convert(d: Path, version: int) -> str:
    note = ""
    if version == 0:
        was = "protocol.json" if not (d / RUN_FILE).is_file() and (d / LEGACY_AUDIT).is_file() else "format 0"
        header = _fields_v1(d, _header_v0(d), was)
        header["model"], note = _full_identity(header["model"])
    else:
        was = f"format {version}"
        header = read_json(d / RUN_FILE, "run record")
        header = {**header, "converted_from": header.get("converted_from", was)}
    for v in range(version, FORMAT_VERSION):
        header = RUN_KINDS[header["kind"]].upgrade(d, header, v)
    write_json(d / RUN_FILE, {**header, "format_version": FORMAT_VERSION})
    for legacy in (LEGACY_AUDIT, LEGACY_STUDY):
        (d / legacy).unlink(missing_ok=True)
    fsync_dir(d)
    return f"{was} -> format {FORMAT_VERSION}{note}"


_OLD_FINGERPRINT = re.compile(r"[0-9a-f]{16}")


def _full_identity(model: Any) -> tuple[Any, str]:
    """A format-0 model identity with today's full fingerprint, when its old one (16 hex digits) still names the
    model's files; else as it was, with a note saying why."""
    if not isinstance(model, dict) or not _OLD_FINGERPRINT.fullmatch(str(model.get("fingerprint"))):
        return model, ""  # already full, unknown, or a study's plan of checkpoints
    from reachlens.models import model_identity, resolve_spec

    spec = str(model.get("spec"))
    try:
        target, local = resolve_spec(spec)
        old = _old_fingerprint(Path(target)) if local else hashlib.sha256(spec.encode()).hexdigest()[:16]
        if old != model["fingerprint"]:
            return model, f"; model {spec!r}: its files are not the ones recorded (fingerprint kept)"
        return dataclasses.asdict(model_identity(spec)), ""
    except (ReachlensError, OSError) as err:
        return model, f"; model {spec!r} not found ({err}; fingerprint kept)"


def _old_fingerprint(folder: Path) -> str:
    """The fingerprint of a model folder as reachlens recorded it before full hashing: the name and size of every
    ``.safetensors`` and ``.json`` file, with its first and last MiB."""
    h = hashlib.sha256()
    for f in sorted(folder.iterdir()):
        if f.suffix in (".safetensors", ".json") and f.is_file():
            size = f.stat().st_size
            h.update(f"{f.name}:{size}".encode())
            with f.open("rb") as fh:
                h.update(fh.read(1 << 20))
                if size > 2 << 20:
                    fh.seek(-(1 << 20), os.SEEK_END)
                    h.update(fh.read())
    return h.hexdigest()[:16]


def _fields_v1(d: Path, header: dict[str, Any], was: str) -> dict[str, Any]:
    """The format-0 record ``header`` of ``d`` with the fields format 1 added."""
    protocol = None if header.get("protocol") is None else Protocol.from_dict(header["protocol"])
    header = {**{k: v for k, v in header.items() if k not in ("format", "format_version", "converted_from")},
              "format": FORMAT, "format_version": 1, "kind": header.get("kind", "audit"),
              "status": "complete" if (d / SUMMARY_FILE).is_file() else "interrupted",
              "started": header.get("started"), "finished": header.get("finished"), "exec": header.get("exec"),
              "protocol_hash": None if protocol is None else protocol.hash,
              "options": dict(header.get("options") or {}), "reachlens_version": header.get("reachlens_version"),
              "command": header.get("command"), "converted_from": was}
    return header


def table_from_csv(d: Path, csv: str, name: str) -> None:
    """Rewrite the CSV table ``d/csv`` (as an older reachlens kept it) as ``d/NAME.parquet``; remove the CSV."""
    import pandas as pd

    from reachlens.store.files import write_parquet

    if (d / csv).is_file():
        write_parquet(d / f"{name}.parquet", pd.read_csv(d / csv))
        (d / csv).unlink()


def rename(folder: Path, old: str, new: str) -> None:
    """Move the run directory ``folder/old`` to ``folder/new``, its name under today's rule (refused if that name
    is taken). Both are single folder names (:func:`~reachlens.store.single_name`): a name a stored record gave
    never moves a folder out of the run being converted, nor creates one elsewhere."""
    src = folder / single_name(old, "older folder name")
    dst = folder / single_name(new, "folder name")
    if src == dst or not src.is_dir() or src.is_symlink():
        return
    if os.path.lexists(dst):
        raise ReachlensError(f"cannot rename {str(src)!r} to {str(dst)!r}: that name is taken; move it aside first")
    os.replace(src, dst)
    fsync_dir(folder)
