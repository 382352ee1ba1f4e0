"""The asyncio client's frame reader: large messages in many chunks, in linear work; oversize ones skipped unread."""

from __future__ import annotations

import struct

import pytest

from edge_agent.mqtt.codec import FrameReader, MalformedPacket, packet, text

MIB = 2**20


def publish_frame(topic: str, payload: bytes, qos: int, mid: int) -> bytes:
    return packet(0x30 | qos << 1, text(topic) + (struct.pack(">H", mid) if qos else b"") + payload)


class Heard:
    """What a reader reported, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int, int, int]] = []
        self.payloads: list[bytes] = []

    def publish(self, topic: str, payload: bytes, qos: int, mid: int) -> None:
        self.events.append(("publish", topic, len(payload), qos, mid))
        self.payloads.append(payload)

    def control(self, head: int, body: bytes) -> None:
        self.events.append(("control", "", len(body), head, 0))

    def oversize(self, topic: str, size: int, qos: int, mid: int) -> None:
        self.events.append(("oversize", topic, size, qos, mid))


def feed_in_chunks(reader: FrameReader, stream: bytes, chunk: int, heard: Heard, limit: int | None = None) -> None:
    for at in range(0, len(stream), chunk):
        if limit is None:
            reader.feed(stream[at : at + chunk], heard.publish, heard.control)
        else:
            reader.feed(stream[at : at + chunk], heard.publish, heard.control, heard.oversize, limit)


def test_a_large_message_in_many_small_chunks_comes_out_whole() -> None:
    big = bytes(range(256)) * (16 * MIB // 256)
    stream = publish_frame("plant/1/cam", big, 1, 7) + publish_frame("plant/1/temp", b"{}", 0, 0)
    heard = Heard()
    feed_in_chunks(FrameReader(), stream, 1460, heard)  # one TCP segment at a time: 11,500 chunks
    assert heard.events == [("publish", "plant/1/cam", 16 * MIB, 1, 7), ("publish", "plant/1/temp", 2, 0, 0)]
    assert heard.payloads[0] == big


@pytest.mark.parametrize("chunk", [1, 7, 1460, 65_536])
def test_gathering_a_message_copies_each_byte_once(chunk: int) -> None:
    size = 2 * MIB if chunk > 1000 else 128 * 1024
    stream = publish_frame("t", b"x" * size, 1, 1) * 2
    reader = FrameReader()
    heard = Heard()
    feed_in_chunks(reader, stream, chunk, heard)
    assert [e[2] for e in heard.events] == [size, size]
    # the work of reassembly: bytes copied into the buffer, at most the bytes received (with joined
    # chunks it was their sum over every chunk, quadratic in the message's size)
    assert reader.buffered <= len(stream)


def test_a_message_over_the_limit_is_skipped_unbuffered_and_reported_with_its_size() -> None:
    limit = 64 * 1024
    stream = (
        publish_frame("plant/1/temp", b"{}", 1, 1)
        + publish_frame("plant/1/cam", b"x" * (5 * limit), 1, 2)
        + publish_frame("plant/1/cam", b"y" * limit, 0, 0)  # at the limit: kept
        + publish_frame("plant/1/temp", b"[]", 1, 3)
        + publish_frame("plant/1/cam", b"z" * (limit + 1), 0, 0)  # the last, cut by the end of the stream
    )
    for chunk in (1, 5, 1460, len(stream)):
        reader = FrameReader()
        heard = Heard()
        feed_in_chunks(reader, stream[:-10], chunk, heard, limit=limit)
        assert heard.events == [
            ("publish", "plant/1/temp", 2, 1, 1),
            ("oversize", "plant/1/cam", 5 * limit, 1, 2),
            ("publish", "plant/1/cam", limit, 0, 0),
            ("publish", "plant/1/temp", 2, 1, 3),
            ("oversize", "plant/1/cam", limit + 1, 0, 0),
        ]
        assert reader.buffered <= limit + 2 * 1460  # the kept one; of those over the limit, their topic at most
        reader.feed(stream[-10:] + publish_frame("t", b"1", 0, 0), heard.publish, heard.control, heard.oversize, limit)
        assert heard.events[-1] == ("publish", "t", 1, 0, 0)


def test_control_packets_are_not_subject_to_the_limit() -> None:
    suback = packet(0x90, b"\x00\x01" + b"\x01" * 300)
    heard = Heard()
    feed_in_chunks(FrameReader(), suback, 100, heard, limit=10)
    assert heard.events == [("control", "", 302, 0x90, 0)]


def test_a_remaining_length_of_five_bytes_is_refused() -> None:
    with pytest.raises(MalformedPacket, match="more than four bytes"):
        FrameReader().feed(b"\x30\xff\xff\xff\xff\x01", Heard().publish, Heard().control)
