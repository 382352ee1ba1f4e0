"""Edge connectors: sources and sinks other than MQTT, behind one small API.

:mod:`~edge_agent.connectors.api` defines what a connector is (:class:`Source`, :class:`Sink`,
:class:`Reading`) and registers them by URL scheme; :mod:`~edge_agent.connectors.runner` runs a
source into the agent's intake (reconnects with backoff, back-pressure, acknowledgement after
the commit); :mod:`~edge_agent.connectors.actuators` writes sink values durably, at least once.
The built-in OPC UA (:mod:`~edge_agent.connectors.opcua`) and Modbus
(:mod:`~edge_agent.connectors.modbus`) connectors need the extras ``spanedge[opcua]`` and
``spanedge[modbus]``.
"""

from edge_agent.connectors.api import Reading, Sink, Source, register_sink, register_source

__all__ = ["Reading", "Sink", "Source", "register_sink", "register_source"]
