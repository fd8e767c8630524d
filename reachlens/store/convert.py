"""``reachlens convert``: the one step from run directories of an older reachlens to today's format.

One module (past 400 lines) because it is every migration of the run format, each step beside the others: older
shapes are read here and only here, and nothing outside it branches on a record's age. Each step is registered in
:data:`STEPS` (format version -> kind -> its function) and works on the record as a dict and on the directory's
files: it imports no study, so an upgrade is never a method of a study's class.

Older shapes read here:

* an audit directory whose header is ``protocol.json``, a training audit whose plan is ``study.json`` (before
  ``run.json``), and a ``run.json`` without ``format_version``: format 0. A format-0 record is given format 1's
  fields: its status ``complete`` when the run had written its summary, else ``interrupted``; its execution
  settings ``unknown`` (a resumed run records its own); its model's fingerprint of the reachlens before full
  hashing (16 hex digits: the first and last MiB of each file) made the full one, when the model's files are
  still there and still give that old fingerprint (else it is kept, and resuming or comparing the run refuses it).
  0 -> 1: a training study's and a control's reruns renamed by :func:`~reachlens.store.rerun_name`, tables kept as
  CSV rewritten as parquet, sidecar files whose content the record now holds removed;
* format 1 -> 2: a training study's K-sample prompt-format control cut to its first sample per question, nothing
  decoded;
* format 2 -> 3: one candidate table (``candidate_idx`` for an audit's ``sample_idx`` and a routing run's
  ``eval_idx``, ``n_tokens`` for the bank's ``decoded_tokens``, the bank's columns in today's order), a routing
  run's ``realized`` a boolean beside ``deployed_scored``, a comparison's and a control's audits named by relative
  ``children`` (for absolute paths in their options: found inside the run's tree, else copied into it), parts
  named ``U.S.TABLE.parquet``, a training study's ``budget_k`` named ``extended_k``, and every protocol field
  written (its hash made again);
* format 3 -> 4: a probe run's named unions (derived from its bank) moved out of its identity, ``options.unions``
  to ``unions`` beside it. A run of a steer probe that reads a direction file recorded no SHA-256 of it before: it
  reads as it did, and a resume of it is refused (its file cannot be checked);
* format 4 -> 5: a training study's audits recorded as its children by role (``audit:NAME``, ``extended:NAME``,
  ``format:NAME``, ``longer:NAME``, ``reprobe:PARENT--NAME:T``), found where format 4 kept them (a study read its
  audits by folder names then).

Directories are converted deepest first, each under its writer lock: a run's children are in today's format when
its own step runs, so a step reads and writes them as today's reachlens does. Last, a complete run whose
``summary.json`` lacks keys that today's summary has, or whose format this call changed, gets its summary and
derived tables made again from what it stored, in one journaled rewrite: a summary is derived, never patched.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.errors import MissingFileError, ReachlensError
from reachlens.protocol import Protocol
from reachlens.records import BANK_COLUMNS, ROUTE_CANDIDATE_COLUMNS, update_question_table
from reachlens.store.files import fsync_dir, json_text, read_json, rerun_name, single_name, write_json, write_parquet
from reachlens.store.kinds import RUN_KINDS
from reachlens.store.lock import DirectoryLock
from reachlens.store.parts_dir import PartsDir, audit_tables, part_name
from reachlens.store.record import FORMAT, FORMAT_VERSION, newer_format
from reachlens.store.run_dir import RUN_FILE, SUMMARY_FILE, RunDir

__all__ = ["STEPS", "convert", "rename"]

LEGACY_AUDIT = "protocol.json"
LEGACY_STUDY = "study.json"
Step = Callable[[Path, dict[str, Any]], dict[str, Any]]


def convert(path: str | os.PathLike) -> list[tuple[Path, str]]:
    """Convert every run directory at or under ``path`` written in an older format; return ``(directory, what
    changed)`` for each one converted (empty: everything was current already).

    >>> convert("runs/old-demo")  # doctest: +SKIP
    [(PosixPath('runs/old-demo/audits/base'), 'format 0 -> 3'), ...]
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
    converted = {d for d, _ in changed}
    for d in sorted((d for d in _walk(root) if (d / RUN_FILE).is_file()), key=lambda p: len(p.parts), reverse=True):
        RunDir(d).recover()  # a rewrite interrupted after staging is finished (its journal checked) as a writer does
        try:
            what = _refresh_summary(d, d in converted)
        except ReachlensError as err:  # e.g. a comparison whose audits are gone: the rest is still converted
            what = f"summary left as it was, the run cannot be read: {err}"
        if what:
            changed.append((d, what))
    return changed


