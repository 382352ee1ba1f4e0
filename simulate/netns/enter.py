"""Sockets inside another network namespace, for the simulator's relays in the router namespace.

A socket belongs to the namespace of the thread that created it, for its
whole life. :class:`NamespaceSockets` keeps one worker thread that entered
the namespace (``setns(2)``, through libc: Python 3.11's ``os`` has no
``setns``) and creates sockets there; the event loop then uses them like
any other.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import socket
from concurrent.futures import BrokenExecutor, ThreadPoolExecutor

from simulate.errors import SimulationError

CLONE_NEWNET = 0x40000000


def _enter(path: str) -> None:
    """Move the calling thread into the network namespace at ``path``."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            msg = f"cannot enter the network namespace {path}: {os.strerror(errno)}"
            raise SimulationError(msg)
    finally:
        os.close(fd)


class NamespaceSockets:
    """Creates non-blocking TCP sockets inside the named network namespace."""

    def __init__(self, namespace: str) -> None:
        """Start the worker thread in ``/run/netns/<namespace>``."""
        self.namespace = namespace
        self._pool = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix=f"netns-{namespace}",
            initializer=_enter,
            initargs=(f"/run/netns/{namespace}",),
        )

    async def socket(self) -> socket.socket:
        """A new non-blocking TCP socket in the namespace."""
        try:
            sock = await asyncio.get_running_loop().run_in_executor(self._pool, socket.socket)
        except BrokenExecutor:  # the thread could not enter the namespace; its error is logged
            msg = f"cannot make sockets in the network namespace {self.namespace}: see the error logged before"
            raise SimulationError(msg) from None
        sock.setblocking(False)
        return sock

    def close(self) -> None:
        """Stop the worker thread."""
        self._pool.shutdown(wait=False)
