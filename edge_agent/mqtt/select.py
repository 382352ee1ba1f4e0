"""The MQTT clients the agent can run on, by the name ``--transport`` gives."""

from __future__ import annotations

from edge_agent.mqtt.paho_transport import PahoTransport
from edge_agent.mqtt.transport import TransportFactory

#: The accepted values of ``--transport``: the agent's own asyncio client (the default) or paho-mqtt.
TRANSPORTS = ("asyncio", "paho")


def transport_factory(name: str) -> TransportFactory:
    """The :class:`~edge_agent.mqtt.transport.TransportFactory` of a name in :data:`TRANSPORTS`.

    Raises:
        ValueError: ``name`` is not one of :data:`TRANSPORTS`.
    """
    if name == "paho":
        return PahoTransport
    if name == "asyncio":
        from edge_agent.mqtt.asyncio_transport import AsyncioTransport

        return AsyncioTransport
    msg = f"unknown MQTT transport {name!r}; use one of {', '.join(TRANSPORTS)}"
    raise ValueError(msg)
