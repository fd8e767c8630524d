"""The run record (``run.json``): what made a run, in one shape for every kind, and its identity.

``run.json`` holds, for every kind of run::

    format, format_version   "reachlens-run", FORMAT_VERSION (an integer; older directories: `reachlens convert`)
    kind                     which study (the registry of kinds: reachlens.store.run)
    status                   running | complete | failed | interrupted
    started, finished        ISO 8601 times (UTC); finished is null until the run ends
    protocol, protocol_hash  the decode spec, resolved against the task (null for a run that decodes nothing)
    options                  the study's own options beside the protocol
    model                    the model's identity (spec, fingerprint); a run over several models maps each role
    data                     the task's data identity (file hash, or generator and seed)
    exec                     the execution settings that can change a result (reachlens.execution.RECORDED)
    children                 the runs a run is made of, by name: paths relative to its directory, inside its tree
    reachlens_version, command

Kind, protocol, options, model, data and exec are the run's identity: a directory holding a run is never
written with another (:func:`run_differences` names what differs). Status, times, children, version and command
describe it. :meth:`RunRecord.from_dict` is the one place a stored record is read and checked.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reachlens.errors import ReachlensError
from reachlens.protocol import Protocol
from reachlens.store.kinds import RUN_KINDS
from reachlens.version import __version__

__all__ = [
    "FORMAT", "FORMAT_VERSION", "STATUSES", "RunRecord", "check_fields", "fix_for", "newer_format", "now",
    "recording_command", "run_differences",
]

FORMAT = "reachlens-run"
FORMAT_VERSION = 5
"""The version of the run format. 1: ``format_version``, ``status``, ``started``/``finished`` and ``exec`` in
``run.json``, every table a parquet file, one directory rule for reruns. 2: a training study's prompt-format
control is a rerun at ``k=1`` (``audits/NAME--k=1--prompt_format=FMT``, was the K-sample
``NAME--prompt_format=FMT``). 3: one candidate table (``candidate_idx`` and ``n_tokens`` in every study's
candidates), a routing run's ``realized`` a boolean beside ``deployed_scored``, ``children`` (relative) in place of
absolute audit paths, parts named ``U.S.TABLE.parquet``, every protocol field written, ``extended_k``. 4: a probe
run's named unions beside its identity (``unions``, was ``options.unions``: derived from the bank, a resume may
name others) and the SHA-256 of a file a probe reads in its ``options.inputs``.
Directories written before are rewritten by ``reachlens convert`` (:mod:`reachlens.store.convert`)."""
STATUSES = ("running", "complete", "failed", "interrupted")
"""A run's status: ``running`` while (or, after a ``kill -9``, as if) a writer writes it; ``complete`` once its
summary is written; ``failed`` when an error stopped it; ``interrupted`` when it was stopped (Ctrl-C), or
read while ``running`` with no live writer (:meth:`reachlens.store.RunDir.record`)."""

_COMMAND: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar("reachlens_command", default=None)


def newer_format(version: object) -> bool:
    """Whether ``version`` (a record's ``format_version``) is one a newer reachlens wrote."""
    return isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION


@contextlib.contextmanager
def recording_command(argv: Sequence[str]) -> Iterator[None]:
    """Within the block, runs record ``argv`` as the command that made them (the CLI sets it)."""
    token = _COMMAND.set(tuple(argv))
    try:
        yield
    finally:
        _COMMAND.reset(token)


def now() -> str:
    """The current time as run records write it (ISO 8601, UTC, seconds)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _jsonable(obj: Any) -> Any:
    """Options as JSON reads them back (tuples as lists), so a record equals itself after a round trip."""
    return json.loads(json.dumps(obj, default=str))


@dataclass(frozen=True)
class RunRecord:
    """What made a run: ``run.json``. Every stored result carries it.

    >>> RunRecord.new("audit", Protocol("arith", k=8), {"spec": "zoo:base", "fingerprint": "sha256:..."}).status
    'running'
    """

    kind: str
    """Which study: a name of the registry of kinds (``audit``, ``comparison``, ``routing``, ...)."""
    protocol: Protocol | None
    """The decode spec (resolved against the task); None for a run that decodes nothing of its own."""
    model: dict[str, Any]
    """Model identity (:func:`reachlens.models.identity_of`); a run over several models maps each
    role or name to its identity (a comparison: ``base`` and ``trained``)."""
    data: dict[str, Any] | None = None
    """Data identity of the task (:attr:`reachlens.tasks.Task.data_identity`); None when unknown."""
    options: dict[str, Any] = field(default_factory=dict)
    """The study's own options beside the protocol (a routing run's space, strategy and budget)."""
    exec: dict[str, Any] | None = None
    """The execution settings that can change the result (:data:`reachlens.execution.RECORDED`: batch rows,
    dtype, device); None for a run that decodes nothing, or one converted from before they were recorded."""
    reachlens_version: str | None = None
    """The reachlens version that started the run."""
    command: tuple[str, ...] | None = None
    """The command line that started the run (None: started from Python)."""
    status: str = "running"
    """One of :data:`STATUSES`."""
    started: str | None = None
    """When the run was first started (ISO 8601, UTC)."""
    finished: str | None = None
    """When it completed, failed or was interrupted (None while it runs)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Descriptive fields that are not part of the run's identity (task source, question count, rerun of)."""
    children: dict[str, str] = field(default_factory=dict)
    """The runs this run is made of (:meth:`reachlens.store.Run.children`), by name: each directory's path relative
    to this run's, inside its tree (:meth:`reachlens.store.RunDir.inside`)."""

    def __post_init__(self) -> None:
        if self.kind not in RUN_KINDS:
            raise ReachlensError(f"kind={self.kind!r} is not a kind of run; known: {', '.join(RUN_KINDS.names())}")
        if self.status not in STATUSES:
            raise ReachlensError(f"status={self.status!r} is not a run status; one of {', '.join(STATUSES)}")

    @classmethod
    def new(
        cls, kind: str, protocol: Protocol | None, model: Mapping[str, Any], data: Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None, extra: Mapping[str, Any] | None = None,
        exec: Mapping[str, Any] | None = None,
    ) -> RunRecord:
        """A record for a run starting now: this reachlens version and the command running it."""
        return cls(kind, protocol, dict(model), dict(data) if data else None, _jsonable(dict(options or {})),
                   None if exec is None else dict(exec), __version__, _COMMAND.get(), "running", now(), None,
                   _jsonable(dict(extra or {})))

    def with_status(self, status: str) -> RunRecord:
        """This record with ``status`` (and, for an ended run, its end time now)."""
        return dataclasses.replace(self, status=status, finished=None if status == "running" else now())

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "format_version": FORMAT_VERSION, "kind": self.kind, "status": self.status,
            "started": self.started, "finished": self.finished,
            "protocol": None if self.protocol is None else self.protocol.to_dict(),
            "protocol_hash": None if self.protocol is None else self.protocol.hash,
            "options": dict(self.options), "model": dict(self.model), "data": self.data,
            "exec": None if self.exec is None else dict(self.exec), "children": dict(self.children),
            "reachlens_version": self.reachlens_version,
            "command": None if self.command is None else list(self.command), **self.extra,
        }

    @classmethod
    def from_dict(cls, d: Any, where: str = "run record") -> RunRecord:
        """Read (and check) a stored ``run.json``; ``where`` names it in the one-line error of a bad one."""
        if not isinstance(d, Mapping) or d.get("format") != FORMAT:
            raise ReachlensError(f"{where} is not a reachlens run record; is this a reachlens run directory?")
        version = d.get("format_version")
        if newer_format(version):
            raise ReachlensError(f"{where} is in run format {version}, written by a newer reachlens; this one reads "
                                 f"{FORMAT_VERSION}: upgrade reachlens to read it")
        if version != FORMAT_VERSION:
            raise ReachlensError(
                f"{where} is in run format {version if version is not None else 0}, this reachlens reads "
                f"{FORMAT_VERSION}; rewrite it with `reachlens convert DIR`")
        own = {"format", "format_version", "kind", "status", "started", "finished", "protocol", "protocol_hash",
               "options", "model", "data", "exec", "children", "reachlens_version", "command"}
        _check_types(d, where)
        p = d.get("protocol")
        try:
            return cls(
                kind=d["kind"], protocol=None if p is None else Protocol.from_dict(p), model=dict(d["model"]),
                data=d.get("data") or None, options=dict(d.get("options") or {}),
                exec=None if d.get("exec") is None else dict(d["exec"]),
                reachlens_version=d.get("reachlens_version"),
                command=None if d.get("command") is None else tuple(d["command"]),
                status=d["status"], started=d.get("started"), finished=d.get("finished"),
                extra={k: v for k, v in d.items() if k not in own}, children=dict(d["children"]),
            )
        except (ReachlensError, TypeError) as err:
            raise ReachlensError(f"{where} holds an unreadable run record ({err})") from None


