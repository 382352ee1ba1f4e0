"""An exclusive lock on the hub's state directory, held for the life of the hub process.

The lock is an ``flock`` on ``<state_dir>/hub.lock``; the file also says who
holds it (host, pid, instance id, since when), so a second hub started on the
same state directory can name the first. The kernel drops the lock when its
process ends, however it ends, so a killed hub never blocks its own restart.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import IO, Any

from spanedge.errors import SpanEdgeError

LOCK_FILE = "hub.lock"


class StateDirLocked(SpanEdgeError):
    """Another process holds the hub's state directory."""


class StateDirLock:
    """Holds ``<state_dir>/hub.lock`` until :meth:`release` or the end of the process."""

    def __init__(self, state_dir: Path, instance: str, shared: bool = False) -> None:
        """Prepare the lock of ``state_dir`` for the hub ``instance``; nothing is locked until :meth:`acquire`.

        A ``shared`` lock is the one hubs of a high-availability group hold together (the lease decides which
        of them writes): it keeps out a hub without ``--ha``, and writes no holder.
        """
        self.shared = shared
        self.state_dir = Path(state_dir).resolve()
        self.path = self.state_dir / LOCK_FILE
        self.instance = instance
        self._file: IO[str] | None = None

    def acquire(self) -> StateDirLock:
        """Take the lock at once, or fail naming its holder.

        Raises:
            StateDirLocked: another process holds it; the message names it and what to do.
            SpanEdgeError: the lock file cannot be opened.
        """
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            handle = self.path.open("a+")
        except OSError as exc:
            msg = f"cannot open the hub's lock file {self.path}: {exc.strerror}; give the hub a writable --state-dir"
            raise SpanEdgeError(msg) from None
        try:
            fcntl.flock(handle.fileno(), (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = _describe(handle.read())
            handle.close()
            msg = (
                f"the state directory {self.state_dir} is in use by another hub: {holder}; stop that hub first, "
                "or give this one its own --state-dir"
            )
            raise StateDirLocked(msg) from None
        if self.shared:
            self._file = handle
            return self
        handle.seek(0)
        handle.truncate()
        holder_data = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "instance": self.instance,
            "since": time.time(),
        }
        handle.write(json.dumps(holder_data))
        handle.flush()
        self._file = handle
        return self

    def release(self) -> None:
        """Let go of the lock (closing the file drops it)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    @property
    def held(self) -> bool:
        """True while this object holds the lock."""
        return self._file is not None


def _describe(text: str) -> str:
    """Who holds the lock, from what the holder wrote in the file."""
    try:
        holder: Any = json.loads(text)
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(holder["since"])))
        return f"pid {holder['pid']} on host {holder['host']}, instance {holder['instance']}, since {since}"
    except (ValueError, KeyError, TypeError):
        return "a process that has not said who it is yet, or the hubs of a group started with --ha"
