"""Slow and greedy REST clients: dropped once late or refused at once, while the other clients are served.

The hub's own server (:class:`hub.api.serving.run.ApiServer`) runs in a thread with small bounds for the
details, and the ``spanedge hub`` process with its defaults for the whole: many connections that sent half
their request headers (over TLS, and some that never start TLS) hold none of its file descriptors for long.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from hub.api.app import create_app
from hub.api.serving.limits import ClientLimits
from hub.api.serving.run import ApiServer
from hub.control.coordinator import Coordinator
from hub.control.registry import SiteRegistry
from simulate.broker import free_port
from spanedge.sites import parse_sites
from spanedge.tokens import Tokens, TokenScope
from tests.integration.hubkit import ROOT, api_status, hub_ca, start_hub
from tests.keys import key_env
from tests.polling import wait_for

TOKEN = "slow-clients-token-0123456789abcdef0123"
SITES = 'sites:\n  cloud: {tier: hub, broker: "mqtt://127.0.0.1:1883"}\n'
HALF = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow"

pytestmark = pytest.mark.timeout(180)


class Peer:
    """One client connection, read without blocking: what the server sent, and whether it closed the connection."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.received = b""
        self.closed = False
        sock.setblocking(False)

    @classmethod
    def open(cls, port: int, source: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> Peer:
        sock = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname="127.0.0.1")
        return cls(sock)

    def send(self, data: bytes) -> Peer:
        self.sock.setblocking(True)
        self.sock.sendall(data)
        self.sock.setblocking(False)
        return self

    def poll(self) -> bool:
        """Read what arrived; True once the server closed the connection."""
        while not self.closed:
            try:
                data = self.sock.recv(65536)
            except (BlockingIOError, ssl.SSLWantReadError):
                break
            except (ConnectionResetError, ssl.SSLError):
                self.closed = True
                break
            if not data:
                self.closed = True
            self.received += data
        return self.closed

    def status(self) -> int | None:
        """The status of the answer received, if any."""
        head = self.received.split(b"\r\n", 1)[0].split()
        return int(head[1]) if len(head) > 1 else None

    def error(self) -> dict[str, Any]:
        return orjson.loads(self.received.split(b"\r\n\r\n", 1)[1])

    def close(self) -> None:
        self.sock.close()


def all_closed(peers: list[Peer]) -> bool:
    return all([p.poll() for p in peers])


def answer(port: int, path: str, source: str, tls: ssl.SSLContext | None = None, **request: Any) -> int:
    """The status of one whole request from ``source``."""
    kind = http.client.HTTPSConnection if tls is not None else http.client.HTTPConnection
    options: dict[str, Any] = {"context": tls} if tls is not None else {}
    conn = kind("127.0.0.1", port, timeout=30, source_address=(source, 0), **options)
    try:
        conn.request(request.pop("method", "GET"), path, **request)
        return conn.getresponse().status
    finally:
        conn.close()


@contextmanager
def api_server(limits: ClientLimits) -> Iterator[tuple[int, ApiServer]]:
    """The hub's REST API under ``limits``, served in a thread by the server the hub runs."""
    tokens = Tokens([(TokenScope.ADMIN, TOKEN, "test")])
    app = create_app(Coordinator(SiteRegistry(parse_sites(SITES))), tokens)
    sock = socket.create_server(("127.0.0.1", 0))
    server = ApiServer(app, {"log_level": "warning", "lifespan": "off", "timeout_graceful_shutdown": 2}, limits)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="api-server", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 15, "the API server to start")
        yield sock.getsockname()[1], server
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def open_connections(server: ApiServer) -> int:
    return int(server.config.http_protocol_class.admission.total)  # type: ignore[attr-defined]


def test_a_client_late_with_its_headers_or_its_body_is_answered_408_and_dropped() -> None:
    with api_server(ClientLimits(header_s=1, body_s=1, per_client=8, total=16)) as (port, server):
        silent = Peer.open(port)
        half_headers = Peer.open(port).send(HALF)
        half_body = Peer.open(port).send(
            b"POST /apps HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n" + b'{"source": "'
        )
        kept_alive = Peer.open(port).send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        wait_for(lambda: kept_alive.poll() or kept_alive.status() == 200, 15, "the first request's answer")
        kept_alive.received = b""
        kept_alive.send(HALF)  # the next request on the same connection: its own clock
        peers = [silent, half_headers, half_body, kept_alive]
        wait_for(lambda: all_closed(peers), 30, "the server to drop the late clients")
        for peer in peers:
            assert peer.status() == 408, peer.received
            assert peer.error()["error"] == "RequestTimeout"
        assert "request headers took over 1 s" in half_headers.error()["detail"]
        assert "request body took over 1 s" in half_body.error()["detail"]
        wait_for(lambda: open_connections(server) == 0, 15, "every connection to be counted closed")


