"""MQTT behind a small interface: connect, subscribe, publish, acknowledge.

:class:`PahoTransport` drives paho-mqtt 2.x in its network thread, with a
persistent session (fixed client id, no clean session) and manual
acknowledgement: an incoming QoS 1 message is acknowledged only when the
agent calls :meth:`Transport.ack`, after the record is safe in state or the
outbox. Incoming messages go to a bounded :class:`Inbox`. QoS 1 intake is
bounded by the broker's in-flight window (``max_inflight_messages``): the
broker sends no more unacknowledged messages than that, and the agent
acknowledges only after processing, so a slow pipeline slows the broker down.
When the inbox is full a QoS 0 message is dropped and counted.

The network thread must never block inside paho's ``on_message``: paho holds
its callback lock there, and ``ack()`` or ``publish()`` from the event loop
may need the same lock, so blocking would deadlock the agent.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, Unpack

from spanedge.mqtt import AGENT_INTAKE, ClientSettings, connect, make_client

if TYPE_CHECKING:
    import paho.mqtt.client as mqtt

    from spanedge.sites import Broker

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Message:
    """One message received from a broker."""

    topic: str
    payload: bytes
    qos: int
    mid: int
    source: Transport
    arrival: float


class Inbox:
    """A bounded, thread-safe queue from network threads to the event loop.

    While messages flow the consumer polls every few milliseconds, so the
    network threads never pay for waking the event loop; only an idle
    consumer is woken explicitly.

    Args:
        maxsize: messages held before QoS 0 intake drops (QoS 1 is bounded by the broker).
        poll: seconds between polls while busy.
    """

    def __init__(self, maxsize: int = 5000, poll: float = 0.002) -> None:
        self.maxsize = maxsize
        self.poll = poll
        self.dropped = 0
        self.closed = False
        self._items: collections.deque[Message] = collections.deque()
        self._warned = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._idle = False
        self._quiet = False
        self._local = False  # a producer runs on the event loop: wake the consumer directly, no polling
        self._room: list[Callable[[], None]] = []

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach to the event loop that consumes the inbox."""
        self._loop = loop
        self._event = asyncio.Event()

    def put(self, message: Message) -> None:
        """Add a message (from a network thread); drop and count QoS 0 ones when full.

        QoS 1 messages are always kept: the broker's in-flight window bounds them.
        """
        if len(self._items) >= self.maxsize:
            if message.qos == 0:
                self.dropped += 1
                return
            if not self._warned:
                self._warned = True
                log.warning(
                    "more than %d unacknowledged QoS 1 messages queued; set max_inflight_messages "
                    "(e.g. 100) on the broker to bound intake",
                    self.maxsize,
                )
        self._items.append(message)
        if self._idle:
            self._idle = False
            if self._loop is not None and self._event is not None:
                with contextlib.suppress(RuntimeError):  # the loop is closed: the agent is stopping
                    self._loop.call_soon_threadsafe(self._event.set)

    def put_local(self, messages: list[Message]) -> bool:
        """Add messages from a producer running on the event loop (e.g. an asyncio connection).

        Returns:
            False when the inbox is more than half full: the producer should stop reading and
            resume when :meth:`on_room` calls it back. When full, QoS 0 messages are dropped and
            counted as in :meth:`put`.
        """
        items = self._items
        if len(items) >= self.maxsize:
            for m in messages:
                if m.qos == 0:
                    self.dropped += 1
                else:
                    items.append(m)
        else:
            items.extend(messages)
        self._local = True
        if self._event is not None:
            self._event.set()
        return len(items) < self.maxsize // 2

    def on_room(self, resume: Callable[[], None]) -> None:
        """Call ``resume`` once the inbox is down to a quarter of its bound."""
        self._room.append(resume)

    async def wait(self, timeout: float) -> None:
        """Wait until messages are available or ``timeout`` seconds passed."""
        assert self._event is not None, "bind() the inbox to the event loop first"
        if not self._quiet and not self._local:
            for _ in range(25):  # busy: poll for a while before going idle
                if self._items:
                    return
                await asyncio.sleep(self.poll)
        self._event.clear()
        self._idle = True
        if self._items:
            self._idle = False
            return
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
            self._quiet = False
        except TimeoutError:
            self._quiet = True  # nothing came: wait on the event directly next time
        self._idle = False

    def drain(self, limit: int) -> list[Message]:
        """Take up to ``limit`` messages."""
        items = self._items
        n = min(limit, len(items))
        taken = [items.popleft() for _ in range(n)]
        if self._room and len(items) <= self.maxsize // 4:
            room, self._room = self._room, []
            for resume in room:
                resume()
        return taken

    def __len__(self) -> int:
        return len(self._items)

    def close(self) -> None:
        """Mark the inbox closed (the agent is stopping)."""
        self.closed = True


