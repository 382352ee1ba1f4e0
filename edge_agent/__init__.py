"""The SpanEdge edge agent: runs local operators at a spoke site.

Modules: :mod:`~edge_agent.transport` (MQTT behind a small interface, manual
acknowledgement, bounded inbox), :mod:`~edge_agent.runtime` and
:mod:`~edge_agent.windows` (operators, event time, windows, keyed state),
:mod:`~edge_agent.outbox` (the durable edge→hub queue and its drain),
:mod:`~edge_agent.checkpoint` (snapshots committed with the outbox),
:mod:`~edge_agent.heartbeat` and :mod:`~edge_agent.probes` (what the hub is
told), :mod:`~edge_agent.plans` (signed plan intake), :mod:`~edge_agent.agent`
(the asyncio process) and :mod:`~edge_agent.cli` (``spanedge agent``).
Nothing is imported at package import time.
"""
