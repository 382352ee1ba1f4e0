"""Edge connectors: the sources and sinks of the agent, MQTT's included, behind one small API.

:mod:`~edge_agent.connectors.api` defines what a connector is (:class:`Source`, :class:`Sink`,
:class:`Publisher`, :class:`Reading`) and registers sources and sinks by URL scheme;
:mod:`~edge_agent.connectors.runner` runs a source into the agent's intake (reconnects with
backoff, back-pressure, acknowledgement after the commit); :mod:`~edge_agent.connectors.actuators`
writes sink values durably, at least once. :mod:`~edge_agent.connectors.mqtt` is the built-in MQTT
sink, a :class:`Publisher`. The built-in OPC UA (:mod:`~edge_agent.connectors.opcua`) and Modbus
(:mod:`~edge_agent.connectors.modbus`) connectors need the extras ``spanedge[opcua]`` and
``spanedge[modbus]``.
"""

from edge_agent.connectors.api import Publisher, Reading, Sink, Source, register_sink, register_source

__all__ = ["Publisher", "Reading", "Sink", "Source", "register_sink", "register_source"]
