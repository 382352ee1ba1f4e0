"""Real OPC UA and Modbus TCP servers for the connector tests, on free ports, started and stopped by the tests."""

from __future__ import annotations

import datetime
import socket
from typing import Any

from asyncua import Server, ua

from simulate.devices.modbus import ModbusDevice as SimulatedModbusDevice

UNIT = 1


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class OpcUaDevice:
    """An asyncua server with one object ``Boiler`` and its variables ``Temp`` (a double), ``Setpoint`` and ``Odd``.

    :meth:`stop` closes its port and every session; :meth:`start` opens it again, on the same port
    with the same nodes and values (the address space is built once: that takes seconds).
    """

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"opcua://127.0.0.1:{self.port}/spanedge/test/"
        self.server: Server | None = None
        self.running = False
        self.temp: Any = None
        self.setpoint: Any = None
        self.odd: Any = None

    async def start(self, temp: float = 0.0) -> None:
        if self.server is not None:
            await self.restart()
            return
        server = Server()
        await server.init()
        server.set_endpoint(f"opc.tcp://127.0.0.1:{self.port}/spanedge/test/")
        server.set_security_policy([ua.SecurityPolicyType.NoSecurity])
        idx = await server.register_namespace("urn:spanedge:test")
        boiler = await server.nodes.objects.add_object(idx, "Boiler")
        self.temp = await boiler.add_variable(idx, "Temp", temp, ua.VariantType.Double)
        self.setpoint = await boiler.add_variable(idx, "Setpoint", 0.0, ua.VariantType.Double)
        self.odd = await boiler.add_variable(idx, "Odd", [1.0, 2.0], ua.VariantType.Double)  # an array: no record value
        await self.setpoint.set_writable()
        await server.start()
        self.server = server
        self.running = True

    @property
    def temp_id(self) -> str:
        return str(self.temp.nodeid.to_string())

    @property
    def setpoint_id(self) -> str:
        return str(self.setpoint.nodeid.to_string())

    @property
    def odd_id(self) -> str:
        return str(self.odd.nodeid.to_string())

    async def write(self, node: Any, value: float, at: float) -> None:
        """Set a variable with ``at`` (seconds since the epoch) as its SourceTimestamp."""
        stamp = datetime.datetime.fromtimestamp(at, datetime.UTC)
        await node.write_value(ua.DataValue(ua.Variant(value, ua.VariantType.Double), SourceTimestamp=stamp))

    async def stop(self) -> None:
        if self.server is not None and self.running:
            await self.server.stop()
            self.running = False

    async def restart(self) -> None:
        assert self.server is not None
        await self.server.start()
        self.running = True


class ModbusDevice(SimulatedModbusDevice):
    """A pymodbus TCP server with 32 coils, discrete inputs, holding and input registers (unit 1)."""

    def __init__(self, port: int | None = None) -> None:
        super().__init__(port or free_port(), UNIT, size=32)
