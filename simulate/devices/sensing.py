"""Sensors that are OPC UA devices: a simulated server per stream, one node per key, read by the site's agent.

A sensor spec with ``device: opcua`` feeds a stream that ``sites.yaml`` binds with
``url: opcua://localhost:.../`` and ``nodes:`` naming one node per sensor key (in namespace 2,
the server's own). The simulator serves those nodes from a
:class:`~simulate.devices.opcua.OpcUaDevice` on a free port (the sites files it writes name
that port) and writes each generated value to its key's node, with the value's event time as
the SourceTimestamp. The agent's subscription turns each value change into one record
``{"name": <key>, "value": <number>, "ts": <event time>}``, so the reference counts one record
per change: a value equal to the node's last one is no change, so it is neither written nor
counted. Each node holds 0 from the server's start, with that time as its timestamp, and the
subscription takes that first value too: it is counted as a record of the stream.

A ``device: modbus`` sensor spec is served the same way by a
:class:`~simulate.devices.polled.PolledDevice` (see :mod:`simulate.devices.polled`), except that
every sample counts, a value equal to the last one included.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

from simulate.config import SensorSpec, Simulation
from simulate.devices.polled import PolledDevice, check_points, unit_of
from simulate.errors import InvalidOption, SimulationError
from simulate.sensors import Device, Message, Sent
from spanedge.connectors.modbus import Point
from spanedge.sites import Sites

#: Host names that are this machine: OPC UA servers there are simulated.
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
#: The namespace index of a simulated server's own nodes.
NAMESPACE = 2


@dataclass
class NodeStream:
    """One ``device: opcua`` (or ``modbus``) stream of one site: its server, its sensors and what they wrote."""

    site: str
    stream: str
    spec: SensorSpec
    nodes: dict[str, str]
    points: dict[str, Point] = field(default_factory=dict)
    """The Modbus points of a ``device: modbus`` stream (``nodes`` then names their registers)."""
    url: str = ""
    unit: int = 1
    server: Any = None
    devices: list[Device] = field(default_factory=list)
    sent: list[Sent] = field(default_factory=list)
    last: dict[str, float] = field(default_factory=dict)
    stopped: bool = False

    def record(self, key: str, value: float, event_time: float, seq: int, device: int = 0) -> Sent:
        """The record the agent makes of a change of ``key``'s node, as the reference counts it."""
        body = {"name": key, "value": value, "ts": event_time}
        message = Message(self.site, self.stream, device, seq, key, key, 0.0, event_time, body, orjson.dumps(body))
        return Sent(message, time.time())

    async def run(self, start_monotonic: float, duration: float) -> None:
        """Write every value due in the first ``duration`` seconds to its node, in time order."""
        loop = asyncio.get_running_loop()
        measured = self.spec.measured()[0]
        heap = [(d.offset(d.seq), i) for i, d in enumerate(self.devices)]
        heapq.heapify(heap)
        while heap and not self.stopped:
            due, i = heapq.heappop(heap)
            if due >= duration:
                continue
            wait = start_monotonic + due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            device = self.devices[i]
            message = device.next()
            heapq.heappush(heap, (device.offset(device.seq), i))
            if message.value is None or message.event_time is None:
                continue  # a device sensor sends no malformed messages: never the case
            value = float(message.value[measured])
            at = message.event_time
            if self.points:  # every sample is read, at the time its registers hold
                value, at = self.server.stored(message.key, value), self.server.stored_time(message.key, at)
            elif self.last.get(message.key) == value:
                continue  # no change: the subscription sends nothing
            self.last[message.key] = value
            await self.server.write(message.key, value, at)
            self.sent.append(self.record(message.key, value, at, message.seq, device.index))


def _server(s: NodeStream) -> Any:
    """The simulated server of a device stream, not started."""
    if s.points:
        return PolledDevice(s.points, s.url, s.unit)
    from simulate.devices.opcua import OpcUaDevice  # needs spanedge[opcua]

    return OpcUaDevice(dict.fromkeys(s.nodes, 0.0), name=f"{s.site}-{s.stream}", ids=s.nodes, path="/")


