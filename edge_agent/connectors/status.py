"""The connectors' state: Prometheus metric families beside the agent's (``--metrics-port``), and the heartbeat's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

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


#: The most characters of a failure the heartbeat carries.
MAX_ERROR_CHARS = 300
#: The most connectors the heartbeat reports (the first ones by name).
MAX_REPORTED = 200


def connector_states(
    site: str, sources: Iterable[SourceRunner], actuators: Actuators | None
) -> dict[str, dict[str, Any]]:
    """The heartbeat's ``connectors``: each source's and sink's server, reachability, failures and last error."""
    out: dict[str, dict[str, Any]] = {}
    for runner in sources:
        name = runner.stream if runner.site == site else f"{runner.stream}@{runner.site}"
        out[name] = {"server": runner.source.name, "up": runner.connected, "reconnects": max(0, runner.sessions - 1)}
        if runner.last_error:
            out[name]["last_error"] = runner.last_error[:MAX_ERROR_CHARS]
    for sink, up in (actuators.up if actuators is not None else {}).items():
        assert actuators is not None
        entry: dict[str, Any] = {"up": up, "reconnects": actuators.failures.get(sink, 0)}
        if sink in actuators.last_error:
            entry["last_error"] = actuators.last_error[sink][:MAX_ERROR_CHARS]
        out[f"sink {sink}"] = entry
    return {name: out[name] for name in sorted(out)[:MAX_REPORTED]}
