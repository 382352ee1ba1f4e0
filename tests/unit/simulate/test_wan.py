"""The WAN emulator against a local echo server: bytes, bandwidth scheduling, partitions."""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import AsyncIterator

import pytest

from simulate.wan import Direction, LinkProxy, WanLink

pytestmark = pytest.mark.timeout(20)


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(4096):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    yield int(server.sockets[0].getsockname()[1])
    server.close()


async def _proxy(link: WanLink, port: int) -> LinkProxy:
    return await LinkProxy(link, "edge", "hub", port).start()


async def _roundtrip(port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    got = await reader.readexactly(len(payload))
    writer.close()
    return got


async def test_bytes_are_carried_and_counted_per_direction(echo_port: int) -> None:
    link = WanLink("edge", "hub", delay_ms=5, jitter_ms=2, bandwidth_mbps=50, seed=1)
    proxy = await _proxy(link, echo_port)
    try:
        payload = bytes(range(256)) * 400  # 100 kB
        assert await _roundtrip(proxy.port, payload) == payload
        await asyncio.sleep(0.05)
        assert link.bytes() == {"edge>hub": len(payload), "hub>edge": len(payload)}
        assert link.total_bytes == 2 * len(payload)
        assert proxy.accepted == 1
    finally:
        await proxy.stop()


async def test_partition_drops_connections_refuses_new_ones_and_heals(echo_port: int) -> None:
    link = WanLink("edge", "hub", delay_ms=1)
    proxy = await _proxy(link, echo_port)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"before")
        assert await reader.readexactly(6) == b"before"
        link.partition()
        assert await reader.read() == b""  # the open connection is dropped
        writer.close()

        reader2, writer2 = await asyncio.open_connection("127.0.0.1", proxy.port)
        assert await reader2.read() == b""  # new connections are refused while cut
        writer2.close()
        assert proxy.refused == 1

        link.heal()
        assert await _roundtrip(proxy.port, b"after the heal") == b"after the heal"
        assert link.partitions == 1
    finally:
        await proxy.stop()


async def test_unreachable_server_is_refused() -> None:
    from simulate.broker import free_port

    link = WanLink("edge", "hub", delay_ms=1)
    proxy = await LinkProxy(link, "edge", "hub", free_port()).start()  # nothing listens there
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        assert await reader.read() == b""
        writer.close()
        assert proxy.refused == 1
    finally:
        await proxy.stop()


def test_bandwidth_serialises_chunks_back_to_back() -> None:
    way = Direction(delay_ms=20, bandwidth_mbps=1.0)  # 125 kB/s
    depart1, arrive1 = way.schedule(12_500, now=100.0)  # 0.1 s on the wire
    assert depart1 == pytest.approx(100.1)
    assert arrive1 == pytest.approx(100.12)
    depart2, arrive2 = way.schedule(12_500, now=100.05)  # link still busy: queues behind the first
    assert depart2 == pytest.approx(100.2)
    assert arrive2 == pytest.approx(100.22)
    depart3, _ = way.schedule(125, now=200.0)  # idle link: starts at once
    assert depart3 == pytest.approx(200.001)


def test_uncapped_link_only_delays() -> None:
    way = Direction(delay_ms=40, jitter_ms=10, rng=random.Random(3))
    for now in (1.0, 2.0, 3.0):
        depart, arrive = way.schedule(1_000_000, now=now)
        assert depart == now
        assert now + 0.040 <= arrive <= now + 0.050


def test_latency_change_applies_to_both_directions() -> None:
    link = WanLink("a", "b", delay_ms=20)
    link.set_delay(150)
    assert link.way("a", "b").delay_ms == link.way("b", "a").delay_ms == 150
    _, arrive = link.way("b", "a").schedule(10, now=0.0)
    assert arrive == pytest.approx(0.15)


async def test_a_proxy_can_take_its_sockets_from_elsewhere_and_bind_its_source(echo_port: int) -> None:
    """The sockets of a relay in another namespace come from a factory; here, plain ones on 127.0.0.2."""
    made: list[socket.socket] = []

    async def sockets() -> socket.socket:
        sock = socket.socket()
        sock.setblocking(False)
        made.append(sock)
        return sock

    link = WanLink("edge", "hub", delay_ms=0)
    proxy = LinkProxy(link, "edge", "hub", echo_port, listen_host="127.0.0.1", source_host="127.0.0.2", sockets=sockets)
    await proxy.start()
    try:
        assert proxy.url == f"mqtt://127.0.0.1:{proxy.port}"
        assert await _roundtrip(proxy.port, b"hello") == b"hello"
        assert len(made) == 2  # the listener and the connection to the server
        assert made[1].getsockname()[0] == "127.0.0.2"
        await asyncio.sleep(0.05)
        assert link.bytes() == {"edge>hub": 5, "hub>edge": 5}
    finally:
        await proxy.stop()
