"""A standby sends the live reads on to the leader and passes its answers back.

The leader here is a standard-library HTTP(S) server on loopback; the standby is its FastAPI app under a
TestClient.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import ssl
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    # starlette >= 1.x prefers the httpx2 package and warns when it falls back to httpx
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

from hub.api.forwarding import FORWARDED_HEADER, Forwarder, leader_ca
from hub.api.standby import ROLE_HEADER, SERVED_BY_HEADER, standby_app
from hub.api.tls import ServerTls, issued_tls
from hub.ha.node import RoleApp
from tests.polling import wait_for

TOKEN = "read-token-0123456789abcdef0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LIMIT = 1000


class LeaderServer(http.server.ThreadingHTTPServer):
    """A loopback server of :class:`Leader`: its URL, the requests it got, and the gate of ``/live-events``."""

    daemon_threads = True

    def __init__(self, tls: ServerTls | None) -> None:
        super().__init__(("127.0.0.1", 0), Leader)
        if tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(tls.cert_file, tls.key_file)
            self.socket = context.wrap_socket(self.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.server_address[1]}"
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self.release = threading.Event()
        self.released: list[bool] = []


class Leader(http.server.BaseHTTPRequestHandler):
    """The leader's API, as far as these tests need it."""

    protocol_version = "HTTP/1.1"
    server: LeaderServer

    def do_GET(self) -> None:
        self.server.seen.append((self.command, self.path, dict(self.headers)))
        route = self.path.split("?")[0].removeprefix("/prefix")
        if route == "/sites":
            self.reply(200, {"sites": ["truck-7"], "path": self.path, "auth": self.headers.get("Authorization")})
        elif route == "/sites/":  # a redirect to the leader's own URL
            self.send_response(307)
            self.send_header("Location", f"{self.server.url}/sites")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif route == "/big":
            self.reply(200, {"data": "x" * LIMIT})
        elif route == "/unsized":
            self.start(200, "text/plain")
            self.wfile.write(b"y" * (LIMIT + 1))
        elif route == "/dashboard/events":
            self.start(200, "text/event-stream")
            self.wfile.write(b"event: snapshot\ndata: {}\n\n" * 3 + b"event: snapshot\ndata: " + b"z" * LIMIT + b"\n\n")
        elif route == "/live-events":  # the second event only once the first reached the standby's caller
            self.start(200, "text/event-stream")
            self.wfile.write(b"event: snapshot\ndata: 1\n\n")
            self.wfile.flush()
            self.server.released.append(self.server.release.wait(30))
            self.wfile.write(b"event: snapshot\ndata: 2\n\n")
        elif route == "/slow":
            time.sleep(1)
            self.reply(200, {})
        else:
            self.reply(404, {"error": "NotFound", "detail": f"no route {route}"})

    do_HEAD = do_GET

    def reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Keep-Alive", "timeout=5")  # hop by hop
        self.send_header("Connection", "keep-alive, X-Private")
        self.send_header("X-Private", "1")  # hop by hop too: the Connection header names it
        self.send_header("Cache-Control", "no-store")  # end to end
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def start(self, status: int, content_type: str) -> None:
        """Headers with no Content-Length: the body ends when the connection closes."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve(tls: ServerTls | None = None) -> Iterator[LeaderServer]:
    """Serve :class:`Leader` on a free loopback port, over HTTPS with ``tls``."""
    server = LeaderServer(tls)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def leader() -> Iterator[LeaderServer]:
    with serve() as server:
        yield server


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port in a thread, as the hub does; yield its URL."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False, timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=15, what="uvicorn to start")
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def role_at(url: str | None) -> Callable[[], dict[str, Any]]:
    return lambda: {"role": "standby", "leader": "hub-a", "epoch": 4, "leader_url": url}


def standby(url: str | None, forwarder: Forwarder | None = None) -> TestClient:
    return TestClient(RoleApp(standby_app(role_at(url), forwarder=forwarder or Forwarder(max_bytes=LIMIT))))


def test_a_live_read_gets_the_leaders_answer_with_the_callers_token_and_query(leader: Any) -> None:
    with standby(leader.url + "/prefix") as client:
        answer = client.get("/sites?label=kind%3Dtruck&page=2", headers={**AUTH, "Cookie": "c=1"})
    assert answer.status_code == 200
    assert answer.json() == {
        "sites": ["truck-7"],
        "path": "/prefix/sites?label=kind%3Dtruck&page=2",
        "auth": AUTH["Authorization"],
    }
    assert answer.headers["content-type"] == "application/json"
    assert (answer.headers[ROLE_HEADER], answer.headers[SERVED_BY_HEADER]) == ("standby", "hub-a")
    assert answer.headers["cache-control"] == "no-store"
    assert "keep-alive" not in answer.headers
    assert "x-private" not in answer.headers
    [(_, _, headers)] = leader.seen
    assert headers[FORWARDED_HEADER] == "standby"
    assert "Cookie" not in headers  # only the token and what the answer's form depends on go on


def test_the_leaders_errors_redirects_and_head_answers_come_back(leader: Any) -> None:
    with standby(leader.url) as client:
        missing = client.get("/sites/nowhere", headers=AUTH)
        head = client.head("/sites", headers=AUTH)
        moved = client.get("/sites/", headers=AUTH, follow_redirects=False)
    assert missing.status_code == 404
    assert missing.json() == {"error": "NotFound", "detail": "no route /sites/nowhere"}
    assert missing.headers[SERVED_BY_HEADER] == "hub-a"
    assert head.status_code == 200
    assert head.content == b""
    assert int(head.headers["content-length"]) > 0  # the leader's length of the body a GET would get
    assert (moved.status_code, moved.headers["location"]) == (307, "/sites")  # stays on the standby
    assert [(method, path) for method, path, _ in leader.seen] == [
        ("GET", "/sites/nowhere"),
        ("HEAD", "/sites"),
        ("GET", "/sites/"),
    ]


def test_an_answer_larger_than_the_limit_is_a_502(leader: Any) -> None:
    with standby(leader.url) as client:
        sized, unsized = client.get("/big"), client.get("/unsized")
    for answer in (sized, unsized):
        assert answer.status_code == 502
        assert answer.headers[ROLE_HEADER] == "standby"
        assert f"more than the {LIMIT} a standby passes on" in answer.json()["detail"]


def test_an_event_stream_is_passed_on_event_by_event_and_ends_at_one_too_large(leader: Any) -> None:
    with standby(leader.url) as client:
        answer = client.get("/dashboard/events", headers=AUTH)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/event-stream"
    assert answer.headers[ROLE_HEADER] == "standby"
    assert answer.content == b"event: snapshot\ndata: {}\n\n" * 3


def test_an_event_reaches_the_caller_before_the_leaders_stream_goes_on(leader: LeaderServer) -> None:
    with served(standby_app(role_at(leader.url))) as url:
        conn = http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1]), timeout=60)
        conn.request("GET", "/live-events", headers=AUTH)
        answer = conn.getresponse()
        first = [answer.readline(), answer.readline(), answer.readline()]
        leader.release.set()  # the leader sends the second event only now
        rest = answer.read()
        conn.close()
    assert answer.status == 200
    assert answer.getheader(SERVED_BY_HEADER) == "hub-a"
    assert first == [b"event: snapshot\n", b"data: 1\n", b"\n"]
    assert rest == b"event: snapshot\ndata: 2\n\n"
    assert leader.released == [True]  # the first event came through while the leader still waited


def test_a_leader_that_cannot_be_reached_is_a_503_naming_it() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"  # nothing listens once it is closed
    with standby(closed) as client:
        answer = client.get("/sites", headers=AUTH)
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "1"
    body = answer.json()
    assert (body["error"], body["leader"], body["leader_url"]) == ("standby", "hub-a", closed)
    assert f"served by the leader hub-a at {closed} (epoch 4); it cannot be reached from here" in body["detail"]


def test_a_leader_that_does_not_answer_in_time_is_a_503(leader: Any) -> None:
    with standby(leader.url, Forwarder(timeout_s=0.1)) as client:
        answer = client.get("/slow", headers=AUTH)
    assert answer.status_code == 503
    assert "it did not answer in time" in answer.json()["detail"]


def test_a_request_a_standby_sent_on_is_not_sent_on_again(leader: Any) -> None:
    with standby(leader.url) as client:
        answer = client.get("/sites", headers={**AUTH, FORWARDED_HEADER: "standby"})
    assert answer.status_code == 503
    assert "is a standby's URL too" in answer.json()["detail"]
    assert leader.seen == []


def test_an_https_leader_is_verified_against_the_hubs_ca(tmp_path: Path) -> None:
    tls = issued_tls(tmp_path, "127.0.0.1")
    assert leader_ca(tls, tmp_path) == tmp_path / "ca" / "ca.pem"
    with serve(tls) as server:
        with standby(server.url, Forwarder(leader_ca(tls, tmp_path))) as client:
            trusted = client.get("/sites", headers=AUTH)
        with standby(server.url, Forwarder(None)) as client:  # the system's CAs do not know the hub's
            untrusted = client.get("/sites", headers=AUTH)
    assert trusted.status_code == 200
    assert trusted.json()["sites"] == ["truck-7"]
    assert untrusted.status_code == 503
    assert "its certificate does not verify" in untrusted.json()["detail"]


def test_the_ca_a_standby_trusts(tmp_path: Path) -> None:
    given = ServerTls(tmp_path / "cert.pem", tmp_path / "key.pem")
    assert leader_ca(given, tmp_path) is None  # the operator's certificate: the system's CAs
    assert leader_ca(None, tmp_path) is None  # plain HTTP and no CA yet
    issued_tls(tmp_path, "127.0.0.1")
    assert leader_ca(None, tmp_path) == tmp_path / "ca" / "ca.pem"


def test_a_leaders_url_that_is_not_http_is_a_503() -> None:
    with standby("ftp://hub-a") as client:
        answer = client.get("/sites", headers=AUTH)
    assert answer.status_code == 503
    assert "'ftp://hub-a' is not an http(s) URL; check the leader's --ha-url" in answer.json()["detail"]


def test_without_a_leaders_url_a_read_is_still_a_503() -> None:
    with standby(None) as client:
        answer = client.get("/dashboard/app.js")
    assert answer.status_code == 503
    assert "served by the leader hub-a (epoch 4); send it there" in answer.json()["detail"]
