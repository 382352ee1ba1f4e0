"""The Modbus TCP connector (pymodbus, ``spanedge[modbus]``): a polling source and a write sink.

The source polls a device's points every ``interval`` seconds (the stream's, so each device has
its own) and scales each value (:class:`spanedge.connectors.modbus.Point`); a poll's time is the
event time of its values, Modbus having no timestamps. A point the device refuses (an exception
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
from spanedge.connectors.modbus import Point, Table
from spanedge.sinks import ConnectorSinkSpec
from spanedge.sites import StreamBinding

#: Seconds to wait for the device to answer a request.
TIMEOUT_S = 3.0


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


async def _read(client: AsyncModbusTcpClient, point: Point, unit: int) -> Any:
    call = {
        Table.HOLDING: client.read_holding_registers,
        Table.INPUT: client.read_input_registers,
        Table.COIL: client.read_coils,
        Table.DISCRETE: client.read_discrete_inputs,
    }[point.table]
    return await call(point.address, count=point.count, device_id=unit)


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

    async def session(self) -> AsyncIterator[list[Reading]]:
        """Connect and yield one batch per poll until the device stops answering."""
        client = _client(self.url)
        try:
            await _connect(client, self.name)
            interval = self.binding.interval
            next_poll = time.monotonic()
            while True:
                stamp = time.time()
                yield [await self._reading(client, name, point, stamp) for name, point in self.points.items()]
                next_poll += interval
                wait = next_poll - time.monotonic()
                if wait < 0:  # the device is slower than the interval: poll again at once, from now
                    next_poll, wait = time.monotonic(), 0
                await asyncio.sleep(wait)
        finally:
            client.close()

    async def _reading(self, client: AsyncModbusTcpClient, name: str, point: Point, stamp: float) -> Reading:
        where = f"{self.name} unit {self.unit} {point.where()}"
        try:
            response = await _read(client, point, self.unit)
        except (ConnectionException, ModbusIOException):
            raise
        if response.isError():
            return Reading(name, None, stamp, where, f"{where}: the device refused the read ({response})")
        raw = response.bits if point.table in (Table.COIL, Table.DISCRETE) else response.registers
        try:
            return Reading(name, point.decode(list(raw)), stamp, where)
        except (ValueError, IndexError) as exc:
            return Reading(name, None, stamp, where, f"{where}: {exc}")

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