_TYPES: dict[str, tuple[type, ...]] = {
    "kind": (str,), "status": (str,), "model": (dict,), "started": (str, type(None)), "finished": (str, type(None)),
    "protocol": (dict, type(None)), "options": (dict, type(None)), "data": (dict, type(None)),
    "exec": (dict, type(None)), "children": (dict,), "reachlens_version": (str, type(None)),
    "command": (list, type(None)),
}


_SCALAR = (str, int, float, bool, type(None))


def _bad(where: str, key: str, value: Any, want: str) -> ReachlensError:
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return ReachlensError(f"{where}: {key} is {shown}, not {want}; it was damaged or edited by hand: restore it "
                          "from a copy, or run it again into a new directory")


def _check_types(d: Mapping[str, Any], where: str) -> None:
    """Refuse a record whose fields are missing or of the wrong type, naming the first: its top-level fields,
    then what each holds (times, the command's words, the model identity, the execution settings)."""
    for key, types in _TYPES.items():
        if key not in d and type(None) not in types:
            raise ReachlensError(f"{where} lacks {key!r}; it was damaged or edited by hand")
        if key in d and not isinstance(d[key], types):
            raise _bad(where, key, d[key], " or ".join("null" if t is type(None) else t.__name__ for t in types))
    for key in ("started", "finished"):
        if d.get(key) is not None:
            try:
                datetime.datetime.fromisoformat(d[key])
            except ValueError:
                raise _bad(where, key, d[key], "an ISO 8601 time") from None
    for i, word in enumerate(d.get("command") or ()):
        if not isinstance(word, str):
            raise _bad(where, f"command[{i}]", word, "a string")
    for key, value in d["children"].items():
        if not isinstance(value, str):
            raise _bad(where, f"children.{key}", value, "a relative path (a string)")
    for key, value in (d.get("exec") or {}).items():
        if not isinstance(value, _SCALAR):
            raise _bad(where, f"exec.{key}", value, "a string or a number")
    for key, value in d["model"].items():
        inner = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, x in inner:
            if not isinstance(x, (str, type(None))):
                raise _bad(where, f"model.{key}" + (f".{sub}" if sub is not None else ""), x, "a string or null")


