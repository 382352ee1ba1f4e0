"""MQTT 3.1.1 packets on the wire: what :class:`~edge_agent.mqtt.asyncio_transport.AsyncioTransport` writes and reads.

Encoders return whole packets as bytes; :class:`FrameReader` splits the byte
stream of a connection into packets, keeping a partial one for the next chunk.
Only what the agent speaks is here: QoS 0 and 1, no will message.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

#: Packet types, the upper four bits of a packet's first byte.
CONNACK, PUBLISH, PUBACK, SUBACK, UNSUBACK, PINGRESP = 2, 3, 4, 9, 11, 13
PINGREQ = b"\xc0\x00"
DISCONNECT = b"\xe0\x00"
#: CONNACK return codes that refuse the connection, for log lines.
REFUSED = {
    1: "unacceptable protocol version",
    2: "identifier rejected",
    3: "server unavailable",
    4: "bad user name or password",
    5: "not authorised",
}
_PUBACK_HEAD = struct.Struct(">BBH")


def remaining_length(n: int) -> bytes:
    """MQTT's variable-length encoding of a remaining length."""
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def text(value: str | bytes) -> bytes:
    """A UTF-8 string (or raw bytes) prefixed by its two-byte length."""
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack(">H", len(raw)) + raw


def packet(head: int, body: bytes) -> bytes:
    """A packet: its first byte, the remaining length, then ``body``."""
    return bytes([head]) + remaining_length(len(body)) + body


def connect(client_id: str, keepalive: int, *, clean: bool, username: str | None, password: str | None) -> bytes:
    """A CONNECT packet (a password is sent only with a user name)."""
    flags = 0x02 if clean else 0x00
    payload = text(client_id)
    if username is not None:
        flags |= 0x80
        payload += text(username)
        if password is not None:
            flags |= 0x40
            payload += text(password)
    head = text("MQTT") + bytes([4, flags]) + struct.pack(">H", keepalive)
    return packet(0x10, head + payload)


def publish(topic: str, payload: bytes, qos: int, mid: int, retain: bool) -> bytes:
    """A PUBLISH packet (``mid`` is sent only for QoS 1)."""
    body = text(topic) + (struct.pack(">H", mid) if qos else b"") + payload
    return packet(0x30 | qos << 1 | int(retain), body)


def duplicate(publish_packet: bytes) -> bytes:
    """The same PUBLISH packet marked as sent again (DUP)."""
    return bytes([publish_packet[0] | 0x08]) + publish_packet[1:]


def puback(mid: int) -> bytes:
    """A PUBACK packet for message ``mid``."""
    return _PUBACK_HEAD.pack(0x40, 2, mid)


def subscribe(mid: int, filters: list[tuple[str, int]]) -> bytes:
    """A SUBSCRIBE packet; QoS above 1 is asked as 1."""
    return packet(0x82, struct.pack(">H", mid) + b"".join(text(f) + bytes([min(q, 1)]) for f, q in filters))


def unsubscribe(mid: int, topics: list[str]) -> bytes:
    """An UNSUBSCRIBE packet."""
    return packet(0xA2, struct.pack(">H", mid) + b"".join(text(t) for t in topics))


def packet_id(body: bytes) -> int:
    """The message id at the start of a PUBACK or SUBACK body."""
    return (body[0] << 8) | body[1]


class MalformedPacket(ValueError):
    """The byte stream holds something that is no MQTT packet (a remaining length of more than four bytes)."""


#: Called with the topic, payload, QoS and message id (0 for QoS 0) of each PUBLISH.
OnPublish = Callable[[str, bytes, int, int], object]
#: Called with the first byte and the body of every other packet.
OnControl = Callable[[int, bytes], object]
#: Called with the topic, payload size, QoS and message id of each PUBLISH over the limit, whose payload is skipped.
OnOversize = Callable[[str, int, int, int], object]