def test_connections_over_a_clients_share_or_the_total_are_refused_while_the_others_are_served() -> None:
    with api_server(ClientLimits(header_s=60, body_s=60, per_client=3, total=5)) as (port, server):
        held = [Peer.open(port).send(HALF) for _ in range(3)]
        wait_for(lambda: open_connections(server) == 3, 15, "three connections from 127.0.0.1")
        over_share = Peer.open(port)
        wait_for(over_share.poll, 15, "the connection over the address's share to be refused")
        assert over_share.status() == 429, over_share.received
        assert over_share.error()["error"] == "TooManyRequests"
        assert answer(port, "/healthz", "127.0.0.2") == 200  # another address is served meanwhile
        wait_for(lambda: open_connections(server) == 3, 15, "that request's connection to be counted closed")

        held += [Peer.open(port, "127.0.0.2").send(HALF) for _ in range(2)]
        wait_for(lambda: open_connections(server) == 5, 15, "five connections in all")
        over_total = Peer.open(port, "127.0.0.3")
        wait_for(over_total.poll, 15, "the connection over the total to be refused")
        assert over_total.status() == 503, over_total.received
        assert over_total.error()["error"] == "ServiceUnavailable"

        for peer in held[:2]:
            peer.close()
        wait_for(lambda: open_connections(server) == 3, 15, "two connections to be counted closed")
        assert answer(port, "/healthz", "127.0.0.3") == 200  # room again
        assert not any(p.poll() for p in held[2:])  # the others still wait for their headers


def test_headers_over_16_kib_are_the_apis_json_400() -> None:
    with api_server(ClientLimits()) as (port, _):
        huge = Peer.open(port).send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 20_000)
        wait_for(huge.poll, 15, "the server to refuse the request")
        assert huge.status() == 400, huge.received
        assert huge.error()["error"] == "BadRequest"
        assert "headers are over 16 KiB" in huge.error()["detail"]


# -- the hub process --------------------------------------------------------------------------------------------

SLOW_ADDRESSES = [f"127.0.0.{i}" for i in range(1, 13)]  # 12 x 32 = 384 half-sent requests
SHARE = ClientLimits().per_client


def file_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.fixture
def hub(mosquitto: Any, tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes], ssl.SSLContext]]:
    """``spanedge hub`` over HTTPS with its default client limits; yields its port, its process and a TLS context."""
    sites_file = tmp_path / "sites.yaml"
    sites = (ROOT / "examples" / "cold_chain" / "sites.yaml").read_text()
    sites_file.write_text(sites.replace("mqtt://localhost:1883", mosquitto.url))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPANEDGE_")}
    env |= {"SPANEDGE_TOKEN": TOKEN, **key_env(tmp_path)}
    port, state = free_port(), tmp_path / "state"
    with (tmp_path / "hub.log").open("wb") as output:
        proc = start_hub(sites_file, state, port, env, output=output)
        try:
            url = f"https://127.0.0.1:{port}/healthz"
            wait_for(lambda: api_status(url, hub_ca(state)) == 200, 60, "the hub over HTTPS")
            yield port, proc, ssl.create_default_context(cafile=hub_ca(state))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_a_hub_under_half_sent_requests_drops_them_and_serves_the_others(
    hub: tuple[int, subprocess.Popen[bytes], ssl.SSLContext], tmp_path: Path
) -> None:
    port, proc, tls = hub
    before = file_descriptors(proc.pid)
    slow = [Peer.open(port, address, tls).send(HALF) for address in SLOW_ADDRESSES for _ in range(SHARE)]
    no_tls = [Peer.open(port) for _ in range(8)]  # TCP only: never a TLS handshake
    extra = [Peer.open(port, address, tls) for address in SLOW_ADDRESSES]  # one over each address's share
    wait_for(lambda: all_closed(extra), 30, "the connections over an address's share to be refused")
    assert {p.status() for p in extra} == {429}, [p.received for p in extra]

    assert answer(port, "/healthz", "127.0.0.99", tls) == 200
    assert answer(port, "/apps", "127.0.0.99", tls, headers={"Authorization": f"Bearer {TOKEN}"}) == 200

    wait_for(lambda: all_closed(slow + no_tls), 90, "the hub to drop every half-sent request")
    assert {p.status() for p in slow} == {408}
    assert {p.received for p in no_tls} == {b""}
    # back to what it held before (give or take a file or socket of its own), not one per connection
    wait_for(lambda: file_descriptors(proc.pid) <= before + 4, 30, f"the hub's file descriptors back to {before}")
    logged = (tmp_path / "hub.log").read_text()
    assert re.search(
        r"REST API: dropped the connection of 127\.0\.0\.\d, which took over 10 s to send its request headers", logged
    )
    assert re.search(r"REST API: refused a connection from 127\.0\.0\.\d, which holds 32 already", logged)
    for peer in slow + no_tls + extra:
        peer.close()