class Transport(Protocol):
    """What the agent needs from an MQTT connection.

    ``on_connected`` (if set) is called after every (re)connection;
    ``subscribed`` is set once the broker acknowledged the subscriptions.
    """

    name: str
    broker: Broker
    subscribed: threading.Event
    on_connected: Callable[[], None] | None
    on_published: Callable[[int], None] | None

    @property
    def connected(self) -> bool:
        """True while connected."""
        ...

    @property
    def filters(self) -> list[tuple[str, int]]:
        """The topic filters subscribed to."""
        ...

    def start(self) -> None:
        """Connect in the background; reconnect with backoff forever."""

    def stop(self) -> None:
        """Disconnect and stop the network thread."""

    def subscribe(self, filters: list[tuple[str, int]]) -> None:
        """Subscribe now and after every reconnect."""

    def unsubscribe(self, topics: list[str]) -> None:
        """Drop subscriptions, also from a persistent session."""

    def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> int:
        """Queue a message; return its message id (acknowledged via ``on_published``)."""
        ...

    def ack(self, mid: int, qos: int) -> None:
        """Acknowledge a received message."""


class ConnectionOptions(TypedDict, total=False):
    """The optional settings of a broker connection, as keywords of a :class:`TransportFactory`.

    Attributes:
        inbox: where received messages go (``None``, the default, for publish-only connections).
        settings: the connection's role (:mod:`spanedge.mqtt`): session, queue, in-flight, keep-alive
            and reconnect limits; the default is a site-broker intake with a persistent session.
        on_published: called with the message id of each acknowledged publish.
    """

    inbox: Inbox | None
    settings: ClientSettings
    on_published: Callable[[int], None] | None


class TransportFactory(Protocol):
    """Builds the agent's connections; :class:`PahoTransport` is one, tests pass stand-ins."""

    def __call__(self, broker: Broker, client_id: str, name: str, **options: Unpack[ConnectionOptions]) -> Transport:
        """Return a connection to ``broker`` (not started)."""
        ...


class TransportBase:
    """What every transport keeps alike: its options, the subscriptions it renews and its connection log lines.

    Args:
        broker: the broker to connect to (credentials and TLS included).
        client_id: a fixed client id, so the broker keeps the session while the agent is down.
        name: a label for log lines (e.g. ``"hub broker cloud"``).
        **options: see :class:`ConnectionOptions`.
    """

    #: Where the connection's log lines go (each transport's own module logger).
    _log = log

    def __init__(self, broker: Broker, client_id: str, name: str, **options: Unpack[ConnectionOptions]) -> None:
        self.name = name
        self.broker = broker
        self.client_id = client_id
        self.inbox = options.get("inbox")
        self.settings = options.get("settings", AGENT_INTAKE)
        self.on_published = options.get("on_published")
        self.on_connected: Callable[[], None] | None = None
        self.subscribed = threading.Event()
        self._filters: list[tuple[str, int]] = []
        self._stopping = False
        self._ever_connected = False
        self._failures = 0

    @property
    def filters(self) -> list[tuple[str, int]]:
        """The topic filters this connection subscribes to."""
        return list(self._filters)

    def _keep_filters(self, filters: list[tuple[str, int]]) -> None:
        """Remember topic filters, to subscribe again after every reconnect."""
        for f in filters:
            if f not in self._filters:
                self._filters.append(f)

    def _forget_filters(self, topics: list[str]) -> None:
        self._filters = [f for f in self._filters if f[0] not in topics]

    def _begin_stop(self) -> None:
        """Stop reconnecting and close the inbox (the agent is stopping)."""
        self._stopping = True
        if self.inbox is not None:
            self.inbox.close()

    def _log_connected(self, session_present: bool) -> None:
        again = "re" if self._ever_connected else ""
        self._log.info(
            "%sconnected to %s (%s), session present: %s", again, self.name, self.broker.url, session_present
        )
        self._ever_connected = True
        self._failures = 0

    def _log_refused(self, reason: object) -> None:
        self._failures += 1
        self._log.warning("%s (%s) refused the connection: %s; retrying", self.name, self.broker.url, reason)

    def _log_unreachable(self, error: object | None = None) -> None:
        """Count a failed attempt to connect; log the 1st, 2nd, 5th and every 20th."""
        self._failures += 1
        if self._failures in (1, 2, 5) or self._failures % 20 == 0:
            self._log.warning(
                "cannot reach %s (%s), attempt %d%s; retrying with backoff (up to %d s)",
                self.name,
                self.broker.url,
                self._failures,
                "" if error is None else f": {error}",
                self.settings.reconnect_max_s,
            )

    def _log_lost(self, reason: object | None = None) -> None:
        self._log.warning(
            "lost connection to %s (%s)%s; reconnecting with backoff",
            self.name,
            self.broker.url,
            "" if reason is None else f": {reason}",
        )

    def _subscription_answered(self, refused: list[Any]) -> None:
        """Log the broker's answer to a SUBSCRIBE and set :attr:`subscribed` unless it ``refused`` a filter."""
        if refused:
            self._log.error("%s (%s) refused a subscription: %s", self.name, self.broker.url, refused)
            return
        self._log.info("subscribed to %s on %s", ", ".join(f for f, _ in self._filters), self.broker.url)
        self.subscribed.set()