def check_fields(d: Mapping[str, Any], fields: Mapping[str, tuple[type, ...]], where: str) -> None:
    """Refuse a record (:meth:`RunRecord.to_dict`) that lacks one of ``fields`` or holds it with another type,
    naming the first. ``fields`` maps dotted paths (``options.k_cut``, ``children.base``) to their types; a path
    whose types include ``type(None)`` may be null or absent. A kind of run lists what its reader needs
    (:attr:`reachlens.store.Run.record_fields`), so a damaged record is one line, not a ``KeyError``.

    >>> check_fields({"children": {}}, {"children.base": (str,)}, "run.json")
    Traceback (most recent call last):
    reachlens.errors.ReachlensError: run.json lacks 'children.base'; it was damaged or edited by hand
    """
    for path, types in fields.items():
        value: Any = d
        for part in path.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is None and type(None) in types:
            continue
        if value is None:
            raise ReachlensError(f"{where} lacks {path!r}; it was damaged or edited by hand")
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise _bad(where, path, value, " or ".join("null" if t is type(None) else t.__name__ for t in types))


# --- identity ------------------------------------------------------------------------------------------
def run_differences(
    stored: RunRecord | Mapping[str, Any], protocol: Protocol | None, model: Mapping[str, Any] | None,
    data: Mapping[str, Any] | None, *, options: Mapping[str, Any] | None = None, kind: str | None = None,
    exec: Mapping[str, Any] | None = None,
) -> tuple[dict[str, tuple[Any, Any]], list[str]]:
    """What differs between a stored run (its record, or a dict of its parts) and another run's kind,
    protocol, options, model, data and execution settings.

    Returns ``(differences, notes)``: differences as ``{field: (stored, other)}`` with fields such as
    ``k``, ``options.budget``, ``model.fingerprint``, ``data.sha256`` or ``exec.dtype``; notes say what could
    not be checked. ``None`` for any part skips it; a value ``unknown`` on either side is not compared.
    """
    header = stored.to_dict() if isinstance(stored, RunRecord) else stored
    diffs: dict[str, tuple[Any, Any]] = {}
    notes: list[str] = []
    if kind is not None and header.get("kind") != kind:
        diffs["kind"] = (header.get("kind"), kind)
    if protocol is not None:
        if header.get("protocol") is None:
            diffs["protocol"] = (None, protocol.to_dict())
        else:
            diffs.update(Protocol.from_dict(header["protocol"]).diff(protocol))
    if options is not None:
        diffs.update(_mapping_diffs("options", dict(header.get("options") or {}), _jsonable(dict(options))))
    if model is not None:
        diffs.update(_model_diffs(header.get("model") or {}, model))
    if data is not None:
        diffs.update(_data_diffs(header.get("data"), data, notes))
    if exec is not None and header.get("exec") is not None:  # a run that decodes nothing records none
        stored_exec = header["exec"]
        diffs.update({f"exec.{key}": (stored_exec.get(key), exec.get(key)) for key in sorted(set(stored_exec) & set(exec))
                      if "unknown" not in (stored_exec[key], exec[key]) and stored_exec[key] != exec[key]})
    return diffs, notes


