"""A simulated OPC UA device (asyncua's server): one object with named double variables."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from asyncua import ua
from asyncua.server.server import Server

from simulate.ports import free_port


class OpcUaDevice:
    """An asyncua server on ``127.0.0.1`` with an object ``name`` holding one double variable per entry of ``values``.

    Args:
        values: the variables' names and first values.
        name: the object's browse name.
        port: the port (a free one if ``None``).
        ids: node ids (``ns=2;s=e00``) for some variables, in the device's namespace (index 2);
            the others get numeric ids.
        path: the endpoint's path.
    """

    def __init__(
        self,
        values: Mapping[str, float],
        name: str = "Device",
        port: int | None = None,
        ids: Mapping[str, str] | None = None,
        path: str = "/spanedge/sim/",
    ) -> None:
        self.port = port or free_port()
        self.initial = dict(values)
        self.ids = dict(ids or {})
        self.path = path
        self.name = name
        self.url = f"opcua://127.0.0.1:{self.port}{path}"
        self.server: Server | None = None
        self.nodes: dict[str, Any] = {}

    async def start(self) -> None:
        """Build the address space and listen (this takes a second or two)."""
        server = Server()
        await server.init()
        server.set_endpoint(f"opc.tcp://127.0.0.1:{self.port}{self.path}")
        server.set_security_policy([ua.SecurityPolicyType.NoSecurity])
        idx = await server.register_namespace("urn:spanedge:sim")
        device = await server.nodes.objects.add_object(idx, self.name)
        for var, value in self.initial.items():
            where: Any = self.ids.get(var, idx)
            name = var if isinstance(where, int) else f"{idx}:{var}"
            self.nodes[var] = await device.add_variable(where, name, float(value), ua.VariantType.Double)
        await server.start()
        self.server = server

    def node_ids(self) -> dict[str, str]:
        """The variables' node ids by name, as a stream's ``nodes:`` takes them."""
        return {var: str(node.nodeid.to_string()) for var, node in self.nodes.items()}

    async def write(self, var: str, value: float, at: float) -> None:
        """Set a variable, with ``at`` (seconds since the epoch) as its SourceTimestamp."""
        stamp: Any = datetime.datetime.fromtimestamp(at, datetime.UTC)  # asyncua's DateTime is a datetime
        variant = ua.Variant(float(value), ua.VariantType.Double)
        await self.nodes[var].write_value(ua.DataValue(variant, SourceTimestamp=stamp))

    def subscriptions(self) -> int:
        """The clients' subscriptions open on the server now."""
        if self.server is None:
            return 0
        return len(self.server.iserver.subscription_service.subscriptions)

    async def stop(self) -> None:
        """Close the port and every session."""
        if self.server is not None:
            await self.server.stop()
            self.server = None
