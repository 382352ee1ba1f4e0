"""A thin MQTT 3.1.1 client on the asyncio event loop, behind the :class:`~edge_agent.mqtt.transport.Transport` interface.

:class:`AsyncioTransport` speaks the protocol itself on an asyncio
connection: no network thread, no per-message callback. Each chunk read from
the socket is parsed in one pass and its messages go to the inbox together;
the agent, on the same event loop, takes them without a thread hand-off.
A message cut across chunks is gathered in linear time, and one over the
connection's ``max_message_bytes`` is skipped as it arrives, unbuffered: the
agent gets its topic and size only (:attr:`~edge_agent.mqtt.transport.Message.oversize`).
Acknowledgements keep the agent's rule: an incoming QoS 1 message gets its
PUBACK only when the agent calls :meth:`AsyncioTransport.ack`, after its
effect is committed; the PUBACKs of one commit leave in one socket write.
While the inbox holds more than half its bound the connection stops reading,
so the broker, not the agent, holds the backlog (TCP flow control).

Like :class:`~edge_agent.mqtt.paho_transport.PahoTransport`, it keeps a persistent
session when its :class:`~spanedge.mqtt.ClientSettings` say so, resubscribes
after every reconnect, reconnects with the settings' backoff, sends keep-alive
pings, bounds outgoing QoS 1 messages by ``max_inflight`` and ``max_queued``
and resends unacknowledged ones after a reconnect. Credentials and TLS come
from the broker of ``sites.yaml``. It must be started inside a running event
loop (the agent's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from typing import Unpack

from edge_agent.mqtt import codec
from edge_agent.mqtt.inflight import InflightWindow, Writer
from edge_agent.mqtt.transport import ConnectionOptions, Message, TransportBase
from spanedge.sites import Broker, tls_context

log = logging.getLogger(__name__)

#: After a DISCONNECT, how long to wait for the broker to close the connection before closing it here.
_CLOSE_WAIT_S = 2.0


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection: frames in, bytes out."""

    def __init__(self, owner: AsyncioTransport) -> None:
        self.owner = owner
        self.transport: asyncio.Transport | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.paused = False
        self.last_in = time.monotonic()
        self._frames = codec.FrameReader()

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
        owner = self.owner
        received: list[Message] = []
        arrival = time.time()

        def publish(topic: str, payload: bytes, qos: int, mid: int) -> None:
            received.append(Message(topic, payload, qos, mid, owner, arrival))

        def oversize(topic: str, size: int, qos: int, mid: int) -> None:
            received.append(Message(topic, b"", qos, mid, owner, arrival, size))

        try:
            self._frames.feed(data, publish, owner._control, oversize, owner.max_message_bytes)
        except codec.MalformedPacket as exc:
            log.error("%s (%s) sent what is no MQTT (%s); reconnecting", owner.name, owner.broker.url, exc)
            if self.transport is not None:
                self.transport.abort()
            return
        if received and not owner._stopping:  # stopping: unacknowledged, the broker redelivers them
            owner._received(received, self)


