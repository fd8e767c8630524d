"""``load_model(spec)``: a HuggingFace causal LM as a TransformerLens 4 ``TransformerBridge``.

``spec`` is one of

* ``zoo:NAME``: a checkpoint shipped in ``reachlens/assets/zoo/NAME`` (see :mod:`reachlens.models.zoo`);
* a local folder in HuggingFace format (``config.json``, ``*.safetensors``, tokenizer files);
* a HuggingFace hub name such as ``Qwen/Qwen2.5-7B`` (needs the weights in the local cache or a network).

All three go through the same code: ``AutoModelForCausalLM.from_pretrained(..., use_safetensors=True)``
and ``TransformerBridge.boot_transformers(..., hf_model=...)``. Weights are read from safetensors only
(a folder with only pickle weights is refused, since unpickling runs code), and remote code runs only when
the caller passes ``trust_remote_code=True``.

Model identity (:func:`model_identity`), recorded with every result and checked before results are
merged or compared: the SHA-256 of the full content of the config, tokenizer and weight files,
``sha256:`` and 16 hex digits. Each file's hash is cached by path, size, mtime and ctime (in
``$REACHLENS_CACHE``, default ``~/.cache/reachlens``), so a 15 GB checkpoint is read once, and a
file rewritten in place (same size) is hashed again. A hub name is identified by the files of the
snapshot it loads, with the commit hash of that snapshot as ``revision``. Results written before
this scheme carry a 16-hex fingerprint of the first and last MiB of each file; they are matched
against that same legacy hash, so old audit directories still resume.
"""

from __future__ import annotations

import dataclasses

import fnmatch
import hashlib
import json
import os
import re
import secrets
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from reachlens.errors import ReachlensError

__all__ = [
    "load_model", "load_tokenizer", "ModelIdentity", "model_identity", "resolve_spec", "ModelLoadError", "same_model",
]

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
FINGERPRINT_FILES = (
    "*.safetensors", "*.safetensors.index.json", "config.json", "generation_config.json", "tokenizer*.json",
    "special_tokens_map.json", "added_tokens.json", "vocab.*", "merges.txt", "*.model", "chat_template.*",
)
"""The files a model's fingerprint covers: weights, config, tokenizer (not model cards or notes)."""
_ZOO_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class ModelLoadError(ReachlensError):
    """A model spec that cannot be loaded; the message says why and what to do."""


@dataclass(frozen=True)
class ModelIdentity:
    """What a stored result records about the model that made it."""

    spec: str
    """The spec as the user gave it (``zoo:base``, a path, a hub name)."""
    fingerprint: str
    """``sha256:`` and the first 16 hex digits of the SHA-256 over the full content of the model's
    config, tokenizer and weight files (:data:`FINGERPRINT_FILES`); ``unknown`` when there are none
    to read (a hub name that is not in the local cache)."""
    revision: str | None = None
    """For a hub name, the commit hash of the snapshot loaded; None for a local folder."""
    legacy_fingerprint: str | None = None
    """The fingerprint reachlens recorded before full hashing (head and tail MiB of each file), kept
    to recognize results written then."""


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
    """(``from_pretrained`` argument, whether it is a local folder) for a spec; checks local folders."""
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
        for weights in sorted(folder.glob("*.safetensors")):
            _check_safetensors(weights)
        return str(folder), True
    path = Path(spec).expanduser()
    looks_local = path.exists() or spec.startswith((".", "/", "~")) or spec.count("/") > 1
    if looks_local:
        if not path.is_dir():
            raise ModelLoadError(f"model folder {spec!r} does not exist")
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"model folder {spec!r} has no config.json; is it a HuggingFace checkpoint?")
        if not any(path.glob("*.safetensors")):
            pickles = sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
            if pickles:
                raise ModelLoadError(
                    f"model folder {spec!r} has only pickle weights ({', '.join(pickles)}); reachlens loads "
                    "safetensors only, because unpickling can run arbitrary code. Convert once with "
                    "`model.save_pretrained(folder, safe_serialization=True)` in a trusted session."
                )
            raise ModelLoadError(f"model folder {spec!r} has no *.safetensors weights")
        for weights in sorted(path.glob("*.safetensors")):
            _check_safetensors(weights)
        return str(path.resolve()), True
    return spec, False


def _cache_file() -> Path:
    root = os.environ.get("REACHLENS_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "reachlens"
    return Path(root) / "fingerprints.json"


_HASHES: dict[str, str] = {}
"""File hashes of this process, by the key of :func:`_file_key` (the disk cache backs it)."""


def _file_key(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}|{st.st_dev}"


def _read_cache() -> dict[str, str]:
    try:
        cached = json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}
    return cached if isinstance(cached, dict) else {}


