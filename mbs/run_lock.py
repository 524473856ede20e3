"""The lock of a run directory: one process runs a stage there at a time (see :mod:`mbs.io`)."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from weakref import WeakValueDictionary

from mbs.errors import UserError

__all__ = ["LOCK", "RunDirError", "RunLock"]

#: The lock file of a run directory (its content: the holder's host, pid and start time).
LOCK = ".lock"


class RunDirError(UserError, RuntimeError):
    """A run directory is in use by another process, or its records were drawn under another
    sampling config (the message names the holder or the keys that differ)."""


class RunLock:
    """An exclusive POSIX record lock (``lockf``) on ``<run dir>/.lock``, held while the object lives.

    The kernel releases it when the process dies (``kill -9`` included), so a stale lock never
    blocks a resume; POSIX locks belong to the process, so forked grading workers that outlive
    a killed stage do not hold it. They work on NFS (lockd). Within one process the lock is
    shared (a stage's finaliser may open its own run directory again).
    """

    _held: "WeakValueDictionary[str, RunLock]" = WeakValueDictionary()

    def __init__(self, fd: int, path: Path, previous: bytes | None = None):
        self.fd = fd
        self.path = path
        self._previous = previous  # the lock file's content before this process took it

    @classmethod
    def acquire(cls, run_dir: Path) -> "RunLock":
        """Take the lock of ``run_dir`` or fail at once.

        Raises:
            RunDirError: Another process holds it (names host, pid and start time).
        """
        key = str(run_dir.resolve())
        held = cls._held.get(key)
        if held is not None:
            return held
        path = run_dir / LOCK
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _read_holder(fd)
            os.close(fd)
            raise RunDirError(
                f"{run_dir} is in use by another run ({holder}); wait for it to finish, or give this run "
                "another hydra.run.dir"
            ) from None
        previous = os.pread(fd, 1 << 16, 0)
        info = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, info, 0)
        lock = cls(fd, path, previous)
        cls._held[key] = lock
        return lock

    def admitted(self) -> bytes | None:
        """The run was admitted: its holder line stays (:meth:`restore` does nothing now).

        Returns:
            The lock file's content from before this process took it (``None``: the process
            held it already), for :meth:`put_back` should the admitted start fail.
        """
        previous, self._previous = self._previous, None
        return previous

    def restore(self) -> None:
        """Put back the lock file's content from before this process took it (a refused start
        leaves the file as it was); the lock itself stays held until the object goes."""
        if self._previous is None:
            return
        self.put_back(self._previous)
        self._previous = None

    def put_back(self, content: bytes) -> None:
        """Write ``content`` as the lock file's content (the lock stays held)."""
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, content, 0)
        except OSError:
            pass

    def __del__(self) -> None:
        try:
            os.close(self.fd)  # releases the lock
        except OSError:
            pass


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info["started"])))
        return f"host {info['host']}, pid {info['pid']}, started {started}"
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown"
