"""The MQTT sink at the edge (``sinks.mqtt(topic)``): a :class:`~edge_agent.connectors.api.Publisher`.

Each value is published at QoS 1 to its topic on the broker of the site where the sink runs,
on the intake's connection to that broker if the agent reads it, else on a connection of its
own (:class:`SiteBrokerLink`). The connection's session queues and resends a value until the
broker acknowledged it, so the agent keeps no queue of its own; :class:`Unacknowledged` holds
what the broker has not acknowledged yet, which bounds what the site reports as delivered.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from edge_agent.mqtt.transport import Transport, TransportFactory
from spanedge.mqtt import AGENT_SINK

if TYPE_CHECKING:
    from edge_agent.intake import Intake
    from spanedge.sites import Sites

log = logging.getLogger(__name__)

#: The QoS of every MQTT sink value.
QOS = 1


class SiteBrokerLink:
    """The connection MQTT sinks publish on: the intake's to this site's broker if it reads it, else its own."""

    def __init__(self, site: str, sites: Sites, intake: Intake, connect: TransportFactory) -> None:
        """Connect on first use."""
        self.site = site
        self.sites = sites
        self.intake = intake
        self.connect = connect
        self._transport: Transport | None = None

    def get(self) -> Transport:
        """The connection, opened on first use."""
        if self._transport is None:
            own = self.intake.transports.get(self.site)
            if own is None:
                own = self.connect(
                    self.sites.site(self.site).mqtt(),
                    f"spanedge-{self.site}-sink",
                    f"site broker ({self.site})",
                    settings=AGENT_SINK,
                )
                own.start()
            self._transport = own
        return self._transport

    def closed(self, transport: Transport) -> None:
        """The intake closed ``transport``: open another on next use if it was this one."""
        if self._transport is transport:
            self._transport = None

    def stop(self) -> None:
        """Disconnect, unless the intake owns the connection (it stops its own)."""
        if self._transport is not None and self._transport not in self.intake.transports.values():
            self._transport.stop()


class Unacknowledged:
    """MQTT sink values published and not yet acknowledged by the broker, each with the event time it lies at or past.

    Sink values are published after their commit; until the broker
    acknowledges one, a site that dies may lose it. So what the site says it
    has delivered (:func:`edge_agent.telemetry.delivered`) stays below the
    lowest bound of these: the app's sink frontier at the commit before
    (every value of a commit lies at or past it). Acknowledgements come on
    the connection's thread, possibly before :meth:`published` records the
    message: such an early one is kept until it does.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, int], tuple[str, float | None]] = {}  # (connection, mid) -> (app, bound)
        self._early: set[tuple[int, int]] = set()

    def hook(self, transport: Transport) -> None:
        """Hear ``transport``'s acknowledgements (set once per connection, before its first publish)."""
        if getattr(transport.on_published, "func", None) != self._acked:
            transport.on_published = functools.partial(self._acked, id(transport))

    def published(self, transport: Transport, mid: int, app: str, bound: float | None) -> None:
        """``transport`` published a value of ``app`` as ``mid``; its event time is at or past ``bound`` (None: unknown)."""
        key = (id(transport), mid)
        with self._lock:
            if key in self._early:
                self._early.discard(key)
            else:
                self._pending[key] = (app, bound)

    def _acked(self, connection: int, mid: int) -> None:
        key = (connection, mid)
        with self._lock:
            if self._pending.pop(key, None) is None:
                self._early.add(key)

    def forget(self, transport: Transport) -> int:
        """Stop waiting for a closed connection's acknowledgements; return how many never came."""
        connection = id(transport)
        with self._lock:
            gone = [k for k in self._pending if k[0] == connection]
            for k in gone:
                del self._pending[k]
            self._early = {k for k in self._early if k[0] != connection}
        return len(gone)

    def bounds(self) -> dict[str, float]:
        """Per app, the lowest event time a value still unacknowledged may carry (apps with none left out)."""
        out: dict[str, float] = {}
        with self._lock:
            for app, bound in self._pending.values():
                if bound is not None and bound < out.get(app, math.inf):
                    out[app] = bound
        return out

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)


class MqttSink:
    """Publishes MQTT sink values at QoS 1 on the connection ``connection`` returns (opened on first use).

    Args:
        connection: returns the connection to this site's broker (:meth:`SiteBrokerLink.get`).
        name: a label for log lines.
    """

    def __init__(self, connection: Callable[[], Transport], name: str = "site broker") -> None:
        self.connection = connection
        self.name = name
        self.pending = Unacknowledged()
        """The values published and not yet acknowledged."""

    def publish(self, app: str, target: str, body: bytes, bound: float | None) -> None:
        """Publish ``body`` to the topic ``target`` at QoS 1; the connection's session resends it until acknowledged."""
        broker = self.connection()
        self.pending.hook(broker)
        mid = broker.publish(target, body, QOS)
        self.pending.published(broker, mid, app, bound)

    def unacknowledged(self) -> dict[str, float]:
        """Per app, the lowest event time a value the broker has not acknowledged may carry."""
        return self.pending.bounds()

    def closed(self, transport: Transport) -> None:
        """``transport`` is closed: its values not yet acknowledged may be lost; say so and stop waiting for them."""
        lost = self.pending.forget(transport)
        if lost:
            log.warning(
                "%d MQTT sink value(s) published on %s were never acknowledged before it closed and may be lost",
                lost,
                transport.name,
            )