def _write_cache(new: dict[str, str]) -> None:
    """Merge ``new`` into the disk cache (best effort: a cache that cannot be written is skipped)."""
    path = _cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        merged = {**_read_cache(), **new}
        if len(merged) > 10_000:  # keep the newest entries
            merged = dict(list(merged.items())[-10_000:])
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        tmp.write_text(json.dumps(merged))
        os.replace(tmp, path)
    except OSError:
        pass


def _file_sha256(path: Path, cache: dict[str, str], new: dict[str, str]) -> str:
    key = _file_key(path)
    if key in _HASHES:
        return _HASHES[key]
    digest = cache.get(key)
    if digest is None:
        h = hashlib.sha256()
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 24):
                h.update(chunk)
        digest = new[key] = h.hexdigest()
    _HASHES[key] = digest
    return digest


def _fingerprint_files(folder: Path) -> list[Path]:
    return sorted(f for f in folder.iterdir()
                  if f.is_file() and any(fnmatch.fnmatch(f.name, pattern) for pattern in FINGERPRINT_FILES))


def folder_fingerprint(folder: str | os.PathLike) -> str:
    """``sha256:`` + 16 hex digits over the names and full contents of ``folder``'s model files."""
    files = _fingerprint_files(Path(folder))
    if not files:
        return "unknown"
    cache: dict[str, str] = {} if all(_file_key(f) in _HASHES for f in files) else _read_cache()
    new: dict[str, str] = {}
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}:{_file_sha256(f, cache, new)}\n".encode())
    if new:
        _write_cache(new)
    return "sha256:" + h.hexdigest()[:16]


def _legacy_fingerprint(folder: Path) -> str:
    """The fingerprint of reachlens before full hashing: sizes plus the first and last MiB of each file."""
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


def _hub_snapshot(repo_id: str) -> Path | None:
    """The local snapshot folder of the hub model ``repo_id`` at its ``main`` ref, if cached."""
    try:
        from huggingface_hub import try_to_load_from_cache

        config = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # not a valid repo id, no hub library: not in the cache
        return None
    return Path(config).parent if isinstance(config, str) else None


def model_identity(spec: str) -> ModelIdentity:
    """The identity recorded with results: the spec and a full content fingerprint.

    >>> model_identity("zoo:base").fingerprint  # doctest: +SKIP
    'sha256:3f0c...'
    """
    target, local = resolve_spec(spec)
    if local:
        folder = Path(target)
        return ModelIdentity(spec, folder_fingerprint(folder), None, _legacy_fingerprint(folder))
    legacy = hashlib.sha256(spec.encode()).hexdigest()[:16]
    snapshot = _hub_snapshot(spec)
    if snapshot is None:
        return ModelIdentity(spec, "unknown", None, legacy)
    return ModelIdentity(spec, folder_fingerprint(snapshot), snapshot.name, legacy)


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
    """Whether a stored model identity (a dict, as results record it) names the ``current`` model.

    A fingerprint written before full hashing (16 hex digits, no ``sha256:``) is matched against the
    current model's legacy fingerprint.
    """
    mine = stored.get("fingerprint")
    if isinstance(mine, str) and not mine.startswith("sha256:") and mine != "unknown" and current.get("legacy_fingerprint"):
        return mine == current.get("legacy_fingerprint")
    return mine == current.get("fingerprint")


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
    _refuse_unsupported(target, trust_remote_code)
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
    model.reachlens_identity = model_identity(spec)
    return model


def load_tokenizer(spec: str, *, trust_remote_code: bool = False):
    """The tokenizer of ``spec`` as it ships (what :func:`load_model` attaches as ``model.tokenizer``),
    without the weights: enough to render a chat prompt or bind a protocol to the model's chat template.

    >>> load_tokenizer("zoo:base").chat_template is None  # doctest: +SKIP
    True
    """
    target, _ = resolve_spec(spec)
    return _load_tokenizer(spec, target, trust_remote_code)


def _load_tokenizer(spec: str, target: str, trust_remote_code: bool):
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(target, trust_remote_code=trust_remote_code)
    except OSError as err:
        raise ModelLoadError(f"could not load the tokenizer of {spec!r}: {err}") from err
    tokenizer.padding_side = "left"  # not kept by save_pretrained for every tokenizer class
    return tokenizer


def _check_device(device: str | torch.device) -> None:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ModelLoadError(f"device {str(device)!r} is not a torch device; use cpu, cuda, cuda:1 or mps") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(
            f"device {str(device)!r}: this torch ({torch.__version__}) sees no CUDA GPU; use device='cpu'"
        )
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ModelLoadError(f"device {str(device)!r}: MPS is not available here; use device='cpu'")


def _refuse_unsupported(target: str, trust_remote_code: bool) -> None:
    """Encoder-only and encoder-decoder models are refused from their config, before any weights load."""
    from transformers import AutoConfig

    from reachlens.engine.stack import check_architecture

    try:
        config = AutoConfig.from_pretrained(target, trust_remote_code=trust_remote_code)
    except (OSError, ValueError):
        return  # the weights' own loading below reports what is wrong
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