def _refresh_summary(d: Path, converted: bool) -> str | None:
    """Make a complete run's summary and tables again when its format changed or today's summary has keys its
    ``summary.json`` lacks; say which."""
    cls = RUN_KINDS[RunDir(d).record().kind]
    store = cls.dir_class(d)
    if not store.is_complete():
        return None
    with store.writer():
        run = cls.read(store)
        summary = run.summary()
        old = read_json(d / SUMMARY_FILE, "run summary") if (d / SUMMARY_FILE).is_file() else {}
        new = _new_keys(json.loads(json_text(summary)), old)
        if not new and not converted:
            return None
        store.rewrite(run.tables(), summary, None)
    if not new:
        return "summary made again from its tables"
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
    if (d / LEGACY_STUDY).is_file() or isinstance(version, bool) or version not in range(1, FORMAT_VERSION + 1):
        return 0
    return None if version == FORMAT_VERSION else version


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
    if header.get("kind") not in RUN_KINDS:
        raise ReachlensError(f"{str(d / RUN_FILE)!r} names kind {header.get('kind')!r}, not a kind of run; it was "
                             "damaged or edited by hand")
    for v in range(version, FORMAT_VERSION):
        header = STEPS[v].get(header["kind"], _same)(d, header)
    write_json(d / RUN_FILE, {**header, "format_version": FORMAT_VERSION})
    for legacy in (LEGACY_AUDIT, LEGACY_STUDY):
        (d / legacy).unlink(missing_ok=True)
    fsync_dir(d)
    return f"{was} -> format {FORMAT_VERSION}{note}"


def _same(d: Path, header: dict[str, Any]) -> dict[str, Any]:
    return header


# --- format 0 -> 1 ---------------------------------------------------------------------------------------
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


def _fields_v1(d: Path, header: dict[str, Any], was: str) -> dict[str, Any]:
    """The format-0 record ``header`` of ``d`` with the fields format 1 added."""
    protocol = None if header.get("protocol") is None else Protocol.from_dict(header["protocol"])
    unknown = {key: "unknown" for key in ("max_batch_rows", "dtype", "device")}
    return {**{k: v for k, v in header.items() if k not in ("format", "format_version", "converted_from")},
            "format": FORMAT, "format_version": 1, "kind": header.get("kind", "audit"),
            "status": "complete" if (d / SUMMARY_FILE).is_file() else "interrupted",
            "started": header.get("started"), "finished": header.get("finished"),
            "exec": header.get("exec") or (unknown if protocol is not None else None),
            "protocol_hash": None if protocol is None else protocol.hash,
            "options": dict(header.get("options") or {}), "reachlens_version": header.get("reachlens_version"),
            "command": header.get("command"), "converted_from": was}


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


def table_from_csv(d: Path, csv: str, name: str) -> None:
    """Rewrite the CSV table ``d/csv`` (as an older reachlens kept it) as ``d/NAME.parquet``; remove the CSV."""
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


def _temperature_v0(d: Path, header: dict[str, Any]) -> dict[str, Any]:
    """Format 0 named a temperature control's re-probes ``T{t}`` and kept its table as CSV."""
    table_from_csv(d, "temperature_control.csv", "temperature_control")
    name = Path(header["options"]["trained_dir"]).name
    reruns = {}
    for t in header["options"]["temperatures"]:
        old = f"T{float(t):g}"
        if (d / old / "questions.parquet").is_file():
            left = pd.read_parquet(d / old / "questions.parquet")["question_id"].tolist()
            reruns[f"{float(t):g}"] = rerun_name(name, {"questions": left, "temperature": float(t)})
            rename(d, old, reruns[f"{float(t):g}"])
    return {**header, "reruns": reruns}


