"""The Modbus TCP connector (pymodbus, ``spanedge[modbus]``): a polling source and a write sink.

The source polls a device's points every ``interval`` seconds (the stream's, so each device has
its own), adjacent points of a table in one request, and scales each value (:class:`spanedge.connectors.modbus.Point`); a poll's time is the
event time of its values, Modbus having no timestamps. A point with a ``time:`` (its device's
sample time registers) is read with them, in one request when both sit in one table within
:data:`MAX_REGISTERS`: its records take the device's time, a sample is emitted once (a poll that
finds the time of the last one emits nothing), and a time that is unreadable or implausible
(before :data:`~spanedge.connectors.modbus.EARLIEST_TIME`, or more than :data:`MAX_AHEAD_S`
ahead of the gateway's clock) is dead-lettered once with its registers. A point the device refuses (an exception
response) or a value that is not a finite number is dead-lettered with its register; a lost
connection ends the session and the next one connects again. The sink writes coils and holding
registers: an absolute write, harmless when repeated.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pymodbus.client import AsyncModbusTcpClient
from pymodbus.exceptions import ConnectionException, ModbusIOException

from edge_agent.connectors.api import Reading, register_sink, register_source
from spanedge.connectors.modbus import EARLIEST_TIME, Point, SampleTime, Table, Type
from spanedge.sinks import ConnectorSinkSpec
from spanedge.sites import StreamBinding

#: Seconds to wait for the device to answer a request.
TIMEOUT_S = 3.0
#: The most registers, and bits, one read request takes (the Modbus limits).
MAX_REGISTERS = 125
MAX_BITS = 2000
#: How far (seconds) a device's sample time may be ahead of the gateway's clock.
MAX_AHEAD_S = 86400.0
_WIDE = {Table.HOLDING: Type.UINT16, Table.INPUT: Type.UINT16, Table.COIL: Type.BOOL, Table.DISCRETE: Type.BOOL}


def _client(url: str) -> AsyncModbusTcpClient:
    parts = urlsplit(url)
    return AsyncModbusTcpClient(
        parts.hostname or "localhost", port=parts.port or 502, timeout=TIMEOUT_S, retries=1, reconnect_delay=0
    )


async def _connect(client: AsyncModbusTcpClient, name: str) -> None:
    if not await client.connect():
        msg = f"cannot connect to {name}"
        raise ConnectionError(msg)


def url_unit(url: str, default: int = 1) -> int:
    """The device id in a ``modbus://host:502?unit=3`` URL, or ``default``."""
    values = parse_qs(urlsplit(url).query).get("unit")
    return int(values[0]) if values and values[0].isdigit() else default


async def _read(client: AsyncModbusTcpClient, point: Point, unit: int, count: int | None = None) -> Any:
    call = {
        Table.HOLDING: client.read_holding_registers,
        Table.INPUT: client.read_input_registers,
        Table.COIL: client.read_coils,
        Table.DISCRETE: client.read_discrete_inputs,
    }[point.table]
    return await call(point.address, count=count or point.count, device_id=unit)


def groups(points: dict[str, Point]) -> list[list[tuple[str, Point]]]:
    """The points in runs of adjacent addresses of one table, each run read in one request.

    A run holds at most :data:`MAX_REGISTERS` registers or :data:`MAX_BITS` bits (the protocol's
    limits); points that overlap or leave a gap start a new run.
    """
    out: list[list[tuple[str, Point]]] = []
    end = -1
    for name, point in sorted(points.items(), key=lambda item: (item[1].table.value, item[1].address, item[0])):
        run = out[-1] if out else None
        limit = MAX_BITS if point.table in (Table.COIL, Table.DISCRETE) else MAX_REGISTERS
        if (
            run is None
            or run[0][1].table != point.table
            or point.address != end
            or end + point.count - run[0][1].address > limit
        ):
            out.append([(name, point)])
        else:
            run.append((name, point))
        end = point.address + point.count
    return out