class PahoTransport(TransportBase):
    """A paho-mqtt 2.x client with a persistent session and manual acknowledgement.

    Args:
        broker: the broker to connect to.
        client_id: a fixed client id, so the broker keeps the session while the agent is down.
        name: a label for log lines (e.g. ``"hub broker cloud"``).
        **options: see :class:`ConnectionOptions`; ``on_published`` is called from the network thread.
    """

    def __init__(self, broker: Broker, client_id: str, name: str, **options: Unpack[ConnectionOptions]) -> None:
        super().__init__(broker, client_id, name, **options)
        self._connected = threading.Event()
        client = make_client(broker, client_id, self.settings)
        client.on_connect = self._on_connect
        client.on_connect_fail = self._on_connect_fail
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        client.on_publish = self._on_publish
        client.on_subscribe = self._on_subscribe
        self._client = client

    @property
    def connected(self) -> bool:
        """True while connected to the broker."""
        return self._connected.is_set()

    def wait_connected(self, timeout: float) -> bool:
        """Block until connected (for tools and tests)."""
        return self._connected.wait(timeout)

    def start(self) -> None:
        """Connect in the background and keep reconnecting with backoff."""
        connect(self._client, self.broker, self.settings)

    def stop(self) -> None:
        """Disconnect and join the network thread."""
        self._begin_stop()
        self._client.disconnect()
        # after disconnect() the network thread may end on its own and clear paho's reference to it
        # between loop_stop()'s check and its join: then there is nothing left to join
        with contextlib.suppress(AttributeError):
            self._client.loop_stop()
        self._connected.clear()

    def subscribe(self, filters: list[tuple[str, int]]) -> None:
        """Subscribe to topic filters now (if connected) and after every reconnect."""
        self._keep_filters(filters)
        if self.connected and filters:
            self._client.subscribe(filters)

    def unsubscribe(self, topics: list[str]) -> None:
        """Drop subscriptions (also from the broker's persistent session)."""
        self._forget_filters(topics)
        if topics:
            self._client.unsubscribe(topics)

    def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> int:
        """Queue a message for sending; return its message id."""
        info = self._client.publish(topic, payload, qos=qos, retain=retain)
        return int(info.mid)

    def ack(self, mid: int, qos: int) -> None:
        """Acknowledge a received QoS 1 message."""
        if qos > 0:
            self._client.ack(mid, qos)

    # -- paho callbacks (network thread) ----------------------------------

    def _on_connect(self, client: mqtt.Client, _u: Any, flags: Any, reason: Any, _p: Any) -> None:
        if reason.is_failure:
            self._log_refused(reason)
            return
        self._log_connected(flags.session_present)
        if self._filters:
            client.subscribe(self._filters)
        self._connected.set()
        if self.on_connected is not None:
            self.on_connected()

    def _on_connect_fail(self, _client: mqtt.Client, _u: Any) -> None:
        self._log_unreachable()

    def _on_disconnect(self, _client: mqtt.Client, _u: Any, _flags: Any, reason: Any, _p: Any) -> None:
        was = self._connected.is_set()
        self._connected.clear()
        if was and not self._stopping:
            self._log_lost(reason)

    def _on_message(self, _client: mqtt.Client, _u: Any, msg: mqtt.MQTTMessage) -> None:
        if self.inbox is None:
            self._client.ack(msg.mid, msg.qos)
            return
        self.inbox.put(Message(msg.topic, bytes(msg.payload), msg.qos, msg.mid, self, time.time()))

    def _on_subscribe(self, _client: mqtt.Client, _u: Any, _mid: int, reasons: Any, _p: Any) -> None:
        self._subscription_answered([r for r in reasons if r.is_failure])

    def _on_publish(self, _client: mqtt.Client, _u: Any, mid: int, _reason: Any, _p: Any) -> None:
        if self.on_published is not None:
            self.on_published(mid)