def _length_v0(d: Path, header: dict[str, Any]) -> dict[str, Any]:
    """Format 0 named a length control's reruns ``base`` and ``trained`` and kept its table as CSV."""
    table_from_csv(d, "length_control.csv", "length_control")
    change = {"max_new_tokens": header["options"]["max_new_tokens"]}
    for side in ("base", "trained"):
        rename(d, side, rerun_name(side, change))
    return {**header, "reruns": {side: rerun_name(side, change) for side in ("base", "trained")}}


def _recognition_v0(d: Path, header: dict[str, Any]) -> dict[str, Any]:
    """Format 0 kept a CSV copy of a recognition run's questions, and the sets file of the first recognition runs
    held the generation's decode settings in its ``config``."""
    (d / "questions.csv").unlink(missing_ok=True)
    sets = d / "sets.json"
    if sets.is_file():
        s = read_json(sets, "sets file")
        if "protocol" not in s:
            old, task = dict(s["config"]), s.get("task") or {}
            stop = old.get("stop")
            protocol = Protocol.greedy(
                task.get("name", "unknown"), split=task.get("split", "test"), max_new_tokens=old.get("max_new_tokens", 96),
                prompt_format=old.get("generation_format") or "default", stop=None if stop is None else tuple(stop),
                grader=old.get("grader"))
            config = {"recognition_format": old.get("recognition_format"), "batch_size": old.get("batch_size", 32),
                      "max_batch_rows": old.get("max_batch_rows", 256), "max_length": None}
            write_json(sets, {**s, "protocol": protocol.to_dict(), "config": config})
    return header


def _causal_v0(d: Path, header: dict[str, Any]) -> dict[str, Any]:
    """Format 0 kept a causal sweep's tables as CSV, a Markdown copy and the options twice (``KIND.json``)."""
    kind = header["kind"]
    for name in (kind, f"{kind}_per_question", f"{kind}_ranking"):
        table_from_csv(d, f"{name}.csv", name)
    for sidecar in (f"{kind}.md", f"{kind}.json"):
        (d / sidecar).unlink(missing_ok=True)
    return header


def _study_v0(d: Path, header: dict[str, Any]) -> dict[str, Any]:
    """Format 0 named a study's reruns ``NAME-k{K2}``, ``NAME-fmt-{FMT}``, ``NAME-len{N}``, its temperature
    controls' re-probes ``controls/temperature/PARENT--NAME/T{t}`` (without a record of the control), and left out
    an empty trajectory."""
    options = {"trajectory": {}, **header["options"]}
    audits = d / "audits"
    for name in options["models"]:
        native = (options.get("native_formats") or {}).get(name)
        for key, value, old in (("k", options.get("budget_k"), f"{name}-k{options.get('budget_k')}"),
                                ("prompt_format", native, f"{name}-fmt-{native}"),
                                ("max_new_tokens", options.get("length_max_new_tokens"),
                                 f"{name}-len{options.get('length_max_new_tokens')}")):
            if value is not None:
                rename(audits, old, single_name(rerun_name(name, {key: value}), "audit folder name"))
    for a, b in options.get("pairs", ()):
        folder = d / "controls" / "temperature" / single_name(f"{a}--{b}", "control folder name")
        if folder.is_dir() and not (folder / RUN_FILE).is_file():
            _control_header(folder, audits / a, audits / b, b, options.get("control_temperatures", ()))
    return {**header, "options": options}


def _control_header(folder: Path, base: Path, trained: Path, name: str, temperatures) -> None:
    """Give a format-0 study's temperature control, held without a record, today's record (its summary and table
    are made when :func:`convert` refreshes it): its re-probes renamed by today's rule."""
    b, t = read_json(base / RUN_FILE, "run record"), read_json(trained / RUN_FILE, "run record")
    reruns = {}
    for temp in temperatures:
        old = folder / f"T{float(temp):g}"
        if (old / "questions.parquet").is_file():
            left = pd.read_parquet(old / "questions.parquet")["question_id"].tolist()
            reruns[f"{float(temp):g}"] = rerun_name(name, {"questions": left, "temperature": float(temp)})
            rename(folder, old.name, reruns[f"{float(temp):g}"])
    write_json(folder / RUN_FILE, {
        "format": FORMAT, "format_version": FORMAT_VERSION, "kind": "temperature_control", "status": "complete",
        "started": t.get("started"), "finished": t.get("finished"), "protocol": t["protocol"],
        "protocol_hash": Protocol.from_dict(t["protocol"]).hash, "options": {"temperatures": list(temperatures)},
        "model": {"base": b["model"], "trained": t["model"]}, "data": t.get("data"), "exec": t.get("exec"),
        "children": {"base": os.path.relpath(base, folder), "trained": os.path.relpath(trained, folder)},
        "reachlens_version": t.get("reachlens_version"), "command": t.get("command"), "reruns": reruns,
        "converted_from": "format 0 (a study's control without a record)"})