class ModbusSource:
    """Polls a device's points (see the module)."""

    def __init__(self, binding: StreamBinding, stream: str) -> None:
        assert binding.url is not None
        parts = urlsplit(binding.url)
        self.binding = binding
        self.url = binding.url
        self.name = f"modbus://{parts.netloc}"
        self.unit = url_unit(binding.url, binding.unit)
        self.points = binding.points
        self.groups = groups({n: p for n, p in binding.points.items() if p.time is None})
        self.timed = {n: p for n, p in binding.points.items() if p.time is not None}
        self.last_time: dict[str, list[int]] = {}
        """Per timed point, the raw time registers of the last sample read (emitted or dead-lettered)."""

    async def session(self) -> AsyncIterator[list[Reading]]:
        """Connect and yield one batch per poll until the device stops answering."""
        client = _client(self.url)
        try:
            await _connect(client, self.name)
            interval = self.binding.interval
            next_poll = time.monotonic()
            while True:
                stamp = time.time()
                batch: list[Reading] = []
                for group in self.groups:
                    batch += await self._group(client, group, stamp)
                for name, point in self.timed.items():
                    reading = await self._sample(client, name, point, stamp)
                    if reading is not None:
                        batch.append(reading)
                yield batch
                next_poll += interval
                wait = next_poll - time.monotonic()
                if wait < 0:  # the device is slower than the interval: poll again at once, from now
                    next_poll, wait = time.monotonic(), 0
                await asyncio.sleep(wait)
        finally:
            client.close()

    async def _group(self, client: AsyncModbusTcpClient, group: list[tuple[str, Point]], stamp: float) -> list[Reading]:
        """The readings of adjacent points, read in one request (point by point if the device refuses it)."""
        if len(group) == 1:
            return [await self._reading(client, *group[0], stamp)]
        first = group[0][1]
        count = sum(point.count for _, point in group)
        response = await _read(
            client, Point(table=first.table, address=first.address, type=_WIDE[first.table]), self.unit, count
        )
        if response.isError():
            return [await self._reading(client, name, point, stamp) for name, point in group]
        raw = list(response.bits if first.table in (Table.COIL, Table.DISCRETE) else response.registers)
        out = []
        for name, point in group:
            offset = point.address - first.address
            out.append(self._decoded(name, point, raw[offset : offset + point.count], stamp))
        return out

    def _decoded(self, name: str, point: Point, raw: list[Any], stamp: float) -> Reading:
        where = f"{self.name} unit {self.unit} {point.where()}"
        try:
            return Reading(name, point.decode(raw), stamp, where)
        except (ValueError, IndexError) as exc:
            return Reading(name, None, stamp, where, f"{where}: {exc}")

    async def _reading(self, client: AsyncModbusTcpClient, name: str, point: Point, stamp: float) -> Reading:
        where = f"{self.name} unit {self.unit} {point.where()}"
        try:
            response = await _read(client, point, self.unit)
        except (ConnectionException, ModbusIOException):
            raise
        if response.isError():
            return Reading(name, None, stamp, where, f"{where}: the device refused the read ({response})")
        raw = response.bits if point.table in (Table.COIL, Table.DISCRETE) else response.registers
        return self._decoded(name, point, list(raw), stamp)

    async def _raw(self, client: AsyncModbusTcpClient, table: Table, address: int, count: int) -> Any:
        """The registers (or bits) ``address..address+count-1`` of ``table``, or the error response."""
        response = await _read(client, Point(table=table, address=address, type=_WIDE[table]), self.unit, count)
        if response.isError():
            return response
        return list(response.bits if table in (Table.COIL, Table.DISCRETE) else response.registers)[:count]

    async def _sample(self, client: AsyncModbusTcpClient, name: str, point: Point, now: float) -> Reading | None:
        """A timed point's reading at its device's time; ``None`` if its sample was read before."""
        at = point.time
        assert at is not None
        where = f"{self.name} unit {self.unit} {point.where()}"
        low, high = min(point.address, at.address), max(point.address + point.count, at.address + at.count)
        if at.table is point.table and high - low <= MAX_REGISTERS:  # value and time of one sample, one request
            raw = await self._raw(client, point.table, low, high - low)
            if not isinstance(raw, list):
                return Reading(
                    name,
                    None,
                    now,
                    where,
                    f"{where}: the device refused the read of it and its time, {at.where()} ({raw})",
                )
            value = raw[point.address - low : point.address - low + point.count]
            words = raw[at.address - low : at.address - low + at.count]
        else:
            value = await self._raw(client, point.table, point.address, point.count)
            words = await self._raw(client, at.table, at.address, at.count)
            for got, what in ((value, point.where()), (words, at.where())):
                if not isinstance(got, list):
                    return Reading(name, None, now, where, f"{where}: the device refused the read of {what} ({got})")
        if self.last_time.get(name) == words:
            return None
        self.last_time[name] = words
        return self._timed(name, point, at, value, words, now)

    def _timed(
        self, name: str, point: Point, at: SampleTime, value: list[Any], words: list[int], now: float
    ) -> Reading:
        """The reading of a new sample, or its dead letter if its time is implausible."""
        where = f"{self.name} unit {self.unit} {at.where()}"
        try:
            stamp = at.decode(words)
        except ValueError as exc:
            return Reading(name, None, now, where, f"{where} (the time of {point.where()}): {exc}")
        if not EARLIEST_TIME <= stamp <= now + MAX_AHEAD_S:
            problem = (
                f"{where} (the time of {point.where()}) holds {stamp:.3f} ({at.unit.value} since the epoch: "
                f"{words}), not a plausible time: it must lie between 2000-01-01 and a day after this gateway's clock"
            )
            return Reading(name, None, now, where, problem)
        return self._decoded(name, point, value, stamp)

    def acknowledge(self, tokens: list[Any]) -> None:
        """Nothing to do: a device keeps no queue to acknowledge."""


class ModbusSink:
    """Writes coils and holding registers: ``sinks.modbus(url, points={...})``."""

    def __init__(self, spec: ConnectorSinkSpec) -> None:
        self.spec = spec
        self.name = f"modbus://{urlsplit(spec.target).netloc}"
        self.unit = url_unit(spec.target, int(spec.options.get("unit", 1)))
        self.points = {name: Point(**p) if isinstance(p, dict) else p for name, p in spec.points.items()}
        self._client: AsyncModbusTcpClient | None = None

    async def connect(self) -> None:
        """Connect to the device."""
        client = _client(self.spec.target)
        await _connect(client, self.name)
        self._client = client

    async def write(self, key: str, value: Any) -> None:
        """Write ``value`` (scaled back to raw) to the point named ``key``."""
        assert self._client is not None
        point = self.points.get(key)
        if point is None:
            msg = f"no point named {key!r} in the sink's points ({', '.join(self.points)})"
            raise ValueError(msg)
        raw = point.encode(value)
        if isinstance(raw, bool):
            response = await self._client.write_coil(point.address, raw, device_id=self.unit)
        elif len(raw) == 1:
            response = await self._client.write_register(point.address, raw[0], device_id=self.unit)
        else:
            response = await self._client.write_registers(point.address, raw, device_id=self.unit)
        if response.isError():
            msg = f"{self.name} unit {self.unit} {point.where()}: the device refused the write ({response})"
            raise ValueError(msg)

    async def close(self) -> None:
        """Disconnect."""
        if self._client is not None:
            self._client.close()
            self._client = None


register_source("modbus", ModbusSource)
register_sink("modbus", ModbusSink)