@dataclass
class NodeSensors:
    """Every ``device: opcua`` stream of a run (see the module)."""

    streams: list[NodeStream] = field(default_factory=list)
    urls: dict[tuple[str, str], str] = field(default_factory=dict)

    @classmethod
    def of(cls, sites: Sites, sim: Simulation) -> NodeSensors:
        """The device streams of ``sim``'s sensors, checked against their sites' bindings.

        Raises:
            InvalidOption: a device sensor's stream is not an ``opcua://`` stream on this machine,
                or a sensor key has no node, or a node is outside the server's namespace.
        """
        found = cls()
        for site, streams in sim.sensors.items():
            for stream, spec in streams.items():
                if spec.device is None:
                    continue
                binding = sites.sites[site].streams[stream]
                where = f"simulation.sensors.{site}.{stream}"
                if spec.device == "modbus":
                    points = check_points(where, site, stream, spec, binding)
                    named = {k: p.where() for k, p in points.items()}
                    url = binding.url or ""
                    found.streams.append(NodeStream(site, stream, spec, named, points, url, unit_of(binding)))
                    continue
                if binding.connector != "opcua" or urlsplit(binding.url or "").hostname not in LOCAL_HOSTS:
                    msg = (
                        f"{where}: a device: opcua sensor needs its stream bound with url: opcua://localhost:4840/ "
                        f"and nodes: (site {site!r} binds {binding.url or binding.topic!r})"
                    )
                    raise InvalidOption(msg)
                nodes = binding.opcua_nodes
                keys = {spec.device_key(site, stream, i) for i in range(spec.count)}
                bad = sorted(keys - set(nodes)) or sorted(n for n, i in nodes.items() if f"ns={NAMESPACE};" not in i)
                if bad:
                    msg = (
                        f"{where}: every sensor key needs a node in ns={NAMESPACE} under the stream's nodes: "
                        f"(e.g. {bad[0]}: 'ns={NAMESPACE};s={bad[0]}'); missing or elsewhere: {', '.join(bad[:5])}"
                    )
                    raise InvalidOption(msg)
                found.streams.append(NodeStream(site, stream, spec, nodes))
        return found

    async def start(self, note: Callable[[str], None]) -> None:
        """Start a server per stream with every node at 0; count each node's first value as a record."""
        if not self.streams:
            return
        for s in self.streams:
            s.server = _server(s)
            await s.server.start()
            born = round(time.time(), 3)
            for seq, key in enumerate(s.nodes):
                zero = s.points[key].decode([0] * s.points[key].count) if s.points else 0.0
                await s.server.write(key, zero, born)
                s.last[key] = zero
                s.sent.append(s.record(key, zero, born, -1 - seq))
            self.urls[(s.site, s.stream)] = s.server.url
        note(
            "; ".join(
                f"{'Modbus' if s.points else 'OPC UA'} sensors of {s.stream} at {s.site}: "
                f"{len(s.nodes)} {'points' if s.points else 'nodes'} at {s.server.url}"
                for s in self.streams
            )
        )

    async def wait_subscribed(self, timeout: float, check: Callable[[], None]) -> None:
        """Wait until every server has a subscription (the agent reads its nodes).

        Raises:
            SimulationError: a server has none after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while any(s.server.subscriptions() == 0 for s in self.streams):
            check()
            if time.monotonic() > deadline:
                idle = [f"{s.stream} at {s.site}" for s in self.streams if s.server.subscriptions() == 0]
                msg = (
                    f"no agent subscribed to (or polled) the device sensors of {', '.join(idle)} within {timeout:.0f}s"
                )
                raise SimulationError(msg)
            await asyncio.sleep(0.25)

    def build(self, seed: int, start: float) -> None:
        """Make each stream's seeded sensors, their event times counted from ``start``."""
        for s in self.streams:
            s.devices = [Device(s.site, s.stream, i, s.spec, "", seed, start) for i in range(s.spec.count)]

    def sent(self) -> list[Sent]:
        """Every record the agents take from the servers, the nodes' first values included."""
        return [x for s in self.streams for x in s.sent]

    def stop(self, site: str) -> None:
        """Stop the sensors of ``site`` for good."""
        for s in self.streams:
            if s.site == site:
                s.stopped = True

    async def run(self, start_monotonic: float, duration: float) -> None:
        """Run every stream's sensors."""
        await asyncio.gather(*(s.run(start_monotonic, duration) for s in self.streams))

    async def close(self) -> None:
        """Stop the servers."""
        for s in self.streams:
            if s.server is not None:
                with contextlib.suppress(Exception):
                    await s.server.stop()