def _mapping_diffs(prefix: str, stored: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {f"{prefix}.{key}": (stored.get(key), other.get(key)) for key in sorted(set(stored) | set(other))
            if stored.get(key) != other.get(key)}


def _model_diffs(stored: Mapping[str, Any], model: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    from reachlens.models import same_model

    diffs = {}
    unknown = "unknown" in (stored.get("fingerprint"), model.get("fingerprint"))
    same = not unknown and same_model(stored, model)
    # a model is its fingerprint: ./m, m and /abs/m are one model (the spelling is named when they differ)
    if not same and stored.get("spec") != model.get("spec"):
        diffs["model.spec"] = (stored.get("spec"), model.get("spec"))
    if not unknown and not same:
        diffs["model.fingerprint"] = (stored.get("fingerprint"), model.get("fingerprint"))
    return diffs


def _data_diffs(stored: Mapping[str, Any] | None, data: Mapping[str, Any], notes: list[str]) -> dict[str, tuple[Any, Any]]:
    if not stored:
        notes.append("it records no data identity (a task not made by load_task), so its data cannot be checked")
        return {}
    if not data:
        notes.append("the task given records no data identity (it was not made by load_task), so its data cannot "
                     "be checked against the run's")
        return {}
    # "file" is the data file's name: a copy elsewhere is the same data
    return {f"data.{key}": (_short(stored.get(key)), _short(data.get(key))) for key in sorted(set(stored) | set(data))
            if key != "file" and stored.get(key) != data.get(key)}


def _short(value: Any) -> Any:
    """A 64-hex digest cut to 12 digits for a message (enough to tell two apart)."""
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:12] + "..."
    return value


def fix_for(diffs: Mapping[str, Any]) -> str:
    """How to fix a refused run, for a message naming ``diffs``."""
    if all(k.startswith("data.") for k in diffs):
        return ("it was made from other data: pass the same data file (data=) and loader options, "
                "or write to a new directory (nothing in it was changed)")
    if all(k.startswith("options.inputs") for k in diffs):
        return ("a file the run reads (by the path named) holds other numbers than when the run started: restore "
                "that file, or write to a new directory (nothing in it was changed)")
    return "write to a new directory (out=), or delete this one to redo it (nothing in it was changed)"
