"""The exclusive lock a run holds on its folder (`.rlft.lock`, an flock'ed file naming the holder's pid and host)."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from rlft.errors import RunError

LOCK_NAME = ".rlft.lock"


def describe_holder(holder: dict | None) -> str:
    if not holder:
        return "an unknown process"
    return f"pid {holder.get('pid')} on host {holder.get('host')}"


class RunLock:
    """Exclusive lock on a run folder: an flock'ed file holding the holder's pid and host.

    The kernel drops an flock when its process dies, so a lock left by a killed run is recognised
    as stale without guessing; the pid/host inside are for the error message and the take-over note."""

    def __init__(self, root: Path):
        self.path = Path(root) / LOCK_NAME
        self._fd: int | None = None

    def _read(self) -> dict | None:
        try:
            return json.loads(self.path.read_text() or "null")
        except (OSError, ValueError):
            return None

    def _busy(self) -> RunError:
        return RunError(f"run folder {self.path.parent} is in use by another rlft run "
                        f"({describe_holder(self._read())}, "
                        f"lock file {self.path}); wait for it to finish or stop it, or use another train.output_dir")

    def check_free(self) -> None:
        """RunError naming the holder when a live run holds the lock; takes nothing (a probe before loading)."""
        import fcntl

        if not self.path.is_file():
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise self._busy() from None
        finally:
            os.close(fd)  # closing drops a lock this probe took

    def acquire(self) -> "RunLock":
        import fcntl

        for _ in range(5):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise self._busy() from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # the holder released (unlinked) it between our open and flock: try again
                os.close(fd)
                continue
            old = self._read()
            if old and old.get("pid") != os.getpid():
                print(f"rlft: taking over a stale lock on {self.path.parent}: {describe_holder(old)} ended "
                      f"without releasing it", file=sys.stderr)
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                      "started": round(time.time(), 3)}).encode(), 0)
            self._fd = fd
            return self
        raise RunError(f"could not lock run folder {self.path.parent}: its lock file keeps changing")

    def moved_to(self, root: Path) -> None:
        """The locked folder was renamed: the open lock follows the file."""
        self.path = Path(root) / LOCK_NAME

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self.path.unlink()  # unlink before closing: a waiter that opened the old file retries
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None
