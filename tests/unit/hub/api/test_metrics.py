"""Every metric the hub and an agent expose follows Prometheus naming conventions.

The hub's ``/metrics`` is rendered from a real site registry that received a full heartbeat,
with ingest and Spark numbers of every kind; the agent's from the same heartbeat.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from spanedge.wire.heartbeat import decode
from tests.conftest import EXAMPLES

HEARTBEAT: dict[str, Any] = {
    "site": "truck-7",
    "apps": ["cold-chain"],
    "operators": {"to_celsius@truck-7": {"in": 100, "out": 99, "rate_in": 10.0, "rate_out": 9.9}},
    "watermark_lag_s": 1.2,
    "outbox": {"records": 40, "bytes": 4400, "sent": 600, "dropped": 1},
    "dlq": 2,
    "late": 3,
    "overload_dropped": 0,
    "cpu_percent": 12.5,
    "rss_bytes": 58_000_000,
    "latency": {"cloud": {"rtt_ms": 150.0, "p95_ms": 190.0, "samples": 10}},
    "clock_offset_ms": 1.5,
}
SPARK_QUERY = {
    "active": True,
    "sink_batches": 4,
    "sink_rows": 40,
    "restarts": 1,
    "error": None,
    "late_dropped": 2,
    "batch_id": 3,
    "batch_ms": 180,
    "input_rows_per_s": 6.2,
    "processed_rows_per_s": 7.0,
    "input_rows": 12,
    "state_rows": 5,
    "sink_up": False,
    "sink_connect_failures": 3,
    "sink_rejected_rows": 2,
    "sink_replays_skipped": 1,
    "sink_error": "connection refused",
}
INGEST = {
    "connected": True,
    "queued": 0,
    "messages": 9,
    "records": 90,
    "duplicates": 1,
    "malformed": 0,
    "site_mismatch": 0,
    "commits": 9,
    "connects": 1,
    "apps": {"cold-chain": {"truck-7": {"unit_stats": {"records": 90, "duplicates": 1, "lag_s": 0.35}}}},
}
#: Units that are not base units, as name parts.
NOT_BASE_UNITS = {"ms", "milliseconds", "us", "minutes", "hours", "percent", "kb", "mb", "kib", "mib", "kilobytes"}
NAME = re.compile(r"[a-z][a-z0-9_]*")


def hub_text(monkeypatch: pytest.MonkeyPatch) -> str:
    import hub.api.metrics
    from hub.api.metrics import DeadLetterCounts, render_metrics
    from hub.control.registry import SiteRegistry
    from hub.engine.dead_letters import OperatorErrors
    from spanedge.sites import load_sites

    registry = SiteRegistry(load_sites(EXAMPLES / "cold_chain" / "sites.yaml"))
    registry.heartbeat("truck-7", HEARTBEAT)
    dead_letters = DeadLetterCounts()  # not the process's own counts, which other tests read
    dead_letters.add("cold-chain", "fleet_alerts", 1)
    monkeypatch.setattr(hub.api.metrics, "DEAD_LETTERS", dead_letters)
    errors = OperatorErrors()
    errors.add("cold-chain", ["truck-7", "truck-7", "truck-9"])
    monkeypatch.setattr(hub.api.metrics, "OPERATOR_ERRORS", errors)
    apps = [{"app": "cold-chain", "version": 2, "replicas": 17, "wan_bytes_per_s": 1200.0, "worst_latency_ms": 90.0}]
    operators = {"anomaly": {"in": 90, "out": 3, "in_rate": 6.2, "out_rate": 0.2}}
    engine = {"cold-chain": {"version": 2, "queries": {"fleet_alerts": SPARK_QUERY}, "operators": operators}}
    return render_metrics(registry.status(), registry.matrix(), apps, INGEST, engine)


def agent_text(monkeypatch: pytest.MonkeyPatch) -> str:
    from edge_agent.telemetry import Telemetry
    from spanedge.sites import load_sites

    sites = load_sites(EXAMPLES / "cold_chain" / "sites.yaml")
    telemetry = Telemetry("truck-7", sites, "cloud", hub=None, interval=5.0)  # type: ignore[arg-type]
    telemetry.last = decode(HEARTBEAT)[0]
    return telemetry.exposition().render()


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


@pytest.mark.parametrize("render", [hub_text, agent_text], ids=["hub", "agent"])
def test_names_types_and_units_follow_prometheus_conventions(render: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    found = families(render(monkeypatch))
    ours = {name: f for name, f in found.items() if name.startswith("spanedge_")}
    assert len(ours) >= 12, sorted(found)
    assert {"process_cpu_seconds", "process_resident_memory_bytes"} <= set(found)
    for name, family in ours.items():
        assert NAME.fullmatch(name), name
        assert not NOT_BASE_UNITS & set(name.split("_")), f"{name}: use base units (_seconds, _bytes, _ratio)"
        for sample in family.samples:
            if family.type == "counter":
                assert sample.name == f"{name}_total", f"counter {sample.name} must end in _total"
            else:
                assert family.type == "gauge", name
                assert not sample.name.endswith("_total"), f"gauge {sample.name} must not end in _total"


def test_a_heartbeat_reads_the_same_on_the_hub_and_on_the_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the hub learns from a heartbeat and what the agent serves itself agree in name, type and value."""
    hub, agent = families(hub_text(monkeypatch)), families(agent_text(monkeypatch))
    pairs = {
        "spanedge_operator_input_records": "spanedge_operator_input_records",
        "spanedge_operator_output_records": "spanedge_operator_output_records",
        "spanedge_operator_input_records_per_second": "spanedge_operator_input_records_per_second",
        "spanedge_operator_output_records_per_second": "spanedge_operator_output_records_per_second",
        "spanedge_site_dead_letters": "spanedge_agent_dead_letters",
        "spanedge_site_late_records": "spanedge_agent_late_records",
        "spanedge_site_overload_dropped_records": "spanedge_agent_overload_dropped_records",
        "spanedge_site_outbox_sent_records": "spanedge_agent_outbox_sent_records",
        "spanedge_site_outbox_dropped_records": "spanedge_agent_outbox_dropped_records",
        "spanedge_site_watermark_lag_seconds": "spanedge_agent_watermark_lag_seconds",
    }
    for on_hub, on_agent in pairs.items():
        h, a = hub[on_hub], agent[on_agent]
        assert h.type == a.type, (on_hub, on_agent)
        assert [s.value for s in h.samples] == [s.value for s in a.samples], (on_hub, on_agent)
        assert {s.labels["site"] for s in h.samples} == {"truck-7"}


def test_a_database_sink_that_retries_shows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    found = families(hub_text(monkeypatch))
    labels = {"app": "cold-chain", "query": "fleet_alerts"}
    expected = {
        "spanedge_spark_sink_up": ("gauge", 0.0),
        "spanedge_spark_sink_connect_failures": ("counter", 3.0),
        "spanedge_spark_sink_rejected_rows": ("counter", 2.0),
        "spanedge_spark_sink_replays_skipped": ("counter", 1.0),
    }
    for name, (kind, value) in expected.items():
        family = found[name]
        assert family.type == kind, name
        assert [(s.labels, s.value) for s in family.samples] == [(labels, value)], name
        assert family.documentation != name.replace("_", " "), f"{name} has no help text"


def test_the_hub_s_operator_errors_are_a_counter_by_app_and_origin_site(monkeypatch: pytest.MonkeyPatch) -> None:
    family = families(hub_text(monkeypatch))["spanedge_hub_operator_errors"]
    assert family.type == "counter"
    assert [(s.labels, s.value) for s in family.samples] == [
        ({"app": "cold-chain", "site": "truck-7"}, 2.0),
        ({"app": "cold-chain", "site": "truck-9"}, 1.0),
    ]
    assert family.documentation == "records from the site that hub operators raised on"