class AsyncioTransport(TransportBase):
    """An MQTT 3.1.1 connection on the running event loop, with manual acknowledgement.

    The packets are :mod:`edge_agent.mqtt.codec`'s, the outgoing window is an
    :class:`~edge_agent.mqtt.inflight.InflightWindow`; this class is the session:
    connect, subscribe, keep-alive, reconnect and acknowledgements.

    Args:
        broker: the broker to connect to (credentials and TLS included).
        client_id: a fixed client id, so the broker keeps the session while the agent is down.
        name: a label for log lines (e.g. ``"site broker (truck-7)"``).
        **options: see :class:`~edge_agent.mqtt.transport.ConnectionOptions`; ``settings`` also sets the
            keep-alive, and ``on_published`` is called on the event loop.
    """

    _log = log

    def __init__(self, broker: Broker, client_id: str, name: str, **options: Unpack[ConnectionOptions]) -> None:
        super().__init__(broker, client_id, name, **options)
        self._conn: _Connection | None = None
        self._connected = False
        self._task: asyncio.Task[None] | None = None
        self._window = InflightWindow(self.settings.max_inflight, self.settings.max_queued)
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
        self._ssl = tls_context(ca_certs, certfile, keyfile)

    # -- the Transport interface --------------------------------------------

    @property
    def connected(self) -> bool:
        """True while connected to the broker (CONNACK received)."""
        return self._connected

    def start(self) -> None:
        """Connect in the background (on the running loop) and keep reconnecting with backoff."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"mqtt {self.name}")

    def stop(self) -> None:
        """Send the pending acknowledgements, disconnect and stop reconnecting."""
        self._begin_stop()
        conn = self._conn
        if conn is not None and conn.transport is not None and self._connected:
            self._flush()
            conn.write(codec.DISCONNECT)
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
        self._keep_filters(filters)
        if self._connected and filters:
            self._send_subscribe(filters)

    def unsubscribe(self, topics: list[str]) -> None:
        """Drop subscriptions (also from the broker's persistent session)."""
        self._forget_filters(topics)
        if topics and self._connected and self._conn is not None:
            self._conn.write(codec.unsubscribe(self._window.next_mid(), topics))

    def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> int:
        """Send a message (QoS 0 or 1); return its message id (0 for QoS 0)."""
        qos = min(qos, 1)
        mid = self._window.next_mid() if qos else 0
        packet = codec.publish(topic, payload, qos, mid, retain)
        write = self._writer()
        if not qos:
            if write is not None:
                write(packet)
            return 0
        if not self._window.send(mid, packet, write):
            log.warning(
                "%s: %d messages queued already; dropping one for %s", self.name, len(self._window.queued), topic
            )
        return mid

    def ack(self, mid: int, qos: int) -> None:
        """Acknowledge a received QoS 1 message (its PUBACK leaves with the others of this turn of the loop)."""
        if qos <= 0 or not self._connected:
            return  # not connected: the broker redelivers it
        self._acks += codec.puback(mid)
        if not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)

    async def closed(self) -> None:
        """Wait until the background task ended after :meth:`stop` (for tools and tests)."""
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    # -- internals --------------------------------------------------------------

    def _writer(self) -> Writer:
        """How to send on the connection, or ``None`` while not connected."""
        return self._conn.write if self._connected and self._conn is not None else None

    def _flush(self) -> None:
        self._flush_due = False
        if self._acks and self._conn is not None and self._connected:
            self._conn.write(self._acks)
        self._acks = bytearray()

    def _send_subscribe(self, filters: list[tuple[str, int]]) -> None:
        assert self._conn is not None
        mid = self._window.next_mid()
        self._window.subscribing.add(mid)
        self._conn.write(codec.subscribe(mid, filters))

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
                self._log_unreachable(exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, float(self.settings.reconnect_max_s))
                continue
            self._conn = conn
            conn.write(
                codec.connect(
                    self.client_id,
                    self.settings.keepalive,
                    clean=not self.settings.persistent,
                    username=self._username,
                    password=self._password,
                )
            )
            was = await self._hold(conn)
            if self._stopping:
                break
            if was:
                self._log_lost()
                delay = float(self.settings.reconnect_min_s)
            await asyncio.sleep(delay)
            delay = min(delay * 2, float(self.settings.reconnect_max_s))

    async def _hold(self, conn: _Connection) -> bool:
        """Keep ``conn`` alive until it closes; return whether it had been connected (CONNACK)."""
        pinger = asyncio.get_running_loop().create_task(self._keepalive(conn))
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
        return was

    async def _keepalive(self, conn: _Connection) -> None:
        interval = self.settings.keepalive
        while True:
            await asyncio.sleep(interval / 2)
            if time.monotonic() - conn.last_in > 1.5 * interval:  # no CONNACK or PINGRESP: the link is dead
                if conn.transport is not None:
                    conn.transport.abort()
                return
            if self._connected:
                conn.write(codec.PINGREQ)

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
        if kind == codec.CONNACK:
            self._connack(body)
        elif kind == codec.PUBACK:
            mid = codec.packet_id(body)
            if self._window.acknowledged(mid):
                if self.on_published is not None:
                    self.on_published(mid)
                self._window.send_queued(self._writer())
        elif kind == codec.SUBACK:
            self._window.subscribing.discard(codec.packet_id(body))
            codes = list(body[2:])
            self._subscription_answered(codes if any(code & 0x80 for code in codes) else [])
        # UNSUBACK, PINGRESP: nothing to do; QoS 2 is never subscribed to

    def _connack(self, body: bytes) -> None:
        code = body[1] if len(body) > 1 else 255
        conn = self._conn
        if code != 0:
            self._log_refused(codec.REFUSED.get(code, f"code {code}"))
            if conn is not None and conn.transport is not None:
                conn.transport.close()
            return
        self._log_connected(bool(body[0] & 1))
        self._connected = True
        self._window.subscribing.clear()
        if self._filters:
            self._send_subscribe(self._filters)
        self._window.resend(self._writer())
        if self.on_connected is not None:
            self.on_connected()
