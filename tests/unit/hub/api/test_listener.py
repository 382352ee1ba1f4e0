"""The REST API's socket: bound before the hub starts anything, or a clear error."""

from __future__ import annotations

import socket

import pytest

from hub.api.listener import PortInUse, bind_listener


def test_the_listener_listens_on_the_port_it_is_given() -> None:
    sock = bind_listener("127.0.0.1", 0)
    try:
        host, port = sock.getsockname()
        assert host == "127.0.0.1"
        with socket.create_connection((host, port), timeout=5):
            pass
    finally:
        sock.close()


def test_a_port_in_use_names_the_address_and_what_to_do() -> None:
    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    try:
        with pytest.raises(PortInUse) as refused:
            bind_listener("127.0.0.1", port)
    finally:
        taken.close()
    message = str(refused.value)
    assert f"the hub cannot listen on 127.0.0.1:{port} for its REST API: Address already in use" in message
    assert f"ss -ltnp 'sport = :{port}'" in message
    assert "start the hub with another --port" in message


def test_an_address_of_another_machine_says_to_pass_one_of_this_machine() -> None:
    with pytest.raises(PortInUse, match="pass an address of this machine as --host"):
        bind_listener("192.0.2.1", 0)  # TEST-NET-1: never an address of this machine
