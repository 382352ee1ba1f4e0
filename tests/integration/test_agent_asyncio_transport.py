"""The agent's asyncio MQTT client against real Mosquitto: QoS 0, QoS 1 acknowledged only when told, redelivery."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from edge_agent.mqtt.asyncio_transport import AsyncioTransport
from edge_agent.mqtt.transport import Inbox, Message
from spanedge.mqtt import AGENT_HUB_LINK
from spanedge.sites import Broker
from tests.polling import poll

from .agentkit import client


def broker_of(port: int) -> Broker:
    return Broker(scheme="mqtt", host="127.0.0.1", port=port)


async def intake(port: int, topic: str, qos: int, client_id: str = "spanedge-test-intake") -> tuple[Any, Inbox]:
    """A started intake connection subscribed to ``topic``, with its inbox bound to this loop."""
    inbox = Inbox()
    inbox.bind(asyncio.get_running_loop())
    transport = AsyncioTransport(broker_of(port), client_id, "site broker (test)", inbox=inbox)
    transport.start()
    transport.subscribe([(topic, qos)])
    await poll(transport.subscribed.is_set, 10, "the subscription")
    return transport, inbox


async def take(inbox: Inbox, n: int) -> list[Message]:
    got: list[Message] = []

    def more() -> bool:
        got.extend(inbox.drain(1000))
        return len(got) >= n

    await poll(more, 10, f"{n} messages")
    return got


def publish(port: int, topic: str, payloads: list[bytes], qos: int) -> None:
    sender = client(port)
    infos = [sender.publish(topic, p, qos) for p in payloads]
    for info in infos:
        info.wait_for_publish(10)
    sender.disconnect()
    sender.loop_stop()


@pytest.mark.timeout(60)
async def test_qos0_messages_arrive_whole_and_in_order(mosquitto: Any) -> None:
    transport, inbox = await intake(mosquitto.port, "sensors/+/data", 0)
    # short ones, ones with a multi-byte remaining length, and one larger than a socket read
    payloads = [b"x" * n for n in (0, 1, 126, 127, 128, 16_383, 16_384, 300_000)] + [b"%d" % i for i in range(2000)]
    await asyncio.to_thread(publish, mosquitto.port, "sensors/a/data", payloads, 0)
    got = await take(inbox, len(payloads))
    assert [m.payload for m in got] == payloads
    assert {(m.topic, m.qos, m.source) for m in got} == {("sensors/a/data", 0, transport)}
    transport.stop()
    await transport.closed()


@pytest.mark.timeout(60)
async def test_qos1_is_redelivered_until_acknowledged(mosquitto: Any) -> None:
    port = mosquitto.port
    transport, inbox = await intake(port, "sensors/#", 1)
    payloads = [b'{"n": %d}' % i for i in range(60)]  # within the broker's in-flight window (100)
    await asyncio.to_thread(publish, port, "sensors/b", payloads, 1)
    first = await take(inbox, len(payloads))
    assert [m.payload for m in first] == payloads
    assert all(m.qos == 1 and m.mid > 0 for m in first)
    # only the first 20 are committed and acknowledged; the connection drops before the rest are
    for m in first[:20]:
        transport.ack(m.mid, m.qos)
    await asyncio.sleep(0)  # the acknowledgements of this turn of the loop leave together
    transport.stop()
    await transport.closed()

    again, inbox = await intake(port, "sensors/#", 1)
    redelivered = await take(inbox, 40)
    assert [m.payload for m in redelivered] == payloads[20:]
    for m in redelivered:
        again.ack(m.mid, m.qos)
    await asyncio.sleep(0)
    again.stop()
    await again.closed()

    last, inbox = await intake(port, "sensors/#", 1)
    await asyncio.to_thread(publish, port, "sensors/b", [b"after"], 1)
    assert [m.payload for m in await take(inbox, 1)] == [b"after"]  # nothing acknowledged came back
    last.stop()
    await last.closed()


@pytest.mark.timeout(60)
async def test_qos1_publish_is_confirmed_and_reaches_a_subscriber(mosquitto: Any) -> None:
    received: list[bytes] = []
    watcher = client(mosquitto.port)
    watcher.on_message = lambda _c, _u, m: received.append(m.payload)
    watcher.subscribe("hub/in", 1)
    await asyncio.sleep(0.3)
    confirmed: list[int] = []
    link = AsyncioTransport(
        broker_of(mosquitto.port),
        "spanedge-test-link",
        "hub broker (test)",
        settings=AGENT_HUB_LINK,
        on_published=confirmed.append,
    )
    link.start()
    mids = [link.publish("hub/in", b"batch %d" % i, 1) for i in range(250)]  # some wait for in-flight room
    await poll(lambda: len(confirmed) == len(mids), 10, "every PUBACK")
    assert sorted(confirmed) == sorted(mids)
    await poll(lambda: len(received) == len(mids), 10, "the subscriber")
    assert received == [b"batch %d" % i for i in range(250)]
    link.stop()
    await link.closed()
    watcher.disconnect()
    watcher.loop_stop()


@pytest.mark.timeout(120)
async def test_a_message_over_the_limit_is_skipped_and_a_large_one_under_it_arrives_whole(mosquitto: Any) -> None:
    port = mosquitto.port
    transport, inbox = await intake(port, "cams/#", 1)
    transport.max_message_bytes = 2**20
    frame = bytes(range(256)) * (2**20 // 256)
    payloads = [b"x" * (20 * 2**20), frame, b'{"n": 1}']  # 20 MiB over the limit, then 1 MiB at it
    await asyncio.to_thread(publish, port, "cams/1/jpeg", payloads, 1)
    got = await take(inbox, 3)
    assert [(m.payload == p, m.size, m.oversize) for m, p in zip(got, [b"", *payloads[1:]], strict=True)] == [
        (True, 20 * 2**20, 20 * 2**20),
        (True, 2**20, 0),
        (True, 8, 0),
    ]
    for m in got:
        transport.ack(m.mid, m.qos)
    await asyncio.sleep(0)
    transport.stop()
    await transport.closed()

    again, inbox = await intake(port, "cams/#", 1)
    await asyncio.to_thread(publish, port, "cams/1/jpeg", [b"after"], 1)
    assert [m.payload for m in await take(inbox, 1)] == [b"after"]  # the oversize one was acknowledged too
    again.stop()
    await again.closed()
