"""Real namespaces: a dead run's leftovers are swept, with what runs in them; a relay socket lives in its namespace."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time

import pytest

from simulate.netns import host
from simulate.netns.enter import NamespaceSockets
from simulate.netns.layout import Layout, setup_commands
from tests.conftest import missing_part

pytestmark = pytest.mark.timeout(60)


def _require_namespaces() -> None:
    reason = host.unavailable()
    if reason is not None:
        missing_part(reason)


def _dead_pid() -> int:
    """The pid of a process that has exited (a run that crashed)."""
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def _free_block() -> int:
    """A lab block no address here uses (a live run's, say)."""
    return min(set(range(64)) - host.lab_blocks_in_use())


def _links() -> str:
    return subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout


def test_a_crashed_runs_namespaces_links_and_processes_are_swept() -> None:
    _require_namespaces()
    layout = Layout(pid=_dead_pid(), tag="dead", lab_block=_free_block(), sites=("hub", "edge"))
    for argv in setup_commands(layout):
        host.check_command(argv)
    inside = subprocess.Popen([*layout.exec_prefix("edge"), "sleep", "300"])
    try:
        deadline = time.monotonic() + 10
        while not host.run_command(["ip", "netns", "pids", layout.namespace("edge")]).stdout.strip():
            assert time.monotonic() < deadline, "the process did not start in the namespace"
            time.sleep(0.05)
        assert layout.lab_dev("edge") in _links()
        removed = host.sweep()
        assert set(layout.namespaces()) <= set(removed)
        assert inside.wait(timeout=10) == -9  # SIGKILLed: what ran in the dead run's namespaces goes too
        assert not set(layout.namespaces()) & set(host.namespaces())
        assert host.lab_devs(layout.tag) == []
    finally:
        inside.kill()
        host.remove(layout.namespaces(), layout.tag)


def test_a_live_runs_namespaces_are_left_alone_and_sockets_are_made_inside() -> None:
    _require_namespaces()
    layout = Layout(pid=os.getpid(), tag="11fe", lab_block=_free_block(), sites=("hub",))
    try:
        for argv in setup_commands(layout):
            host.check_command(argv)
        assert not set(layout.namespaces()) & set(host.sweep())

        async def bind_in_router() -> str:
            sockets = NamespaceSockets(layout.router)
            try:
                sock = await sockets.socket()
                with sock:
                    sock.bind(("10.77.1.1", 0))  # an address only the router namespace has
                    return str(sock.getsockname()[0])
            finally:
                sockets.close()

        assert asyncio.run(bind_in_router()) == "10.77.1.1"
    finally:
        host.remove(layout.namespaces(), layout.tag)
    assert not set(layout.namespaces()) & set(host.namespaces())
