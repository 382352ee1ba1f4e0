"""Free TCP ports for the brokers and servers that tests and simulations start on 127.0.0.1.

A port is chosen before the process that listens on it starts, so the
kernel could hand the same port to anyone else in between: asked for port
0, it assigns from its ephemeral range (``ip_local_port_range``), and
returns a port it handed out a moment ago as readily as any other. Two
brokers of one simulation once got the same port that way; the second
could not listen, and the agents of both sites met on the first. So ports
come from below the ephemeral range, where the kernel assigns none by
itself, chosen at random, and never the same twice in one process.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

LOWEST = 10_000
"""The lowest port handed out."""

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
            if port not in _given and _bindable(port):
                _given.add(port)
                return port
    msg = "no free TCP port found on 127.0.0.1"
    raise OSError(msg)


def _assigned() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
