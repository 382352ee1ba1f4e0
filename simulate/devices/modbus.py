"""A simulated Modbus TCP device (pymodbus): coils, discrete inputs, holding and input registers of one unit."""

from __future__ import annotations

from pymodbus.pdu import ModbusPDU
from pymodbus.server import ModbusTcpServer
from pymodbus.simulator import DataType, SimData, SimDevice

from simulate.ports import free_port

#: The function codes pymodbus' datastore is addressed with, per table.
_COILS, _DISCRETE, _HOLDING, _INPUT = 1, 2, 3, 4


class ModbusDevice:
    """A pymodbus TCP server on ``127.0.0.1`` with ``size`` of each table (all zero/off at the start).

    Args:
        port: the port (a free one if ``None``).
        unit: the device id it answers.
        size: the number of coils, discrete inputs, holding and input registers.
    """

    def __init__(self, port: int | None = None, unit: int = 1, size: int = 64) -> None:
        self.port = port or free_port()
        self.unit = unit
        self.size = size
        self.url = f"modbus://127.0.0.1:{self.port}"
        self.server: ModbusTcpServer | None = None
        self.answered = 0
        """Responses the device sent (reads and writes), since it was made."""

    def _trace(self, sending: bool, pdu: ModbusPDU) -> ModbusPDU:
        self.answered += sending
        return pdu

    async def start(self) -> None:
        """Listen (in the background of the running event loop)."""
        bits = [False] * self.size
        words = [0] * self.size
        device = SimDevice(
            self.unit,
            simdata=(
                [SimData(0, values=list(bits), datatype=DataType.BITS)],
                [SimData(0, values=list(bits), datatype=DataType.BITS)],
                [SimData(0, values=list(words), datatype=DataType.REGISTERS)],
                [SimData(0, values=list(words), datatype=DataType.REGISTERS)],
            ),
        )
        self.server = ModbusTcpServer(device, address=("127.0.0.1", self.port), trace_pdu=self._trace)
        await self.server.serve_forever(background=True)

    def _server(self) -> ModbusTcpServer:
        if self.server is None:
            msg = "the Modbus device is not started"
            raise RuntimeError(msg)
        return self.server

    async def set_holding(self, address: int, words: list[int]) -> None:
        """Set holding registers from ``address`` on."""
        await self._server().async_setValues(self.unit, _HOLDING, address, words)

    async def set_input(self, address: int, words: list[int]) -> None:
        """Set input registers from ``address`` on."""
        await self._server().async_setValues(self.unit, _INPUT, address, words)

    async def coils(self, address: int, count: int = 1) -> list[bool]:
        """The coils from ``address`` on, as a client wrote them."""
        return [bool(b) for b in await self._server().async_getValues(self.unit, _COILS, address, count)]

    async def holding(self, address: int, count: int = 1) -> list[int]:
        """The holding registers from ``address`` on, as a client wrote them."""
        return [int(w) for w in await self._server().async_getValues(self.unit, _HOLDING, address, count)]

    async def stop(self) -> None:
        """Close the port."""
        if self.server is not None:
            await self.server.shutdown()  # type: ignore[no-untyped-call]
            self.server = None
