"""Signed, retained plan messages: one per site, holding every app that runs there.

Each message goes to ``spanedge/v1/control/<site>/plan`` on the hub broker,
retained and at QoS 1, so an agent that (re)connects gets its current plans at
once. The payload is signed with HMAC-SHA256 (:mod:`spanedge.signing`)::

    {"site": ..., "version": <int, strictly increasing per site>, "issued_at": <unix s>,
     "apps": [{"app", "plan": Plan.to_dict(), "source", "source_sha256"}, ...]}

Versions are ``max(time_ns, last + 1)`` and the last one per site is persisted,
so they keep increasing across hub restarts and clock steps backwards.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from hub.state import StateStore
from spanedge import topics
from spanedge.errors import InvalidPlan
from spanedge.loader import source_hash
from spanedge.plan import Plan
from spanedge.signing import sign, verify
from spanedge.sites import Broker

log = logging.getLogger(__name__)


class Publisher(Protocol):
    """Something that publishes MQTT messages and says whether the broker acknowledged them."""

    def publish(self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = True) -> bool:
        """Publish; return True once acknowledged, False if still pending after a timeout."""
        ...


@dataclass(frozen=True)
class SiteApp:
    """One app's entry in a site's plan message."""

    plan: Plan
    source: str

    def to_dict(self) -> dict[str, Any]:
        """The entry as it goes into the signed payload."""
        return {
            "app": self.plan.app,
            "plan": self.plan.to_dict(),
            "source": self.source,
            "source_sha256": source_hash(self.source),
        }


def sites_of(plan: Plan) -> set[str]:
    """Sites where ``plan`` puts at least one replica."""
    return {a.site for a in plan.assignments}


class PlanDistributor:
    """Builds, signs and publishes per-site plan messages."""

    def __init__(
        self,
        publisher: Publisher,
        secret: bytes,
        store: StateStore | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        """Publish through ``publisher``, signing with ``secret``; persist versions in ``store``."""
        self._publisher = publisher
        self._secret = secret
        self._store = store
        self._clock_ns = clock_ns
        self._lock = threading.Lock()
        self._versions: dict[str, int] = store.load_versions() if store is not None else {}

    @property
    def versions(self) -> dict[str, int]:
        """The last version published per site."""
        with self._lock:
            return dict(self._versions)

    def _next_version(self, site: str) -> int:
        version = max(self._clock_ns(), self._versions.get(site, 0) + 1)
        self._versions[site] = version
        if self._store is not None:
            self._store.save_versions(self._versions)
        return version

    def message(self, site: str, apps: Iterable[SiteApp], version: int) -> bytes:
        """The signed plan message of ``site`` at ``version``."""
        payload = {
            "site": site,
            "version": version,
            "issued_at": time.time(),
            "apps": [a.to_dict() for a in sorted(apps, key=lambda a: a.plan.app)],
        }
        return sign(payload, self._secret)

    def publish(self, apps: Mapping[str, SiteApp], sites: Iterable[str]) -> dict[str, str]:
        """Publish the message of every site in ``sites`` from the full set of deployed ``apps``.

        A site's message holds every app with a replica there; a site with none
        gets a message with an empty ``apps`` list, so its agent stops them.

        Returns:
            ``{site: "published" | "pending"}``; pending messages are queued by
            the MQTT client and sent when the broker is reachable again.
        """
        result: dict[str, str] = {}
        with self._lock:
            for site in sorted(set(sites)):
                mine = [a for a in apps.values() if site in sites_of(a.plan)]
                version = self._next_version(site)
                ok = self._publisher.publish(topics.control(site, "plan"), self.message(site, mine, version))
                result[site] = "published" if ok else "pending"
                log.info(
                    "plan message %d for site %s (%s): %s",
                    version,
                    site,
                    ", ".join(a.plan.app for a in mine) or "no apps",
                    result[site],
                )
        return result


def read_plan_message(message: bytes, secret: bytes, *, site: str, after_version: int = 0) -> dict[str, Any]:
    """Verify a plan message as an agent must, and return its payload.

    Args:
        message: the raw MQTT payload.
        secret: the shared plan-signing secret.
        site: the site the reader serves; the message must be addressed to it.
        after_version: the last version accepted; the message must be newer.

    Raises:
        InvalidPlan: the message is forged, for another site, stale, or an app's
            source does not match its hash or its plan.
    """
    payload = verify(message, secret)
    if payload.get("site") != site:
        msg = f"plan message is for site {payload.get('site')!r}, not {site!r}; check the agent's --site"
        raise InvalidPlan(msg)
    version = payload.get("version")
    if not isinstance(version, int) or version <= after_version:
        msg = f"stale plan message for site {site!r}: version {version!r} is not newer than {after_version}"
        raise InvalidPlan(msg)
    for entry in payload.get("apps", []):
        if source_hash(str(entry.get("source", ""))) != entry.get("source_sha256"):
            msg = f"plan message for site {site!r}: the source of app {entry.get('app')!r} does not match its hash"
            raise InvalidPlan(msg)
        Plan.from_dict(entry["plan"])
    return payload


class MqttControl:
    """The hub's control connection to its broker: publishes plans, receives heartbeats.

    A paho-mqtt client on its own network thread; it reconnects by itself and
    sends QoS 1 messages queued while the broker was unreachable.
    """

    def __init__(
        self,
        broker: Broker,
        *,
        client_id: str = "spanedge-hub-control",
        on_heartbeat: Callable[[str, bytes], object] | None = None,
        ack_timeout: float = 5.0,
    ) -> None:
        """Prepare a client for ``broker``; ``on_heartbeat(site, payload)`` gets every heartbeat."""
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        self.broker = broker
        self._ack_timeout = ack_timeout
        self._on_heartbeat = on_heartbeat
        self._connected = threading.Event()
        self._stopping = False
        self._client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv311, clean_session=True
        )
        self._client.max_queued_messages_set(0)
        self._client.reconnect_delay_set(min_delay=1, max_delay=10)
        broker.authenticate(self._client)
        self._client.on_connect = self._handle_connect
        self._client.on_disconnect = self._handle_disconnect
        self._client.on_message = self._handle_message

    @property
    def connected(self) -> bool:
        """True while connected to the broker."""
        return self._connected.is_set()

    def _handle_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        if getattr(reason, "is_failure", False):
            log.warning("hub broker %s refused the connection: %s", self.broker.url, reason)
            return
        log.info("connected to hub broker %s", self.broker.url)
        if self._on_heartbeat is not None:
            client.subscribe([(topics.control("+", "heartbeat"), 0), (topics.control("+", "probe"), 0)])
        self._connected.set()

    def _handle_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        self._connected.clear()
        if not self._stopping:
            log.warning("disconnected from hub broker %s (%s); reconnecting", self.broker.url, reason)

    def _handle_message(self, client: Any, userdata: Any, message: Any) -> None:
        parts = str(message.topic).split("/")
        if len(parts) == 5 and parts[4] == "probe":
            self._echo_probe(client, str(message.topic), bytes(message.payload))
            return
        if self._on_heartbeat is None or len(parts) != 5 or parts[4] != "heartbeat":
            return
        try:
            self._on_heartbeat(parts[3], bytes(message.payload))
        except Exception:
            log.exception("heartbeat from %s could not be processed", parts[3])

    @staticmethod
    def _echo_probe(client: Any, topic: str, payload: bytes) -> None:
        """Answer an agent's probe with the hub clock, so it can estimate its clock offset."""
        try:
            probe = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        if isinstance(probe, dict) and "ts" in probe and "hub_ts" not in probe:
            client.publish(topic, orjson.dumps({"hub_ts": time.time(), "echo_ts": probe["ts"]}), qos=0)

    def start(self, timeout: float = 10.0) -> MqttControl:
        """Connect in the background and wait up to ``timeout`` s for the first connection."""
        self._client.connect_async(self.broker.host, self.broker.port, keepalive=30)
        self._client.loop_start()
        if not self._connected.wait(timeout):
            log.warning("hub broker %s not reachable yet; plans are queued and sent once it is", self.broker.url)
        return self

    def publish(self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = True) -> bool:
        """Publish and wait up to the ack timeout for the broker's acknowledgement."""
        info = self._client.publish(topic, payload, qos=qos, retain=retain)
        try:
            info.wait_for_publish(self._ack_timeout)
        except (RuntimeError, ValueError):
            return False
        return bool(info.is_published())

    def stop(self) -> None:
        """Disconnect and stop the network thread."""
        self._stopping = True
        self._client.disconnect()
        self._client.loop_stop()
        self._connected.clear()

    def __enter__(self) -> MqttControl:
        """Start the client."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop the client."""
        self.stop()
