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
