"""The asyncio client's frame parser (no broker)."""

from __future__ import annotations

import struct

from edge_agent.mqtt.asyncio_transport import AsyncioTransport, _Connection
from edge_agent.mqtt.codec import packet, text
from edge_agent.mqtt.transport import Inbox
from spanedge.sites import Broker


def publish_frame(topic: str, payload: bytes, qos: int, mid: int) -> bytes:
    return packet(0x30 | qos << 1, text(topic) + (struct.pack(">H", mid) if qos else b"") + payload)


async def test_frames_split_anywhere_are_parsed_whole() -> None:
    inbox = Inbox()
    transport = AsyncioTransport(Broker(scheme="mqtt", host="127.0.0.1", port=1), "c", "test", inbox=inbox)
    frames = [
        publish_frame("s/a", b"x" * n, qos, i + 1)
        for i, (n, qos) in enumerate([(0, 0), (5, 1), (130, 1), (20_000, 0), (3, 1)])
    ]
    stream = b"".join(frames)
    for cut in [*range(1, 60), 200, len(stream) - 1]:  # inside headers, lengths, topics and payloads
        conn = _Connection(transport)
        conn.data_received(stream[:cut])
        conn.data_received(stream[cut:])
        got = inbox.drain(100)
        assert [(m.topic, len(m.payload), m.qos, m.mid) for m in got] == [
            ("s/a", 0, 0, 0),
            ("s/a", 5, 1, 2),
            ("s/a", 130, 1, 3),
            ("s/a", 20_000, 0, 0),
            ("s/a", 3, 1, 5),
        ]


async def test_a_message_over_the_connections_limit_reaches_the_inbox_with_its_size_only() -> None:
    inbox = Inbox()
    broker = Broker(scheme="mqtt", host="127.0.0.1", port=1)
    transport = AsyncioTransport(broker, "c", "test", inbox=inbox, max_message_bytes=1000)
    conn = _Connection(transport)
    stream = publish_frame("s/cam", b"x" * 5000, 1, 4) + publish_frame("s/a", b"y" * 1000, 1, 5)
    for at in range(0, len(stream), 512):
        conn.data_received(stream[at : at + 512])
    got = inbox.drain(10)
    assert [(m.topic, m.payload, m.oversize, m.size, m.mid) for m in got] == [
        ("s/cam", b"", 5000, 5000, 4),
        ("s/a", b"y" * 1000, 0, 1000, 5),
    ]
