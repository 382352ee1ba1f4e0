"""The Modbus devices a run's sites declare under ``devices:``, simulated, and their coils read back at the end.

Each distinct ``modbus://`` URL of a spoke's ``devices:`` whose host is this machine
(``localhost``, ``127.0.0.1``, ``::1``) gets one :class:`~simulate.devices.modbus.ModbusDevice`
on a free port, and every sites file the run writes names that port instead (as brokers are
rewritten). Spokes that name one URL share one device, as sites on one LAN share a controller.

At the end of a run each point of the app's ``sinks.modbus("device:NAME", ...)`` sinks is read
back and compared with the reference: a point must hold the value of the last command for it
that the reference knows is due (its event time at or before the cutoff), or of a later one
(windows after the cutoff may or may not have closed); a point no command is due for holds its
first value or one of the later commands. A point that holds anything else is a wrong result.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from simulate.checking import Reference
from simulate.config import Simulation
from simulate.devices.sensing import NodeSensors
from simulate.reference import Item
from simulate.report import SinkCheck
from spanedge.app import App
from spanedge.connectors.modbus import Point, Table
from spanedge.operators import Kind
from spanedge.sinks import ConnectorSinkSpec
from spanedge.sites import Sites

#: Host names that are this machine: devices there are simulated.
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
#: Coils and registers of each table on a simulated device at least (more if the app's points need them).
MIN_SIZE = 64
#: Seconds the read-back waits for the last writes to reach the devices.
READ_BACK_S = 30.0
#: The most points a device sink is checked on (a bound on the read-back, which reads them one by one).
MAX_POINTS = 10_000


@dataclass(frozen=True)
class DeviceSink:
    """A ``sinks.modbus("device:NAME", ...)`` sink of the app and the simulated device it writes to."""

    sink: str
    tier: str
    spec: ConnectorSinkSpec
    url: str


@dataclass
class Devices:
    """The simulated devices of a run (see the module): ``urls`` maps each declared URL to the device's."""

    sinks: list[DeviceSink] = field(default_factory=list)
    urls: dict[str, str] = field(default_factory=dict)
    devices: dict[str, Any] = field(default_factory=dict)
    unchecked: dict[str, str] = field(default_factory=dict)
    sensors: NodeSensors = field(default_factory=NodeSensors)
    """The sensors that are OPC UA devices (:mod:`simulate.devices.sensing`)."""
    _due: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, sites: Sites, app: App, sim: Simulation, loopback: bool = True) -> Devices:
        """Plan a device per local ``modbus://`` URL of the sites' ``devices:``, find the sinks writing to them.

        Also plans the OPC UA servers of ``sim``'s ``device: opcua`` sensors. Without ``loopback``
        (sites in network namespaces, which do not reach this machine's loopback) no Modbus device
        is simulated and the device sinks are left unchecked.
        """
        found = cls(sensors=NodeSensors.of(sites, sim))
        for site in sites.spokes if loopback else ():
            for binding in site.devices.values():
                if binding.connector == "modbus" and urlsplit(binding.url).hostname in LOCAL_HOSTS:
                    found.urls.setdefault(binding.url, "")
        for op in app.operators.values():
            spec = op.sink
            if op.kind is not Kind.SINK or not isinstance(spec, ConnectorSinkSpec) or spec.device is None:
                continue
            urls = {s.devices[spec.device].url for s in sites.with_device(spec.device)}
            if len(urls) != 1 or next(iter(urls)) not in found.urls:
                found.unchecked[op.name] = (
                    f"device {spec.device!r} is not one simulated Modbus device (the spokes name {len(urls)} "
                    "URL(s); only one modbus:// device on localhost is simulated, with --hosts loopback)"
                )
                continue
            found.sinks.append(DeviceSink(op.name, "local", spec, next(iter(urls))))
        return found

    def _size(self, url: str) -> int:
        addresses = [p.address + p.count for s in self.sinks if s.url == url for p in s.spec.points.values()]
        return max([MIN_SIZE, *addresses])

    async def start(self, topology: Any, note: Callable[[str], None]) -> None:
        """Start the devices, each on a free port of ``127.0.0.1``, and have ``topology``'s sites files name them."""
        await self.sensors.start(note)
        topology.stream_urls = self.sensors.urls
        if not self.urls:
            return
        from simulate.devices.modbus import ModbusDevice  # needs spanedge[modbus]

        for url in self.urls:
            parts = urlsplit(url)
            device = ModbusDevice(size=self._size(url))
            await device.start()
            self.devices[url] = device
            self.urls[url] = urlunsplit(parts._replace(netloc=f"127.0.0.1:{device.port}"))
        topology.device_urls = self.urls
        note("; ".join(f"Modbus device {url} simulated at {new}" for url, new in self.urls.items()))

    async def stop(self) -> None:
        """Stop every device."""
        await self.sensors.close()
        for device in self.devices.values():
            await device.stop()
        self.devices.clear()

    async def check(
        self, reference: Reference, note: Callable[[str], None], timeout: float = READ_BACK_S
    ) -> dict[str, SinkCheck]:
        """Read every point of the device sinks back and check it (waiting up to ``timeout`` s for late writes)."""
        checks: dict[str, SinkCheck] = {}
        for sink in self.sinks:
            allowed, self._due = predicted(sink.spec, reference.expected.sinks.get(sink.sink, []), reference.cutoff)
            deadline = time.monotonic() + timeout
            while True:
                held = await self._read(sink)
                wrong = {p: v for p, v in held.items() if not any(_same(v, a) for a in allowed[p])}
                if not wrong or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
            due = sum(1 for p in held if p in self._due)
            check = SinkCheck(sink.sink, sink.tier, received=len(held), expected=len(allowed), checked=due)
            check.open_at_end, check.wrong = len(held) - due, len(wrong)
            for point, value in list(wrong.items())[:3]:
                check.examples.append(
                    f"wrong: {point} holds {value!r}, the reference allows {sorted(map(repr, allowed[point]))}"
                )
            checks[sink.sink] = check
        for name, why in self.unchecked.items():
            checks[name] = SinkCheck(name, "local", unchecked=why)
        if self.sinks:
            note(f"devices read back: {sum(c.wrong for c in checks.values())} point(s) hold a wrong value")
        return checks

    async def _read(self, sink: DeviceSink) -> dict[str, Any]:
        device = self.devices[sink.url]
        out: dict[str, Any] = {}
        for name, point in list(sink.spec.points.items())[:MAX_POINTS]:
            if point.table is Table.COIL:
                raw: list[Any] = await device.coils(point.address, 1)
            else:
                raw = await device.holding(point.address, point.count)
            out[name] = point.decode(raw)
        return out


