"""The one place every MQTT client of the project is built, with its limits set deliberately.

Each role a connection plays (an agent reading a site broker, an agent's link
to the hub, the hub's ingest, plan distribution, sinks) has a named
:class:`ClientSettings`; :func:`make_client` turns one into a paho-mqtt client
and :func:`connect` starts it. Nothing else calls ``mqtt.Client``.

What comes from where:

* the session (``clean_session``), manual acknowledgement, the in-flight and
  queue limits and the reconnect backoff come from the :class:`ClientSettings`
  of the role, and the keep-alive from the same settings when connecting;
* the host, port, credentials (``username`` and the password from the
  environment variable ``password_env`` names) and TLS (CA, client certificate
  and key; certificates verified) come from the broker of a site in
  ``sites.yaml`` (:class:`spanedge.sites.Broker`): broker URLs are parsed there
  (``mqtt://host:1883``, ``mqtts://host:8883``), nowhere else;
* every client speaks MQTT 3.1.1.

The limits matter: paho queues outgoing messages without bound when
``max_queued`` is 0, and Mosquitto drops what exceeds a client's queue even
for QoS 1 (see the design notes), so every role states both numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import paho.mqtt.client as mqtt

    from spanedge.sites import Broker


@dataclass(frozen=True)
class ClientSettings:
    """How one MQTT connection behaves.

    Attributes:
        persistent: keep the session at the broker while disconnected (``clean_session=False``),
            so QoS 1 messages published meanwhile wait for this client.
        manual_ack: acknowledge received QoS 1 messages only when the caller says so (after
            their effect is durable), not on receipt.
        keepalive: seconds between keep-alive pings; the broker drops the client after 1.5x this.
        max_inflight: outgoing QoS 1 messages sent but not yet acknowledged by the broker.
        max_queued: outgoing messages paho holds while disconnected or at the in-flight limit
            (0 means no limit: used only where the caller bounds what it publishes itself).
        reconnect_min_s: first wait before reconnecting after a lost connection.
        reconnect_max_s: the wait doubles up to this.
    """

    persistent: bool = False
    manual_ack: bool = False
    keepalive: int = 30
    max_inflight: int = 100
    max_queued: int = 10_000
    reconnect_min_s: int = 1
    reconnect_max_s: int = 30

    def __post_init__(self) -> None:
        """Refuse limits paho would reject or read as "unbounded" by accident.

        Raises:
            ValueError: a limit is out of range; the message names it.
        """
        checks = (
            (self.keepalive >= 1, f"keepalive must be at least 1 s, got {self.keepalive}"),
            (self.max_inflight >= 1, f"max_inflight must be at least 1, got {self.max_inflight}"),
            (self.max_queued >= 0, f"max_queued must be 0 (no limit) or more, got {self.max_queued}"),
            (self.reconnect_min_s >= 1, f"reconnect_min_s must be at least 1 s, got {self.reconnect_min_s}"),
            (
                self.reconnect_max_s >= self.reconnect_min_s,
                f"reconnect_max_s ({self.reconnect_max_s}) must be at least reconnect_min_s ({self.reconnect_min_s})",
            ),
        )
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)


#: How long an agent waits at most between attempts to reconnect: a site back from a partition is
#: heard from again within this, so the hub neither counts it gone nor holds its windows for it for
#: longer (with 30 s, an 8 s partition kept an agent away for 16 s under load). An agent has a few
#: connections, so the brokers see at most one attempt per connection every 5 s.
AGENT_RECONNECT_MAX_S = 5
#: An agent reading sensor data from a site broker: the session survives restarts, and a message
#: is acknowledged only once its outputs are committed to the outbox.
AGENT_INTAKE = ClientSettings(persistent=True, manual_ack=True, keepalive=15, reconnect_max_s=AGENT_RECONNECT_MAX_S)
#: An agent's link to the hub broker: the outbox is the durable queue, so no broker session; the
#: drain publishes at most ``max_inflight`` batches ahead of the broker's acknowledgements.
AGENT_HUB_LINK = ClientSettings(persistent=False, manual_ack=True, keepalive=15, reconnect_max_s=AGENT_RECONNECT_MAX_S)
#: An agent publishing local MQTT sink results to its own site broker (it may also read from it).
AGENT_SINK = ClientSettings(persistent=False, manual_ack=True, keepalive=15, reconnect_max_s=AGENT_RECONNECT_MAX_S)
#: The hub reading the edge's data batches: a persistent session, acknowledged after the ingest log
#: has the batch on disk. It publishes nothing, so its outgoing queue stays small.
HUB_INGEST = ClientSettings(persistent=True, manual_ack=True, max_queued=1_000)
#: Plan distribution: a few retained plan messages per re-plan; heartbeats and probes come in.
#: The coordinator bounds what it publishes (one retained plan per site), hence no queue limit.
HUB_DISTRIBUTION = ClientSettings(persistent=False, max_queued=0, reconnect_max_s=10)
#: The hub's presence on its broker (:mod:`hub.control.presence`): a clean session whose will marks the hub
#: gone; a hub that vanishes without a word is marked gone 1.5 keep-alives (15 s) later.
HUB_PRESENCE = ClientSettings(persistent=False, keepalive=10, max_queued=100, reconnect_max_s=10)
#: A hub sink publishing a micro-batch's results, waiting for every acknowledgement before the batch
#: commits; the batch bounds the queue.
HUB_SINK = ClientSettings(persistent=False, max_inflight=1_000, max_queued=0)
#: ``spanedge preview --site``: reads a site's sensor topics for a while and publishes nothing, so it keeps no
#: session at the broker (it must not take messages from an agent's) and queues next to nothing outgoing.
PREVIEW_CAPTURE = ClientSettings(persistent=False, max_inflight=1, max_queued=1)


def make_client(
    broker: Broker, client_id: str, settings: ClientSettings, *, will: tuple[str, bytes] | None = None
) -> mqtt.Client:
    """A paho-mqtt client for ``broker`` with ``settings``, credentials and TLS (MQTT 3.1.1).

    The caller sets its callbacks, then :func:`connect` starts it.

    Args:
        broker: the broker, with its credentials and TLS settings (:meth:`spanedge.sites.Site.mqtt`).
        client_id: the client id; fixed per role, site and hub instance, so a persistent session survives restarts.
        settings: the role's session, acknowledgement, in-flight, queue and reconnect settings.
        will: ``(topic, payload)`` the broker publishes, retained at QoS 1, if the client vanishes without
            disconnecting.

    Raises:
        InvalidSites: the broker names a password variable that is not set.
    """
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    client = mqtt.Client(
        CallbackAPIVersion.VERSION2,
        client_id=client_id,
        clean_session=not settings.persistent,
        protocol=mqtt.MQTTv311,
        manual_ack=settings.manual_ack,
    )
    broker.authenticate(client)
    if will is not None:
        client.will_set(will[0], will[1], qos=1, retain=True)
    client.reconnect_delay_set(min_delay=settings.reconnect_min_s, max_delay=settings.reconnect_max_s)
    client.max_inflight_messages_set(settings.max_inflight)
    client.max_queued_messages_set(settings.max_queued)
    return client


def connect(client: mqtt.Client, broker: Broker, settings: ClientSettings, *, wait: bool = False) -> None:
    """Start ``client``'s network thread and connect it, in the background unless ``wait``.

    In the background, paho retries a refused or lost connection with the settings' backoff.

    Args:
        client: a client from :func:`make_client`.
        broker: the broker it was made for.
        settings: the settings it was made with (the keep-alive is applied here).
        wait: connect in this thread first (raising ``OSError`` if the broker cannot be reached).
    """
    if wait:
        client.connect(broker.host, broker.port, keepalive=settings.keepalive)
    else:
        client.connect_async(broker.host, broker.port, keepalive=settings.keepalive)
    client.loop_start()
