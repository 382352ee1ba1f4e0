"""The agent's MQTT client choice, its topic matching and its frame parser (no broker)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from edge_agent.aio_transport import AsyncioTransport, _Connection
from edge_agent.config import AgentLaunch
from edge_agent.intake import topic_matches
from edge_agent.mqtt_codec import packet, text
from edge_agent.transport import Inbox, PahoTransport
from edge_agent.transports import transport_factory
from spanedge.sites import Broker


@pytest.mark.parametrize(
    ("topic_filter", "topic", "expected"),
    [
        ("a/+/c", "a/b/c", True),
        ("a/#", "a", True),
        ("a/#", "a/b/c", True),
        ("a/+", "a/b/c", False),
        ("a/+", "a", False),
        ("+/+", "/x", True),
        ("a/b", "a/c", False),
        ("#", "$SYS/broker", False),
        ("$SYS/#", "$SYS/broker", True),
    ],
)
def test_topic_matching_follows_mqtt(topic_filter: str, topic: str, expected: bool) -> None:
    assert topic_matches(topic_filter, topic) is expected


def test_transport_names() -> None:
    assert transport_factory("paho") is PahoTransport
    assert transport_factory("asyncio") is AsyncioTransport
    with pytest.raises(ValueError, match="use one of asyncio, paho"):
        transport_factory("zmq")
    with pytest.raises(ValueError, match="invalid transport"):
        AgentLaunch(site="s", sites=Path("sites.yaml"), transport="zmq")
    assert AgentLaunch(site="s", sites=Path("sites.yaml"), transport="PAHO").transport == "paho"


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
