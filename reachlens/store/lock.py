"""One writer per directory: an exclusive lock file holding the owner's pid.

The lock is ``DIR/.lock``, created with ``O_CREAT | O_EXCL`` (so exactly one process creates it) and
holding ``{"pid", "host", "started"}`` as JSON. Its owner also holds an ``flock`` on it for as long as
the lock lives; the kernel drops that when the owner dies, ``kill -9`` included. A lock file that
nobody holds the ``flock`` of is stale: the next writer removes it and takes the lock. (On a file
system without ``flock``, a lock is stale when its pid is no longer running on this host.)

A second writer is refused at once with a :class:`DirectoryLocked` naming the owner's pid; it does
not wait. Readers never lock.

>>> with DirectoryLock(Path("runs/base")):  # doctest: +SKIP
...     ...  # write
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from reachlens.errors import ReachlensError

try:
    import fcntl
except ImportError:  # not POSIX: liveness of the pid only
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_NAME", "DirectoryLock", "DirectoryLocked", "writer_alive"]

LOCK_NAME = ".lock"


class DirectoryLocked(ReachlensError):
    """Another live process is writing the directory; ``owner`` is what its lock file says."""

    def __init__(self, message: str, owner: dict[str, Any]) -> None:
        super().__init__(message)
        self.owner = owner


def _start_time(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from /proc), or None if unknown."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _running(owner: dict[str, Any]) -> bool:
    """Whether the process a lock file names still runs (the same process, not a reused pid)."""
    if owner.get("host") != socket.gethostname():
        return True  # cannot tell from here: assume it runs
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    started = owner.get("started")
    now = _start_time(pid)
    return started is None or now is None or started == now


class DirectoryLock:
    """The exclusive writer lock of ``directory`` (which must exist); a context manager."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, removing a stale one; raise :class:`DirectoryLocked` if a live process has it."""
        if self._fd is not None:
            return
        owner: dict[str, Any] = {}
        for _ in range(200):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner, live = self._inspect()
                if live and owner:
                    break
                time.sleep(0.01)  # stale and removed, released, or being written: look again
                continue
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            me = {"pid": os.getpid(), "host": socket.gethostname(), "started": _start_time(os.getpid())}
            os.write(fd, json.dumps(me).encode())
            os.fsync(fd)
            self._fd = fd
            return
        pid = owner.get("pid", "?")
        host = owner.get("host")
        where = "" if host in (None, socket.gethostname()) else f" on host {host!r}"
        raise DirectoryLocked(
            f"{str(self.directory)!r} is being written by process {pid}{where} (lock file {str(self.path)!r}); "
            "wait for it to finish, or write to another directory (if no such process runs, delete the lock file)",
            owner,
        )

    def _inspect(self) -> tuple[dict[str, Any], bool]:
        """(what the lock file says, whether a live writer holds it); removes it if it is stale."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return {}, False  # released meanwhile
        try:
            if fcntl is None:
                owner = self._read(fd)
                if not owner:
                    return owner, time.time() - os.fstat(fd).st_mtime < 5  # being written
                if _running(owner):
                    return owner, True
                os.unlink(self.path)
                return owner, False
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                # held by its live owner (or by one starting up), or for a moment by another
                # process that is removing a dead owner's file
                owner = self._read(fd)
                return owner, not owner or _running(owner)
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                return {}, False  # released (and perhaps taken again): look again
            owner = self._read(fd)
            if not owner and time.time() - os.fstat(fd).st_mtime < 5:
                return owner, True  # its creator is between O_EXCL and flock
            # Nobody holds its flock: the owner died (the kernel drops the flock even on kill -9).
            # We hold the flock now, so nobody else removes it at the same time.
            os.unlink(self.path)
            return owner, False
        finally:
            os.close(fd)

    @staticmethod
    def _read(fd: int) -> dict[str, Any]:
        os.lseek(fd, 0, os.SEEK_SET)
        raw = os.read(fd, 4096)
        try:
            owner = json.loads(raw) if raw else {}
        except ValueError:
            return {}
        return owner if isinstance(owner, dict) else {}

    def release(self) -> None:
        """Remove the lock file, then drop the flock (in that order, so no one sees a free stale file)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)

    def __enter__(self) -> DirectoryLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def writer_alive(directory: str | os.PathLike) -> bool:
    """Whether a live process holds ``directory``'s writer lock (a reader's look: nothing is removed).

    A run whose ``run.json`` says ``running`` while this is False was killed (``kill -9``, a power cut):
    :meth:`reachlens.store.RunDir.record` reads it as ``interrupted``.
    """
    path = Path(directory) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        if fcntl is None:
            owner = DirectoryLock._read(fd)
            return not owner or _running(owner)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True  # its owner holds the flock
        fcntl.flock(fd, fcntl.LOCK_UN)
        owner = DirectoryLock._read(fd)
        return not owner and time.time() - os.fstat(fd).st_mtime < 5  # its creator is between O_EXCL and flock
    finally:
        os.close(fd)
