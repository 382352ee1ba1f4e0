"""Sensors that are Modbus points: a simulated device per stream whose value and time registers the simulator sets.

A sensor spec with ``device: modbus`` feeds a stream that ``sites.yaml`` binds with
``url: modbus://localhost:...`` and ``points:`` naming one point per sensor key, each with a
``time:`` in milliseconds (``count: 4, unit: ms``) in the point's own table, within one read
request of it. The simulator serves those points from a
:class:`~simulate.devices.modbus.ModbusDevice` on a free port (the sites files it writes name
that port) and, at each sample's event time, sets the point's value and its time registers at
once. The agent emits one record per sample it reads, so the reference counts one record per
sample written, also when its value equals the previous one (its time differs). Each point holds
its zero value from the device's start, with that time: the first record of each point.

A poll reads only the latest sample of a point, so a sensor's rate may not exceed one sample per
poll interval of its stream (refused otherwise).
"""

from __future__ import annotations

import contextlib
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from simulate.config import SensorSpec
from simulate.errors import InvalidOption, SimulationError
from spanedge.connectors.modbus import Point, SampleTime, Table, TimeUnit
from spanedge.sites import StreamBinding

#: Host names that are this machine: Modbus devices there are simulated.
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
#: The most registers one read request takes (a point and its time must fit one).
MAX_REGISTERS = 125


def check_points(where: str, site: str, stream: str, spec: SensorSpec, binding: StreamBinding) -> dict[str, Point]:
    """The points of a ``device: modbus`` sensor spec, checked against its stream's binding.

    Raises:
        InvalidOption: the stream is not a ``modbus://`` stream on this machine, a key has no
            point, a point has no millisecond ``time:`` read with it, or the sensors sample
            faster than the stream polls.
    """
    if binding.connector != "modbus" or urlsplit(binding.url or "").hostname not in LOCAL_HOSTS:
        msg = (
            f"{where}: a device: modbus sensor needs its stream bound with url: modbus://localhost:502 and "
            f"points: (site {site!r} binds {binding.url or binding.topic!r})"
        )
        raise InvalidOption(msg)
    if spec.key_count != spec.count:
        msg = f"{where}: each device: modbus sensor is one point: leave keys: out (got {spec.keys} for {spec.count})"
        raise InvalidOption(msg)
    fastest = max(spec.rate) if isinstance(spec.rate, tuple) else spec.rate
    if fastest * binding.interval > 1:
        msg = (
            f"{where}: the sensors sample {fastest:g} times a second but the stream polls every "
            f"{binding.interval:g}s, so polls would miss samples; give rate: at most {1 / binding.interval:g} "
            "(one sample per poll interval) or a shorter interval: in sites.yaml"
        )
        raise InvalidOption(msg)
    keys = [spec.device_key(site, stream, i) for i in range(spec.count)]
    points: dict[str, Point] = {}
    for key in keys:
        point = binding.points.get(key)
        if point is None:
            msg = f"{where}: every sensor key needs a point under the stream's points: (missing: {key})"
            raise InvalidOption(msg)
        problem = _problem(point)
        if problem:
            msg = f"{where}: point {key!r} {problem}"
            raise InvalidOption(msg)
        points[key] = point
    return points


def unit_of(binding: StreamBinding) -> int:
    """The device id a ``modbus://`` stream polls: its URL's ``?unit=``, else its ``unit:``."""
    values = parse_qs(urlsplit(binding.url or "").query).get("unit")
    return int(values[0]) if values and values[0].isdigit() else binding.unit


def _problem(point: Point) -> str:
    at = point.time
    if point.table not in (Table.HOLDING, Table.INPUT):
        return f"is a {point.where()}; a sensor's value sits in holding or input registers"
    if at is None or at.unit is not TimeUnit.MS or at.count != 4:
        return "needs time: {address: N, count: 4, unit: ms} (the sample's time in milliseconds)"
    low, high = min(point.address, at.address), max(point.address + point.count, at.address + at.count)
    if at.table is not point.table or high - low > MAX_REGISTERS:
        return f"needs its time in its own table within {MAX_REGISTERS} registers of it, so one request reads both"
    return ""


class PolledDevice:
    """A simulated Modbus device holding a stream's points, set a sample (value and time) at a time.

    It serves :class:`~simulate.devices.sensing.NodeStream` as an OPC UA server does: ``write``,
    ``subscriptions`` and ``stop``, plus ``stored``, the value the agent reads back of a sample.
    """

    def __init__(self, points: dict[str, Point], url: str, unit: int) -> None:
        self.points = points
        self.unit = unit
        self.declared = url
        self.url = url
        self.device: Any = None

    async def start(self) -> None:
        """Listen on a free port of ``127.0.0.1`` (:attr:`url` then names it)."""
        from simulate.devices.modbus import ModbusDevice  # needs spanedge[modbus]

        ends = [end for p in self.points.values() for end in (p.address + p.count, _time(p).address + 4)]
        self.device = ModbusDevice(unit=self.unit, size=max(ends) + 1)
        await self.device.start()
        parts = urlsplit(self.declared)
        self.url = urlunsplit(parts._replace(netloc=f"127.0.0.1:{self.device.port}"))

    def stored(self, key: str, value: float) -> float | bool:
        """The value the agent reads of ``value`` written to ``key``'s point (scaled, rounded to its type)."""
        point = self.points[key]
        return point.decode(self._raw(key, value))

    def stored_time(self, key: str, at: float) -> float:
        """The sample time the agent reads of ``at`` written to ``key``'s time registers (whole milliseconds)."""
        time = _time(self.points[key])
        return time.decode(time.encode(at))

    def _raw(self, key: str, value: float) -> list[int]:
        point = self.points[key]
        try:
            raw = point.encode(value)
        except ValueError as exc:
            msg = f"the simulated sensor {key!r} made {value!r}, which its point does not hold: {exc}"
            raise SimulationError(msg) from None
        assert isinstance(raw, list)
        return raw

    async def write(self, key: str, value: float, at: float) -> None:
        """Set ``key``'s point to ``value`` and its time registers to ``at``, in one step no read comes between."""
        point, time = self.points[key], _time(self.points[key])
        raw, words = self._raw(key, value), time.encode(at)
        code = 3 if point.table is Table.HOLDING else 4
        server = self.device.server
        low = min(point.address, time.address)
        block = list(
            await server.async_getValues(self.unit, code, low, max(point.address + point.count, time.address + 4) - low)
        )
        block[point.address - low : point.address - low + point.count] = raw
        block[time.address - low : time.address - low + time.count] = words
        await server.async_setValues(self.unit, code, low, block)

    def subscriptions(self) -> int:
        """1 once the agent has read every point (the first samples) at least once, else 0."""
        return int(self.device is not None and self.device.answered >= len(self.points))

    async def stop(self) -> None:
        """Close the port."""
        if self.device is not None:
            with contextlib.suppress(Exception):
                await self.device.stop()
            self.device = None


def _time(point: Point) -> SampleTime:
    assert point.time is not None
    return point.time
