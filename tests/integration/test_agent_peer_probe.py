"""Peer-spoke latency probes get their answer from the broker itself."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from edge_agent.mqtt.codec import FrameReader
from edge_agent.probes import PROBE_PINGS, mqtt_roundtrip_ms
from edge_agent.telemetry import peer_roundtrip_ms
from simulate.broker import BrokerSecurity, Mosquitto, free_port, mosquitto_path
from simulate.tls import make_tls
from simulate.wan import LinkProxy, WanLink
from spanedge.broker_acl import password_file
from spanedge.errors import SpanEdgeError
from spanedge.sites import TLS, Broker
from tests.conftest import missing_part


@pytest.mark.timeout(30)
async def test_mqtt_roundtrip_reaches_the_broker(mosquitto: Any) -> None:
    rtt = await mqtt_roundtrip_ms("127.0.0.1", mosquitto.port)
    assert rtt is not None
    assert rtt >= 0.0


class CountingBroker:
    """A stand-in broker on a local port: accepts a CONNECT with user ``barn``, refuses others, counts PINGREQs."""

    def __init__(self) -> None:
        self.pings = 0
        self.users: list[str | None] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames, packets = FrameReader(), []
        try:
            while True:
                data = await reader.read(4096)
                if not data:
                    return
                frames.feed(data, lambda *_: None, lambda head, body: packets.append((head, body)))
                while packets:
                    head, body = packets.pop(0)
                    kind = head >> 4
                    if kind == 1:  # CONNECT: protocol name, level, flags, keep-alive, client id, user
                        flags, rest = body[7], body[10:]
                        rest = rest[2 + int.from_bytes(rest[:2], "big") :]
                        user = rest[2 : 2 + int.from_bytes(rest[:2], "big")].decode() if flags & 0x80 else None
                        self.users.append(user)
                        writer.write(b"\x20\x02\x00" + (b"\x00" if user == "barn" else b"\x05"))
                    elif kind == 12:
                        self.pings += 1
                        writer.write(b"\xd0\x00")
                    elif kind == 14:  # DISCONNECT
                        return
                await writer.drain()
        finally:
            writer.close()


@pytest.mark.timeout(30)
async def test_a_probe_pings_a_broker_that_accepts_it_and_still_times_one_that_refuses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker = CountingBroker()
    port = await broker.start()
    try:
        assert await mqtt_roundtrip_ms("127.0.0.1", port, username="barn", password="secret") is not None
        assert (broker.users, broker.pings) == (["barn"], PROBE_PINGS)
        assert await mqtt_roundtrip_ms("127.0.0.1", port) is not None  # the CONNACK refusing it is a round trip
        assert (broker.users[1:], broker.pings) == ([None], PROBE_PINGS)

        peer = Broker(scheme="mqtt", host="127.0.0.1", port=port, username="barn", password_env="BARN_MQTT_PASSWORD")
        monkeypatch.delenv("BARN_MQTT_PASSWORD", raising=False)
        assert await peer_roundtrip_ms(peer) is not None  # no password: anonymous, refused
        monkeypatch.setenv("BARN_MQTT_PASSWORD", "secret")
        assert await peer_roundtrip_ms(peer) is not None
        assert (broker.users[2:], broker.pings) == ([None, "barn"], 2 * PROBE_PINGS)
    finally:
        broker.server.close()
        await broker.server.wait_closed()


@pytest.mark.timeout(30)
async def test_unreachable_broker_gives_none() -> None:
    assert await mqtt_roundtrip_ms("127.0.0.1", free_port(), timeout=1.0) is None


@pytest.mark.timeout(60)
async def test_the_tls_roundtrip_crosses_the_link_to_the_broker(tmp_path: Path) -> None:
    """Over TLS too the answer comes from the broker, so a proxy on the way adds its delay (a TCP connect would not)."""
    try:
        mosquitto_path()
    except SpanEdgeError as exc:
        missing_part(str(exc))
    tls = make_tls(tmp_path / "tls")
    (tmp_path / "passwords").write_text(password_file({"cloud": "hub-password-0123456789"}))
    (tmp_path / "acl").write_text("user cloud\ntopic readwrite #\n")
    security = BrokerSecurity(tls, tmp_path / "passwords", tmp_path / "acl")
    with Mosquitto(workdir=tmp_path / "broker", security=security) as broker:
        proxy = await LinkProxy(WanLink("a", "b", delay_ms=100), "a", "b", broker.port).start()
        try:
            context = TLS(ca_file=str(tls.ca_file)).context()
            rtt = await mqtt_roundtrip_ms("127.0.0.1", proxy.port, timeout=10, tls=context)
            assert rtt is not None
            assert rtt >= 200.0  # one round trip over a link that delays each way by 100 ms
            logged_in = await mqtt_roundtrip_ms(
                "127.0.0.1", proxy.port, timeout=10, tls=context, username="cloud", password="hub-password-0123456789"
            )
            assert logged_in is not None
            assert logged_in >= 200.0  # the pings after the CONNACK cross the link too
            other = make_tls(tmp_path / "other")  # a CA that did not sign the broker's certificate
            wrong = TLS(ca_file=str(other.ca_file)).context()
            assert await mqtt_roundtrip_ms("127.0.0.1", broker.port, timeout=10, tls=wrong) is None
        finally:
            await proxy.stop()
