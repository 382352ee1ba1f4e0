"""The connectors' state as Prometheus metric families, beside the agent's (``--metrics-port``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from edge_agent.connectors.runner import SourceRunner

if TYPE_CHECKING:
    from edge_agent.connectors.actuators import Actuators
    from spanedge.metrics import Exposition


def add_connector_metrics(
    out: Exposition, site: str, sources: Iterable[SourceRunner], actuators: Actuators | None
) -> None:
    """Add each connector source's and sink's reachability, failures and counts to ``out``."""
    for runner in sources:
        labels = {"site": site, "stream": runner.stream, "server": runner.source.name}
        out.add("spanedge_connector_up", runner.connected, labels, help="1 while the source's server answers")
        out.add("spanedge_connector_failed_attempts", runner.failures, labels, help="failed sessions in a row")
        out.add("spanedge_connector_read_records_total", runner.read, labels)
    if actuators is None:
        return
    for sink, up in actuators.up.items():
        labels = {"site": site, "sink": sink}
        out.add("spanedge_connector_sink_up", up, labels, help="1 while the sink's device takes writes")
        out.add("spanedge_connector_sink_pending_values", actuators.pending(sink), labels)
    out.add("spanedge_connector_sink_written_values_total", actuators.written, {"site": site})
    out.add("spanedge_connector_sink_refused_values_total", actuators.refused, {"site": site})
    out.add("spanedge_connector_sink_dropped_values_total", actuators.dropped, {"site": site})