def initial(point: Point) -> Any:
    """What a point of a simulated device holds before any write."""
    return point.decode([0] * point.count)


def predicted(spec: ConnectorSinkSpec, items: Sequence[Item], cutoff: float) -> tuple[dict[str, list[Any]], set[str]]:
    """Per point of ``spec``, the values it may hold at the end given the reference's commands ``items``.

    Also returns the points a command is due for (their value is predicted from it on).
    """
    by_point: dict[str, list[Item]] = {}
    for item in sorted(items, key=lambda i: i.event_time):
        if isinstance(item.value, dict) and spec.key_field in item.value:
            by_point.setdefault(str(item.value[spec.key_field]), []).append(item)
    out: dict[str, list[Any]] = {}
    due_points: set[str] = set()
    for name, point in spec.points.items():
        commands = by_point.get(name, [])
        due = [i for i, item in enumerate(commands) if item.event_time <= cutoff]
        first = due[-1] if due else 0
        values = [item.value.get(spec.value_field) for item in commands[first:]]
        out[name] = values if due else [initial(point), *values]
        if due:
            due_points.add(name)
    return out, due_points


def _same(held: Any, want: Any) -> bool:
    if isinstance(held, bool) or isinstance(want, bool):
        return bool(held) == bool(want)
    try:
        return abs(float(held) - float(want)) <= 1e-3 * max(1.0, abs(float(want)))
    except (TypeError, ValueError):
        return bool(held == want)
