"""A thin MQTT 3.1.1 client on the asyncio event loop, behind the :class:`~edge_agent.transport.Transport` interface.

:class:`AsyncioTransport` speaks the protocol itself on an asyncio
connection: no network thread, no per-message callback. Each chunk read from
the socket is parsed in one pass and its messages go to the inbox together;
the agent, on the same event loop, takes them without a thread hand-off.
Acknowledgements keep the agent's rule: an incoming QoS 1 message gets its
PUBACK only when the agent calls :meth:`AsyncioTransport.ack`, after its
effect is committed; the PUBACKs of one commit leave in one socket write.
While the inbox holds more than half its bound the connection stops reading,
so the broker, not the agent, holds the backlog (TCP flow control).

Like :class:`~edge_agent.transport.PahoTransport`, it keeps a persistent
session when its :class:`~spanedge.mqtt.ClientSettings` say so, resubscribes
after every reconnect, reconnects with the settings' backoff, sends keep-alive
pings, bounds outgoing QoS 1 messages by ``max_inflight`` and ``max_queued``
and resends unacknowledged ones after a reconnect. Credentials and TLS come
from the broker of ``sites.yaml``. It must be started inside a running event
loop (the agent's).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import ssl
import struct
import threading
import time
from collections.abc import Callable

from edge_agent.transport import Inbox, Message
from spanedge.mqtt import AGENT_INTAKE, ClientSettings
from spanedge.sites import Broker

log = logging.getLogger(__name__)

_CONNACK, _PUBLISH, _PUBACK, _SUBACK, _UNSUBACK, _PINGRESP = 2, 3, 4, 9, 11, 13
_PINGREQ = b"\xc0\x00"
_DISCONNECT = b"\xe0\x00"
_REFUSED = {
    1: "unacceptable protocol version",
    2: "identifier rejected",
    3: "server unavailable",
    4: "bad user name or password",
    5: "not authorised",
}
_PUBACK_HEAD = struct.Struct(">BBH")
#: After a DISCONNECT, how long to wait for the broker to close the connection before closing it here.
_CLOSE_WAIT_S = 2.0


def _length(n: int) -> bytes:
    """MQTT's variable-length encoding of a remaining length."""
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _text(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack(">H", len(raw)) + raw


def _packet(head: int, body: bytes) -> bytes:
    return bytes([head]) + _length(len(body)) + body


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection: frames in, bytes out."""

    def __init__(self, owner: AsyncioTransport) -> None:
        self.owner = owner
        self.transport: asyncio.Transport | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.paused = False
        self.last_in = time.monotonic()
        self._rest = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def write(self, data: bytes | bytearray) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def resume(self) -> None:
        if self.paused and self.transport is not None and not self.transport.is_closing():
            self.paused = False
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        self.last_in = time.monotonic()
        if self._rest:
            data = self._rest + data
        owner = self.owner
        end = len(data)
        pos = 0
        received: list[Message] = []
        arrival = time.time()
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
                    break
            stop = start + length
            if stop > end:
                break
            if head >> 4 == _PUBLISH:
                qos = (head >> 1) & 3
                size = (data[start] << 8) | data[start + 1]
                body = start + 2 + size
                topic = data[start + 2 : body].decode()
                if qos:
                    mid = (data[body] << 8) | data[body + 1]
                    body += 2
                else:
                    mid = 0
                received.append(Message(topic, data[body:stop], qos, mid, owner, arrival))
            else:
                owner._control(head, data[start:stop])
            pos = stop
        self._rest = data[pos:] if pos < end else b""
        if received and not owner._stopping:  # stopping: unacknowledged, the broker redelivers them
            owner._received(received, self)


class AsyncioTransport:
    """An MQTT 3.1.1 connection on the running event loop, with manual acknowledgement.

    Longer than most classes on purpose: it is one protocol state machine (session, in-flight
    window, reconnect, keep-alive), whose parts share its state and read best side by side.

    Args:
        broker: the broker to connect to (credentials and TLS included).
        client_id: a fixed client id, so the broker keeps the session while the agent is down.
        name: a label for log lines (e.g. ``"site broker (truck-7)"``).
        inbox: where received messages go (``None`` for publish-only connections).
        settings: the connection's role (:mod:`spanedge.mqtt`): session, in-flight, queue,
            keep-alive and reconnect limits; the default is a site-broker intake.
        on_published: called on the event loop with the message id of each acknowledged publish.
    """

    def __init__(
        self,
        broker: Broker,
        client_id: str,
        name: str,
        *,
        inbox: Inbox | None = None,
        settings: ClientSettings = AGENT_INTAKE,
        on_published: Callable[[int], None] | None = None,
    ) -> None:
        self.name = name
        self.broker = broker
        self.client_id = client_id
        self.inbox = inbox
        self.settings = settings
        self.on_published = on_published
        self.on_connected: Callable[[], None] | None = None
        self.subscribed = threading.Event()
        self._filters: list[tuple[str, int]] = []
        self._conn: _Connection | None = None
        self._connected = False
        self._ever_connected = False
        self._stopping = False
        self._failures = 0
        self._task: asyncio.Task[None] | None = None
        self._mid = 0
        self._inflight: dict[int, bytes] = {}  # outgoing QoS 1 publishes awaiting their PUBACK
        self._queued: collections.deque[tuple[int, bytes]] = collections.deque()
        self._subscribing: set[int] = set()
        self._acks = bytearray()
        self._flush_due = False
        self._username: str | None = None
        self._password: str | None = None
        self._ssl: ssl.SSLContext | None = None
        broker.authenticate(self)

    # -- what Broker.authenticate calls -------------------------------------

    def username_pw_set(self, username: str, password: str | None = None) -> None:
        """Log in with these credentials."""
        self._username, self._password = username, password

    def tls_set(self, ca_certs: str | None = None, certfile: str | None = None, keyfile: str | None = None) -> None:
        """Connect over TLS, verifying the broker's certificate (against ``ca_certs`` if given)."""
        context = ssl.create_default_context(cafile=ca_certs)
        if certfile:
            context.load_cert_chain(certfile, keyfile)
        self._ssl = context

    # -- the Transport interface --------------------------------------------

    @property
    def filters(self) -> list[tuple[str, int]]:
        """The topic filters this connection subscribes to."""
        return list(self._filters)

    @property
    def connected(self) -> bool:
        """True while connected to the broker (CONNACK received)."""
        return self._connected

    def start(self) -> None:
        """Connect in the background (on the running loop) and keep reconnecting with backoff."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"mqtt {self.name}")

    def stop(self) -> None:
        """Send the pending acknowledgements, disconnect and stop reconnecting."""
        self._stopping = True
        if self.inbox is not None:
            self.inbox.close()
        conn = self._conn
        if conn is not None and conn.transport is not None and self._connected:
            self._flush()
            conn.write(_DISCONNECT)
            # The broker closes the connection once it has read the DISCONNECT, so the last
            # PUBACKs are read first. Closing here with unread bytes in our socket (reading may be
            # paused) would send a RST, and a broker that had not read them yet would drop them.
            conn.resume()
            asyncio.get_running_loop().call_later(_CLOSE_WAIT_S, conn.transport.close)
        else:
            if conn is not None and conn.transport is not None:
                conn.transport.close()
            if self._task is not None:
                self._task.cancel()
        self._connected = False

    def subscribe(self, filters: list[tuple[str, int]]) -> None:
        """Subscribe to topic filters now (if connected) and after every reconnect."""
        for f in filters:
            if f not in self._filters:
                self._filters.append(f)
        if self._connected and filters:
            self._send_subscribe(filters)

    def unsubscribe(self, topics: list[str]) -> None:
        """Drop subscriptions (also from the broker's persistent session)."""
        self._filters = [f for f in self._filters if f[0] not in topics]
        if topics and self._connected and self._conn is not None:
            body = struct.pack(">H", self._next_mid()) + b"".join(_text(t) for t in topics)
            self._conn.write(_packet(0xA2, body))

    def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> int:
        """Send a message (QoS 0 or 1); return its message id (0 for QoS 0)."""
        qos = min(qos, 1)
        mid = self._next_mid() if qos else 0
        body = _text(topic) + (struct.pack(">H", mid) if qos else b"") + payload
        packet = _packet(0x30 | qos << 1 | int(retain), body)
        if not qos:
            if self._connected and self._conn is not None:
                self._conn.write(packet)
            return 0
        if self._connected and self._conn is not None and len(self._inflight) < self.settings.max_inflight:
            self._inflight[mid] = packet
            self._conn.write(packet)
        elif self.settings.max_queued and len(self._queued) >= self.settings.max_queued:
            log.warning("%s: %d messages queued already; dropping one for %s", self.name, len(self._queued), topic)
        else:
            self._queued.append((mid, packet))
        return mid

    def ack(self, mid: int, qos: int) -> None:
        """Acknowledge a received QoS 1 message (its PUBACK leaves with the others of this turn of the loop)."""
        if qos <= 0 or not self._connected:
            return  # not connected: the broker redelivers it
        self._acks += _PUBACK_HEAD.pack(0x40, 2, mid)
        if not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)

    # -- internals --------------------------------------------------------------

    def _flush(self) -> None:
        self._flush_due = False
        if self._acks and self._conn is not None and self._connected:
            self._conn.write(self._acks)
        self._acks = bytearray()

    def _next_mid(self) -> int:
        while True:
            self._mid = self._mid % 65535 + 1
            if self._mid not in self._inflight and self._mid not in self._subscribing:
                return self._mid

    def _send_subscribe(self, filters: list[tuple[str, int]]) -> None:
        assert self._conn is not None
        mid = self._next_mid()
        self._subscribing.add(mid)
        body = struct.pack(">H", mid) + b"".join(_text(f) + bytes([min(q, 1)]) for f, q in filters)
        self._conn.write(_packet(0x82, body))

    def _connect_packet(self) -> bytes:
        flags = 0x00 if self.settings.persistent else 0x02
        payload = _text(self.client_id)
        if self._username is not None:
            flags |= 0x80
            payload += _text(self._username)
            if self._password is not None:
                flags |= 0x40
                payload += _text(self._password)
        head = _text("MQTT") + bytes([4, flags]) + struct.pack(">H", self.settings.keepalive)
        return _packet(0x10, head + payload)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        delay = float(self.settings.reconnect_min_s)
        while not self._stopping:
            try:
                _, conn = await loop.create_connection(
                    lambda: _Connection(self),
                    self.broker.host,
                    self.broker.port,
                    ssl=self._ssl,
                    server_hostname=self.broker.host if self._ssl is not None else None,
                )
            except (OSError, ssl.SSLError) as exc:
                self._failures += 1
                if self._failures in (1, 2, 5) or self._failures % 20 == 0:
                    log.warning(
                        "cannot reach %s (%s), attempt %d: %s; retrying with backoff (up to %d s)",
                        self.name,
                        self.broker.url,
                        self._failures,
                        exc,
                        self.settings.reconnect_max_s,
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, float(self.settings.reconnect_max_s))
                continue
            self._conn = conn
            conn.write(self._connect_packet())
            pinger = loop.create_task(self._keepalive(conn))
            try:
                await conn.closed
            finally:
                pinger.cancel()
                if conn.transport is not None and not conn.closed.done():  # cancelled while connected
                    conn.transport.close()
                was = self._connected
                self._connected = False
                self._conn = None
                self._acks = bytearray()  # PUBACKs for a lost connection: the broker redelivers those messages
            if self._stopping:
                break
            if was:
                log.warning("lost connection to %s (%s); reconnecting with backoff", self.name, self.broker.url)
                delay = float(self.settings.reconnect_min_s)
            await asyncio.sleep(delay)
            delay = min(delay * 2, float(self.settings.reconnect_max_s))

    async def _keepalive(self, conn: _Connection) -> None:
        interval = self.settings.keepalive
        while True:
            await asyncio.sleep(interval / 2)
            if time.monotonic() - conn.last_in > 1.5 * interval:  # no CONNACK or PINGRESP: the link is dead
                if conn.transport is not None:
                    conn.transport.abort()
                return
            if self._connected:
                conn.write(_PINGREQ)

    def _received(self, messages: list[Message], conn: _Connection) -> None:
        inbox = self.inbox
        if inbox is None:
            for m in messages:
                self.ack(m.mid, m.qos)
            return
        if not inbox.put_local(messages) and conn.transport is not None and not conn.paused:
            conn.paused = True
            conn.transport.pause_reading()
            inbox.on_room(conn.resume)

    def _control(self, head: int, body: bytes) -> None:
        kind = head >> 4
        if kind == _CONNACK:
            self._connack(body)
        elif kind == _PUBACK:
            mid = (body[0] << 8) | body[1]
            if self._inflight.pop(mid, None) is not None:
                if self.on_published is not None:
                    self.on_published(mid)
                self._send_queued()
        elif kind == _SUBACK:
            mid = (body[0] << 8) | body[1]
            self._subscribing.discard(mid)
            if any(code & 0x80 for code in body[2:]):
                log.error("%s (%s) refused a subscription: %s", self.name, self.broker.url, list(body[2:]))
                return
            log.info("subscribed to %s on %s", ", ".join(f for f, _ in self._filters), self.broker.url)
            self.subscribed.set()
        # UNSUBACK, PINGRESP: nothing to do; QoS 2 is never subscribed to

    def _connack(self, body: bytes) -> None:
        code = body[1] if len(body) > 1 else 255
        conn = self._conn
        if code != 0:
            self._failures += 1
            reason = _REFUSED.get(code, f"code {code}")
            log.warning("%s (%s) refused the connection: %s; retrying", self.name, self.broker.url, reason)
            if conn is not None and conn.transport is not None:
                conn.transport.close()
            return
        again = "re" if self._ever_connected else ""
        log.info("%sconnected to %s (%s), session present: %s", again, self.name, self.broker.url, bool(body[0] & 1))
        self._ever_connected = True
        self._failures = 0
        self._connected = True
        self._subscribing.clear()
        if self._filters:
            self._send_subscribe(self._filters)
        if conn is not None:
            for packet in self._inflight.values():  # unacknowledged before the link dropped: again, marked DUP
                conn.write(bytes([packet[0] | 0x08]) + packet[1:])
        self._send_queued()
        if self.on_connected is not None:
            self.on_connected()

    def _send_queued(self) -> None:
        conn = self._conn
        while (
            self._queued and conn is not None and self._connected and len(self._inflight) < self.settings.max_inflight
        ):
            mid, packet = self._queued.popleft()
            self._inflight[mid] = packet
            conn.write(packet)

    async def closed(self) -> None:
        """Wait until the background task ended after :meth:`stop` (for tools and tests)."""
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