# --- format 1 -> 2 ---------------------------------------------------------------------------------------
def _study_v1(d: Path, header: dict[str, Any]) -> dict[str, Any]:
    """Format 1 held a study's prompt-format control as a K-sample rerun ``NAME--prompt_format=FMT``; today's is its
    first sample per question (``NAME--k=1--prompt_format=FMT``), as the study would decode it now: cut, nothing
    decoded. A rerun under today's name already there is kept (the older one is then left as it is, unread)."""
    options, k = header["options"], header["protocol"]["k"]
    for name, fmt in (options.get("native_formats") or {}).items():
        if k <= 1:
            continue
        old = d / "audits" / single_name(rerun_name(name, {"prompt_format": fmt}), "audit folder name")
        new = d / "audits" / single_name(rerun_name(name, {"k": 1, "prompt_format": fmt}), "audit folder name")
        if (old / RUN_FILE).is_file() and not new.exists():
            _cut_audit(old, new, {"prompt_format": fmt, "k": 1})
            shutil.rmtree(old)
    return header


def _cut_audit(old: Path, new: Path, change: dict[str, Any]) -> None:
    """Write ``new``: the audit ``old`` (in today's format: children are converted first) cut to its first sample per
    question, as far as it got (status and all; its summary is made again by :func:`convert`)."""
    head = read_json(old / RUN_FILE, "run record")
    questions, samples = audit_tables(PartsDir(old))
    samples = samples[samples["candidate_idx"] < 1].reset_index(drop=True)
    questions = update_question_table(questions, samples, 1)
    protocol = Protocol.from_dict({**head["protocol"], "k": 1})
    new.mkdir(parents=True)
    write_parquet(new / "samples.parquet", samples)
    write_parquet(new / "questions.parquet", questions)
    cut = f"{old.name} (k={head['protocol']['k']}): its first 1 sample(s) of each question"
    write_json(new / RUN_FILE, {**head, "protocol": protocol.to_dict(), "protocol_hash": protocol.hash,
                                "change": change, "converted_from": cut})


# --- format 2 -> 3 ---------------------------------------------------------------------------------------
def _common_v2(d: Path, header: dict[str, Any]) -> dict[str, Any]:
    """What format 3 changed for every kind: every protocol field written (its hash made again), ``children``."""
    protocol = header.get("protocol")
    if protocol is not None:
        protocol = Protocol.from_dict(protocol)
        header = {**header, "protocol": protocol.to_dict(), "protocol_hash": protocol.hash}
    return {"children": {}, **header}


def _rewrite_table(path: Path, change: Callable[[pd.DataFrame], pd.DataFrame]) -> None:
    if path.is_file():
        write_parquet(path, change(pd.read_parquet(path)))


def _audit_v2(d: Path, header: dict[str, Any]) -> dict[str, Any]:
    """An audit's samples: ``sample_idx`` is ``candidate_idx``; its parts ``NNNNN.TABLE.parquet`` (numbered in the
    order they were written) are folded into its whole tables (the last of each question kept), so a resume reads
    them as finished questions; unknown execution settings are ``unknown``."""
    rename_idx = lambda df: df.rename(columns={"sample_idx": "candidate_idx"})  # noqa: E731
    _rewrite_table(d / "samples.parquet", rename_idx)
    old = sorted(p for p in (d / "parts").glob("*.parquet") if re.fullmatch(r"\d{5}\.(questions|samples)\.parquet", p.name)) \
        if (d / "parts").is_dir() else []
    for table, key in (("samples", ["question_id", "candidate_idx"]), ("questions", ["question_id"])):
        frames = [pd.read_parquet(d / f"{table}.parquet")] if (d / f"{table}.parquet").is_file() else []
        frames += [rename_idx(pd.read_parquet(p)) for p in old if p.name.endswith(f".{table}.parquet")]
        frames = [f for f in frames if len(f)]
        if frames and any(p.name.endswith(f".{table}.parquet") for p in old):
            whole = pd.concat(frames, ignore_index=True).drop_duplicates(key, keep="last").reset_index(drop=True)
            write_parquet(d / f"{table}.parquet", whole)
    for p in old:
        p.unlink()
    unknown = {key: "unknown" for key in ("max_batch_rows", "dtype", "device")}
    return {**_common_v2(d, header), "exec": header.get("exec") or unknown}


