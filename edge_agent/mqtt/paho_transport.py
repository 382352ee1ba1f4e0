"""The paho-mqtt client of the agent.

:class:`PahoTransport` drives paho-mqtt 2.x in its network thread, with a
persistent session (fixed client id, no clean session) and manual
acknowledgement: an incoming QoS 1 message is acknowledged only when the
agent calls :meth:`PahoTransport.ack`, after the record is safe in state or the
outbox. Incoming messages go to a bounded :class:`~edge_agent.mqtt.transport.Inbox`.
QoS 1 intake is bounded by the broker's in-flight window (``max_inflight_messages``):
the broker sends no more unacknowledged messages than that, and the agent
acknowledges only after processing, so a slow pipeline slows the broker down.

The network thread must never block inside paho's ``on_message``: paho holds
its callback lock there, and ``ack()`` or ``publish()`` from the event loop
may need the same lock, so blocking would deadlock the agent.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Unpack

from edge_agent.mqtt.transport import ConnectionOptions, Message, TransportBase
from spanedge.mqtt import connect, make_client

if TYPE_CHECKING:
    import paho.mqtt.client as mqtt

    from spanedge.sites import Broker

log = logging.getLogger(__name__)


class PahoTransport(TransportBase):
    """A paho-mqtt 2.x client with a persistent session and manual acknowledgement.

    Args:
        broker: the broker to connect to.
        client_id: a fixed client id, so the broker keeps the session while the agent is down.
        name: a label for log lines (e.g. ``"hub broker cloud"``).
        **options: see :class:`~edge_agent.mqtt.transport.ConnectionOptions`; ``on_published`` is called
            from the network thread.
    """

    _log = log

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
