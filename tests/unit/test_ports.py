"""Ports for brokers and servers in tests and simulations: never handed out twice, never one another process listens on."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from simulate.broker import Mosquitto
from simulate.ports import ephemeral_start, free_port, listenable
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
