"""The agent's MQTT clients.

Modules: :mod:`~edge_agent.mqtt.transport` (the interface the agent uses, the
received message, the bounded inbox it goes to and what both clients share),
:mod:`~edge_agent.mqtt.paho_transport` (paho-mqtt, built by
:mod:`spanedge.mqtt`), :mod:`~edge_agent.mqtt.asyncio_transport` (the agent's
own asyncio MQTT 3.1.1 client, with its packets in :mod:`~edge_agent.mqtt.codec`
and its QoS 1 window in :mod:`~edge_agent.mqtt.inflight`) and
:mod:`~edge_agent.mqtt.select` (the client ``--transport`` names). Nothing is
imported at package import time.
"""
