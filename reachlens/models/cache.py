"""reachlens' cache on disk: file hashes, and folders derived from a model's files once.

The cache root is ``$REACHLENS_CACHE``, else ``$XDG_CACHE_HOME/reachlens``, else ``~/.cache/reachlens``. It holds

* ``fingerprints.json``: the SHA-256 of each file hashed so far, by path, size, mtime, ctime, inode and device
  (:func:`file_sha256`), so a 15 GB checkpoint is read once and a file rewritten in place is hashed again;
* derived model folders (:func:`derived_folder`): ``gguf/SHA256/`` (a GGUF file dequantized to an ordinary
  safetensors folder, :mod:`reachlens.models.gguf`) and ``merged/KEY/`` (a base with a LoRA adapter merged in,
  :mod:`reachlens.models.adapters`), each under ``$REACHLENS_MODEL_CACHE`` when that is set (so the tests, which
  move ``$REACHLENS_CACHE`` to a temporary folder, can keep the large ones), keyed by the content of what it was
  made from: a changed source file makes a new folder, never a stale one. A folder is built under a temporary name
  and renamed into place when whole, so a killed build leaves nothing that is read back, and two processes that
  build the same folder at once both end with one whole copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

__all__ = ["cache_root", "derived_folder", "file_sha256", "model_cache_root"]

COMPLETE = ".reachlens-complete"
"""The file a derived folder's builder writes last; a folder without it is never read."""


def cache_root() -> Path:
    """``$REACHLENS_CACHE``, else ``$XDG_CACHE_HOME/reachlens``, else ``~/.cache/reachlens``."""
    root = os.environ.get("REACHLENS_CACHE")
    return Path(root) if root else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "reachlens"


def model_cache_root() -> Path:
    """Where derived model folders live: ``$REACHLENS_MODEL_CACHE``, else :func:`cache_root`."""
    root = os.environ.get("REACHLENS_MODEL_CACHE")
    return Path(root).expanduser() if root else cache_root()


def _cache_file() -> Path:
    return cache_root() / "fingerprints.json"


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


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 (64 hex digits) of the file at ``path``, read once per version of the file (cached on disk).

    >>> file_sha256("model.gguf")  # doctest: +SKIP
    'a5fd3b62...'
    """
    path = Path(path)
    new: dict[str, str] = {}
    digest = _file_sha256(path, {} if _file_key(path) in _HASHES else _read_cache(), new)
    if new:
        _write_cache(new)
    return digest


def derived_folder(kind: str, key: str, build: Callable[[Path], None]) -> Path:
    """The folder ``KIND/KEY`` under :func:`model_cache_root`, made by ``build(tmp)`` the first time.

    ``build`` writes the folder's files into an empty temporary folder beside it; the folder is renamed into
    place once ``build`` returns (marked complete), so a folder is read back only whole. Another process that
    finished the same folder first wins; ours is removed.
    """
    parent = model_cache_root() / kind
    folder = parent / key
    if (folder / COMPLETE).is_file():
        return folder
    parent.mkdir(parents=True, exist_ok=True)
    tmp = parent / f".{key}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    tmp.mkdir()
    try:
        build(tmp)
        (tmp / COMPLETE).write_text("")
        if folder.exists() and not (folder / COMPLETE).is_file():
            shutil.rmtree(folder)  # a folder left by an older, interrupted build
        try:
            os.rename(tmp, folder)
        except OSError:
            if not (folder / COMPLETE).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