def _routing_v2(d: Path, header: dict[str, Any]) -> dict[str, Any]:
    """A routing run's candidates: ``eval_idx`` is ``candidate_idx``, the candidate columns first; its questions:
    ``realized`` a boolean (was 1/0, NaN when the deployment could not be graded) beside ``deployed_scored``."""
    def candidates(df: pd.DataFrame) -> pd.DataFrame:
        df = df.rename(columns={"eval_idx": "candidate_idx"})
        return df[ROUTE_CANDIDATE_COLUMNS + [c for c in df.columns if c not in ROUTE_CANDIDATE_COLUMNS]]

    def questions(df: pd.DataFrame) -> pd.DataFrame:
        if df["realized"].dtype == bool:
            return df
        graded = df["realized"].notna()
        df = df.assign(realized=(df["realized"] == 1.0) & graded)
        df.insert(df.columns.get_loc("deployed_answer") + 1, "deployed_scored", graded)
        return df

    _rewrite_table(d / "candidates.parquet", candidates)
    _rewrite_table(d / "questions.parquet", questions)
    return _common_v2(d, header)


def _probe_v2(d: Path, header: dict[str, Any]) -> dict[str, Any]:
    """A probe run's bank: ``decoded_tokens`` is ``n_tokens``, the candidate columns first; its parts
    ``UU.SSSSS.parquet`` are ``U.S.candidates.parquet``."""
    def bank(df: pd.DataFrame) -> pd.DataFrame:
        return df.rename(columns={"decoded_tokens": "n_tokens"})[BANK_COLUMNS]

    _rewrite_table(d / "candidates.parquet", bank)
    parts = d / "parts"
    for p in sorted(parts.glob("*.parquet")) if parts.is_dir() else []:
        m = re.fullmatch(r"(\d{2})\.(\d{5})\.parquet", p.name)
        if m:
            write_parquet(parts / part_name((int(m.group(1)), int(m.group(2))), "candidates"), bank(pd.read_parquet(p)))
            p.unlink()
    return _common_v2(d, header)


def _child(d: Path, where: Any, name: str) -> str | None:
    """The path, relative to ``d``, of the run a format-2 record named by its absolute path ``where``: there when that
    is inside ``d``'s tree of runs; else the same path under the tree (a study moved since); else a copy of it made
    inside ``d`` (as ``d/NAME``); None when it is nowhere."""
    if not isinstance(where, str) or not where:
        return None
    tree = d.resolve()
    for parent in tree.parents:
        if (parent / RUN_FILE).is_file():
            tree = parent
    src = Path(where)
    if src.is_absolute() and src.resolve().is_relative_to(tree) and (src / RUN_FILE).is_file():
        return os.path.relpath(src.resolve(), d.resolve())
    for i in range(1, len(src.parts)):
        moved = tree.joinpath(*src.parts[i:])
        if (moved / RUN_FILE).is_file() and moved.resolve().is_relative_to(tree):
            return os.path.relpath(moved.resolve(), d.resolve())
    if (src / RUN_FILE).is_file() and not (d / single_name(name, "child name")).exists():
        shutil.copytree(src, d / name, symlinks=True)
        return name
    return None


def _children_v2(d: Path, header: dict[str, Any], sides: dict[str, str]) -> dict[str, Any]:
    """Format 2 named a run's audits by absolute paths in its options (``sides``: child name -> option); format 3
    names them by relative ``children``."""
    header = _common_v2(d, header)
    options = dict(header["options"])
    children = dict(header["children"])
    for name, option in sides.items():
        found = _child(d, options.pop(option, None), name)
        if found is not None:
            children[name] = found
    return {**header, "options": options, "children": children}


