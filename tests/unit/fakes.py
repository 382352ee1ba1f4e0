"""Stand-ins for broker connections shared by the unit tests: the agent's transport, the hub ingest's client."""

from __future__ import annotations

from typing import Any

import paho.mqtt.client as mqtt


class FakeIngestClient:
    """Stands in for the ingest's paho client: records acknowledgements and dead letters."""

    def __init__(self) -> None:
        self.acked: list[int] = []
        self.published: list[tuple[str, bytes]] = []

    def ack(self, mid: int, qos: int) -> None:
        self.acked.append(mid)

    def publish(self, topic: str, payload: bytes, qos: int = 0) -> None:
        self.published.append((topic, payload))

    def disconnect(self) -> None: ...

    def loop_stop(self) -> None: ...


def message(mid: int, topic: str, payload: bytes) -> mqtt.MQTTMessage:
    """A QoS 1 message as paho hands it to the ingest."""
    msg = mqtt.MQTTMessage(mid=mid, topic=topic.encode())
    msg.payload = payload
    msg.qos = 1
    return msg


class FakeTransport:
    """Stands in for a broker connection; records acknowledgements and publishes."""

    def __init__(self, broker: Any, client_id: str, name: str, **_: Any) -> None:
        self.broker, self.name = broker, name
        self.filters: list[tuple[str, int]] = []
        self.acked: list[int] = []
        self.published: list[tuple[str, bytes]] = []
        self.connected = False
        self.on_connected = None
        self.on_published: Any = None

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def subscribe(self, filters: list[tuple[str, int]]) -> None:
        self.filters.extend(f for f in filters if f not in self.filters)

    def unsubscribe(self, topics: list[str]) -> None:
        self.filters = [f for f in self.filters if f[0] not in topics]

    def ack(self, mid: int, qos: int) -> None:
        self.acked.append(mid)

    def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> int:
        self.published.append((topic, payload))
        return len(self.published)
