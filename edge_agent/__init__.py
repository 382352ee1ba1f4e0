"""The SpanEdge edge agent: runs local operators at a spoke site.

Modules: :mod:`~edge_agent.config` (the settings, each defined once, and what
``spanedge agent`` starts from), :mod:`~edge_agent.mqtt` (the MQTT clients:
the interface, the bounded inbox, paho-mqtt and the agent's own asyncio
client, and the ``--transport`` choice), :mod:`~edge_agent.intake` (site-broker connections,
routing to pipeline sources, redelivery dedupe), :mod:`~edge_agent.apps` (one
pipeline per app, from plans), :mod:`~edge_agent.processing` (commit, then
acknowledge and serve sinks), :mod:`~edge_agent.checkpoint` (snapshots
committed with the outbox), :mod:`~edge_agent.outbox` (the durable edge→hub
queue and its drain), :mod:`~edge_agent.sinks` (local sink kinds, dead
letters, late records), :mod:`~edge_agent.telemetry`,
:mod:`~edge_agent.heartbeat` and :mod:`~edge_agent.probes` (what the hub is
told), :mod:`~edge_agent.plans` (signed plan intake and the saved plan),
:mod:`~edge_agent.recovery` (the spool and the parts recomputed from it), :mod:`~edge_agent.agent`
(the asyncio process composing them) and :mod:`~edge_agent.main` (what the
``spanedge agent`` command runs). The pure dataflow runtime is
:mod:`spanedge.runtime`. Nothing is imported at package import time.
"""