def _comparison_v2(d: Path, header: dict[str, Any]) -> dict[str, Any]:
    return _children_v2(d, header, {"base": "base_dir", "trained": "trained_dir"})


def _length_v2(d: Path, header: dict[str, Any]) -> dict[str, Any]:
    """Also a length control's reruns (``reruns``, relative paths already): its children ``longer_base`` and
    ``longer_trained``."""
    header = _children_v2(d, header, {"base": "base_dir", "trained": "trained_dir"})
    reruns = header.pop("reruns", None) or {}
    children = dict(header["children"])
    for side in ("base", "trained"):
        if isinstance(reruns.get(side), str):
            children[f"longer_{side}"] = reruns[side]
    return {**header, "children": children}


def _study_v2(d: Path, header: dict[str, Any]) -> dict[str, Any]:
    """A training study's ``budget_k`` is ``extended_k``."""
    header = _common_v2(d, header)
    options = {("extended_k" if k == "budget_k" else k): v for k, v in header["options"].items()}
    return {**header, "options": options}


# --- format 3 -> 4 ---------------------------------------------------------------------------------------
def _probe_v3(d: Path, header: dict[str, Any]) -> dict[str, Any]:
    """A probe run's unions are not part of its identity: ``options.unions`` is ``unions``."""
    options = dict(header.get("options") or {})
    return {**header, "options": {k: v for k, v in options.items() if k != "unions"}, "unions": options.get("unions")}


# --- format 4 -> 5 ---------------------------------------------------------------------------------------
def _study_v4(d: Path, header: dict[str, Any]) -> dict[str, Any]:
    """Format 4 found a training study's audits by their folder names; format 5 records each complete one as a
    child by its role (``audit:NAME``, ``extended:NAME``, ``format:NAME``, ``longer:NAME``,
    ``reprobe:PARENT--NAME:T``), its path relative to the study."""
    options, k = header["options"], header["protocol"]["k"]
    children: dict[str, str] = {}

    def add(role: str, folder: Path) -> None:
        if (folder / RUN_FILE).is_file() and read_json(folder / RUN_FILE, "run record").get("status") == "complete":
            children[role] = os.path.relpath(folder, d)

    for name in options["models"]:
        fmt = (options.get("native_formats") or {}).get(name)
        for group, change in (("audit", {}), ("extended", {"k": options.get("extended_k")}),
                              ("format", fmt and {"prompt_format": fmt, **({"k": 1} if k > 1 else {})}),
                              ("longer", {"max_new_tokens": options.get("length_max_new_tokens")})):
            if change is not None and None not in change.values():
                add(f"{group}:{name}", d / "audits" / single_name(rerun_name(name, change) if change else name,
                                                                  "audit folder name"))
    for a, b in options.get("pairs", ()):
        folder = d / "controls" / "temperature" / single_name(f"{a}--{b}", "control folder name")
        reruns = read_json(folder / RUN_FILE, "run record").get("reruns") if (folder / RUN_FILE).is_file() else None
        for t, name in (reruns or {}).items():
            add(f"reprobe:{a}--{b}:{t}", folder / single_name(name, "re-probe folder name"))
    return {**header, "children": children}


STEPS: dict[int, dict[str, Step]] = {
    0: {"temperature_control": _temperature_v0, "length_control": _length_v0, "training_audit": _study_v0,
        "recognition": _recognition_v0, "silence": _causal_v0, "steer": _causal_v0, "units": _causal_v0},
    1: {"training_audit": _study_v1},
    2: {"audit": _audit_v2, "routing": _routing_v2, "probe": _probe_v2, "comparison": _comparison_v2,
        "temperature_control": _comparison_v2, "length_control": _length_v2, "training_audit": _study_v2,
        "recognition": _common_v2, "silence": _common_v2, "steer": _common_v2, "units": _common_v2},
    3: {"probe": _probe_v3},
    4: {"training_audit": _study_v4},
}
"""Format version v -> kind -> the step that brings a directory of that kind from v to v + 1 (a kind a version
left alone is not listed)."""
