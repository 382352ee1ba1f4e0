"""What the agent needs from an MQTT connection, and what its clients share.

:class:`Transport` is the interface (connect, subscribe, publish, acknowledge);
:class:`Message` is what a connection hands the agent through the bounded
:class:`Inbox` (QoS 0 dropped and counted when full, QoS 1 bounded by the
broker's in-flight window); :class:`TransportFactory` builds a connection;
:class:`TransportBase` holds the options, renewed subscriptions and log lines
of both clients, :class:`~edge_agent.mqtt.paho_transport.PahoTransport` and
:class:`~edge_agent.mqtt.asyncio_transport.AsyncioTransport`. An incoming QoS 1
message is acknowledged only when the agent calls :meth:`Transport.ack`, after
the record is safe in state or the outbox.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, Unpack

from spanedge.mqtt import AGENT_INTAKE, ClientSettings

if TYPE_CHECKING:
    from spanedge.sites import Broker

log = logging.getLogger(__name__)


class MessageSource(Protocol):
    """Where a :class:`Message` came from: a broker connection or a connector (:mod:`edge_agent.connectors`)."""

    name: str

    def ack(self, mid: int, qos: int) -> None:
        """Acknowledge a received message, once it is committed."""


@dataclass(slots=True)
class Message:
    """One message received from a broker or read by a connector.

    ``oversize`` is the size of a payload the connection did not keep, being over its
    ``max_message_bytes`` (``payload`` is then empty); 0 when ``payload`` is whole.
    ``problem``, from a connector, says why its value does not fit (dead-lettered with ``topic``,
    the node or register it came from).
    """

    topic: str
    payload: bytes
    qos: int
    mid: int
    source: MessageSource
    arrival: float
    oversize: int = 0
    problem: str = ""

    @property
    def size(self) -> int:
        """The payload's size in bytes, kept or not."""
        return self.oversize or len(self.payload)


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
    A received message larger than ``max_message_bytes`` (``None``: no limit) may come
    without its payload (:attr:`Message.oversize`).
    """

    name: str
    broker: Broker
    subscribed: threading.Event
    on_connected: Callable[[], None] | None
    on_published: Callable[[int], None] | None
    max_message_bytes: int | None

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
        max_message_bytes: received payloads larger than this may be dropped unread, their message
            passed on with its size only (:attr:`Message.oversize`); ``None`` (the default): no limit.
    """

    inbox: Inbox | None
    settings: ClientSettings
    on_published: Callable[[int], None] | None
    max_message_bytes: int | None


class TransportFactory(Protocol):
    """Builds the agent's connections; :class:`~edge_agent.mqtt.paho_transport.PahoTransport` is one, tests pass stand-ins."""

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
        self.max_message_bytes = options.get("max_message_bytes")
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
