"""Ports for brokers and servers in tests and simulations: never handed out twice, never one another process listens on."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from simulate.broker import Mosquitto
from simulate.ports import ephemeral_start, free_port, listenable, listens
from spanedge.errors import SpanEdgeError


def test_ports_come_from_below_the_ephemeral_range_and_never_twice() -> None:
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert all(port < ephemeral_start() for port in ports)
    assert all(listenable(port) for port in ports)


def test_a_broker_does_not_start_on_a_port_another_process_listens_on(tmp_path: Path) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = int(other.getsockname()[1])
        assert not listenable(port)
        with pytest.raises(SpanEdgeError, match=f"cannot listen on port {port}: another process listens there"):
            Mosquitto(port=port, workdir=tmp_path, name="taken").start()
    assert listenable(port)


def test_a_port_another_live_process_reserved_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    from simulate import ports

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # two ports nobody reserved or listens on now: other test processes may hold any fixed pair
        unused = (p for p in range(12_001, 13_000) if not (ports.RESERVED / str(p)).exists() and ports._bindable(p))
        taken, free = next(unused), next(unused)
        ports.RESERVED.mkdir(parents=True, exist_ok=True)
        (ports.RESERVED / str(taken)).write_text(str(other.pid))
        picks = iter([taken, free])
        monkeypatch.setattr(ports.random, "randrange", lambda lo, hi: next(picks))
        assert ports.free_port() == free  # the other process's reservation stands
        assert (ports.RESERVED / str(free)).read_text() == str(os.getpid())
    finally:
        other.kill()
        other.wait()
    picks = iter([taken])
    ports._given.discard(taken)
    assert ports.free_port() == taken  # its owner is gone: the port is free again


def test_a_process_listens_on_a_port_only_with_its_own_socket() -> None:
    import subprocess
    import sys

    with socket.socket() as mine:
        mine.bind(("127.0.0.1", 0))
        mine.listen()
        port = int(mine.getsockname()[1])
        assert listens(os.getpid(), port)
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            assert not listens(other.pid, port)  # someone listens there, but not that process
        finally:
            other.kill()
            other.wait()


def test_a_broker_whose_port_was_taken_before_it_started_moves_to_another(tmp_path: Path) -> None:
    broker = Mosquitto(workdir=tmp_path, name="moving")
    taken = broker.port
    with socket.socket() as other:
        other.bind(("127.0.0.1", taken))
        other.listen()
        with broker:
            assert broker.port != taken
            assert f"listener {broker.port} " in broker.config.read_text()
            with socket.create_connection(("127.0.0.1", broker.port), timeout=5):
                pass
            broker.restart()  # once started, it keeps its port
            assert f":{broker.port}" in broker.url