class FrameReader:
    """Splits a connection's byte stream into packets, in time linear in the bytes received.

    A packet cut between chunks is gathered in a buffer that each chunk extends by what it
    adds, so every byte is copied in once (:attr:`buffered` counts them), however many chunks
    a large message takes. A PUBLISH whose payload is over the ``limit`` given to :meth:`feed`
    is not gathered at all: once its topic and message id are in, the rest of it is skipped as
    it arrives, and ``on_oversize`` hears of it.
    """

    def __init__(self) -> None:
        self._buf = bytearray()  # the start of a packet the last chunk cut
        self._need = 0  # the bytes of that packet needed before it can be decoded further
        self._skip = 0  # the bytes of an oversize PUBLISH still to come, to discard
        self.buffered = 0

    def feed(
        self,
        data: bytes,
        on_publish: OnPublish,
        on_control: OnControl,
        on_oversize: OnOversize | None = None,
        limit: int | None = None,
    ) -> None:
        """Decode every whole packet of what was received so far, in order.

        Args:
            data: the bytes just received.
            on_publish: called for each PUBLISH (:data:`OnPublish`).
            on_control: called for every other packet (:data:`OnControl`).
            on_oversize: called instead of ``on_publish`` for a PUBLISH whose payload is over ``limit``.
            limit: the largest payload kept, in bytes (``None``: any; ignored without ``on_oversize``).

        Raises:
            MalformedPacket: the stream is no MQTT; the connection cannot go on.
        """
        if on_oversize is None:
            limit = None
        end = len(data)
        pos = min(self._skip, end)
        self._skip -= pos
        while self._buf:
            if pos == end:
                return
            take = min(self._need - len(self._buf), end - pos)
            self._buf += memoryview(data)[pos : pos + take]
            self.buffered += take
            pos += take
            if len(self._buf) < self._need:
                return
            done, need = self._decode(bytes(self._buf), 0, on_publish, on_control, on_oversize, limit)
            if done == 0:  # its header is whole now, and says how much more it needs
                self._need = need
                continue
            self._buf = bytearray()
            skip = min(self._skip, end - pos)
            self._skip -= skip
            pos += skip
        if pos == end:
            return
        done, need = self._decode(data, pos, on_publish, on_control, on_oversize, limit)
        if done < end:
            self._buf = bytearray(memoryview(data)[done:])
            self._need = need
            self.buffered += end - done

    def _decode(
        self,
        data: bytes,
        pos: int,
        on_publish: OnPublish,
        on_control: OnControl,
        on_oversize: OnOversize | None,
        limit: int | None,
    ) -> tuple[int, int]:
        """Decode the whole packets of ``data`` from ``pos``.

        Returns:
            Where decoding stopped, and the bytes the packet cut there needs from its start before it can be
            decoded further (0 when nothing is cut).
        """
        end = len(data)
        while end - pos >= 2:
            head = data[pos]
            length = data[pos + 1]
            start = pos + 2
            if length & 0x80:  # a remaining length of more than one byte
                length &= 0x7F
                shift = 7
                complete = False
                while start < end and shift <= 21:
                    byte = data[start]
                    start += 1
                    length |= (byte & 0x7F) << shift
                    shift += 7
                    if not byte & 0x80:
                        complete = True
                        break
                if not complete:
                    if shift > 21:
                        msg = "a remaining length of more than four bytes"
                        raise MalformedPacket(msg)
                    return pos, start - pos + 1
            stop = start + length
            if limit is not None and length > limit and head >> 4 == PUBLISH:
                qos = (head >> 1) & 3
                if end - start < 2:
                    return pos, start - pos + 2
                size = (data[start] << 8) | data[start + 1]
                body = start + 2 + size + (2 if qos else 0)
                if body > end:
                    return pos, body - pos
                if stop - body > limit:
                    assert on_oversize is not None
                    mid = (data[body - 2] << 8) | data[body - 1] if qos else 0
                    on_oversize(data[start + 2 : start + 2 + size].decode(), stop - body, qos, mid)
                    if stop > end:
                        self._skip = stop - end
                        return end, 0
                    pos = stop
                    continue
            if stop > end:
                return pos, stop - pos
            if head >> 4 == PUBLISH:
                qos = (head >> 1) & 3
                size = (data[start] << 8) | data[start + 1]
                body = start + 2 + size
                topic = data[start + 2 : body].decode()
                if qos:
                    mid = (data[body] << 8) | data[body + 1]
                    body += 2
                else:
                    mid = 0
                on_publish(topic, data[body:stop], qos, mid)
            else:
                on_control(head, data[start:stop])
            pos = stop
        return pos, 2 if pos < end else 0
