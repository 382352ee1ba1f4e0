"""Free TCP ports for the brokers and servers that tests and simulations start on 127.0.0.1.

A port is chosen before the process that listens on it starts, so the
kernel could hand the same port to anyone else in between: asked for port
0, it assigns from its ephemeral range (``ip_local_port_range``), and
returns a port it handed out a moment ago as readily as any other. Two
brokers of one simulation once got the same port that way; the second
could not listen, and the agents of both sites met on the first. So ports
come from below the ephemeral range, where the kernel assigns none by
itself, chosen at random, and never the same twice in one process. Two
processes (the test suite's workers, say) could still pick the same one
between the choice and the listen, so each port handed out is also reserved
on the machine: a file named for it in :data:`RESERVED` holds the process id
of its owner, and no other process takes the port while that process lives.
"""

from __future__ import annotations

import os
import random
import socket
import tempfile
import threading
from pathlib import Path

import psutil

LOWEST = 10_000
"""The lowest port handed out."""

RESERVED = Path(tempfile.gettempdir()) / f"spanedge-ports-{os.getuid()}"
"""Where each port handed out is reserved for the process it went to (one folder per user: each can write it)."""

_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_given: set[int] = set()
_lock = threading.Lock()


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (32768 where it cannot be read)."""
    try:
        return int(_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, outside the ephemeral range, not handed out before by this process.

    Falls back to a port the kernel assigns (still never one handed out
    before) when the range below the ephemeral one is too small.
    """
    top = ephemeral_start()
    with _lock:
        for _ in range(200):
            port = random.randrange(LOWEST, top) if top - LOWEST >= 1_000 else _assigned()
            if port not in _given and _bindable(port) and _reserve(port):
                _given.add(port)
                return port
    msg = "no free TCP port found on 127.0.0.1"
    raise OSError(msg)


def _assigned() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _reserve(port: int) -> bool:
    """Reserve ``port`` for this process on this machine; False if a live process has it."""
    RESERVED.mkdir(parents=True, exist_ok=True)
    path = RESERVED / str(port)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if _owner_alive(path):
                return False
            path.unlink(missing_ok=True)  # its process is gone: the port is free to reserve again
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(str(os.getpid()))
        return True
    return False


def _owner_alive(path: Path) -> bool:
    """Whether the process whose id ``path`` holds lives (an empty file: its owner is still writing it)."""
    try:
        pid = int(path.read_text() or 0)
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True
    return pid <= 0 or psutil.pid_exists(pid)


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def listenable(port: int) -> bool:
    """Whether a server could listen on ``port`` of 127.0.0.1 now (connections closing on it do not count)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            return False
    return True


def listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` listens on TCP ``port`` (not another process on the same port)."""
    try:
        sockets = psutil.Process(pid).net_connections(kind="tcp")
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in sockets)
