"""``GET /metrics``: the hub's state in the Prometheus text format, through ``prometheus_client``.

The numbers are read when the endpoint is scraped, from the site registry,
the deployed apps, the ingest counters and the engine's progress, and
collected as metric families next to the process metrics (CPU, memory, open
files) of the hub itself. Names follow Prometheus conventions: base units
(``_seconds``, ``_bytes``, ``_ratio``) and counters ending in ``_total``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hub.engine.dead_letters import DEAD_LETTERS, OPERATOR_ERRORS, DeadLetterCounts
from spanedge.metrics import CONTENT_TYPE, Exposition, metric_name

__all__ = ["CONTENT_TYPE", "DEAD_LETTERS", "DeadLetterCounts", "Exposition", "render_metrics"]


_SPARK_NAMES = {
    "active": "spanedge_spark_query_active",
    "batch_id": "spanedge_spark_batch_id",
    "batch_ms": "spanedge_spark_batch_duration_seconds",
    "input_rows_per_s": "spanedge_spark_input_rows_per_second",
    "processed_rows_per_s": "spanedge_spark_processed_rows_per_second",
    "input_rows": "spanedge_spark_last_batch_input_rows",
    "state_rows": "spanedge_spark_state_rows",
    "sink_batches": "spanedge_spark_sink_batches_total",
    "sink_rows": "spanedge_spark_sink_rows_total",
    "late_dropped": "spanedge_spark_late_records_dropped_total",
    "restarts": "spanedge_spark_query_restarts_total",
    "sink_up": "spanedge_spark_sink_up",
    "sink_connect_failures": "spanedge_spark_sink_connect_failures_total",
    "sink_rejected_rows": "spanedge_spark_sink_rejected_rows_total",
    "sink_replays_skipped": "spanedge_spark_sink_replays_skipped_total",
}

_SPARK_HELP = {
    "sink_up": "1 while the sink reaches its database, 0 while it retries with a growing wait",
    "sink_connect_failures": "attempts to reach the sink's database that failed",
    "sink_rejected_rows": "results that did not fit the sink's table, sent to the dead letters",
    "sink_replays_skipped": "micro-batches replayed after a restart that the sink's database already had",
}


def render_metrics(
    sites: Iterable[Mapping[str, Any]],
    links: Iterable[Mapping[str, Any]],
    apps: Iterable[Mapping[str, Any]],
    ingest: Mapping[str, Any] | None = None,
    engine: Mapping[str, Any] | None = None,
) -> str:
    """Render the hub's metrics.

    Args:
        sites: ``SiteRegistry.status()`` rows.
        links: ``SiteRegistry.matrix()`` rows.
        apps: ``{"app", "version", "replicas", "wan_bytes_per_s", "worst_latency_ms", "frontier_lag_s"}``
            per deployed app (``frontier_lag_s``: seconds per site, see :mod:`hub.handover.frontiers`).
        ingest: ``Ingest.stats()``, if the data plane runs.
        engine: ``Engine.metrics()`` (``{app: {name: number | {...}}}``), if the engine runs.
    """
    out = Exposition()
    for site in sites:
        _add_site(out, site)
    for link in links:
        labels = {"src": link["src"], "dst": link["dst"], "source": link.get("source", "")}
        out.add("spanedge_link_latency_seconds", link.get("latency_ms"), labels, help="one-way latency", scale=1e-3)
    for app in apps:
        labels = {"app": app["app"]}
        out.add("spanedge_app_plan_version", app.get("version"), labels)
        out.add("spanedge_app_replicas", app.get("replicas"), labels)
        out.add("spanedge_app_wan_bytes_per_second", app.get("wan_bytes_per_s"), labels, help="planned WAN traffic")
        out.add("spanedge_app_worst_latency_seconds", app.get("worst_latency_ms"), labels, help="planned", scale=1e-3)
        for site, lag in sorted((app.get("frontier_lag_s") or {}).items()):
            out.add(
                "spanedge_hub_site_frontier_lag_seconds",
                lag,
                {"app": app["app"], "site": site},
                help="the hub's clock less the event time the site has sent the app everything before; "
                "the app's hub windows wait for the live site furthest behind",
            )
    if ingest is not None:
        _add_ingest(out, ingest)
    if engine is not None:
        _add_engine(out, engine)
    for (app_name, query), n in sorted(DEAD_LETTERS.snapshot().items()):
        labels = {"app": app_name, "query": query}
        out.add("spanedge_hub_dead_letters_total", n, labels, help="records hub operators failed on, dead-lettered")
    for (app_name, origin), n in sorted(OPERATOR_ERRORS.snapshot().items()):
        out.add(
            "spanedge_hub_operator_errors_total",
            n,
            {"app": app_name, "site": origin},
            help="records from the site that hub operators raised on",
        )
    return out.render()


def _add_site(out: Exposition, site: Mapping[str, Any]) -> None:
    """A site's liveness, resources, outbox and operator rates from its last heartbeat."""
    name = site["site"]
    if site.get("tier") != "hub" or site.get("last_heartbeat_age_s") is not None:
        # a hub site without an agent never sends heartbeats; it is not down
        out.add("spanedge_site_up", site.get("alive"), {"site": name}, help="1 if the site's heartbeat is recent")
    out.add("spanedge_site_heartbeat_age_seconds", site.get("last_heartbeat_age_s"), {"site": name})
    out.add("spanedge_site_watermark_lag_seconds", site.get("watermark_lag_s"), {"site": name})
    out.add(
        "spanedge_site_cpu_ratio", site.get("cpu_percent"), {"site": name}, help="agent CPU, 1 = a core", scale=0.01
    )
    out.add("spanedge_site_rss_bytes", site.get("rss_bytes"), {"site": name})
    out.add("spanedge_site_clock_offset_seconds", site.get("clock_offset_ms"), {"site": name}, scale=1e-3)
    out.add(
        "spanedge_site_dead_letters_total",
        site.get("dlq"),
        {"site": name},
        help="records sent to the dead-letter topic",
    )
    out.add(
        "spanedge_site_late_records_total", site.get("late"), {"site": name}, help="late records sent to side output"
    )
    out.add("spanedge_site_overload_dropped_records_total", site.get("overload_dropped"), {"site": name})
    outbox = site.get("outbox") or {}
    out.add("spanedge_site_backlog_records", outbox.get("records"), {"site": name}, help="records in the outbox")
    out.add("spanedge_site_backlog_bytes", outbox.get("bytes"), {"site": name}, help="bytes in the outbox")
    out.add("spanedge_site_outbox_sent_records_total", outbox.get("sent"), {"site": name})
    out.add("spanedge_site_outbox_dropped_records_total", outbox.get("dropped"), {"site": name})
    for replica, stats in (site.get("operators") or {}).items():
        if not isinstance(stats, Mapping):
            continue
        labels = {"site": name, "replica": replica}
        out.add("spanedge_operator_input_records_per_second", stats.get("rate_in"), labels, help="into the replica")
        out.add("spanedge_operator_output_records_per_second", stats.get("rate_out"), labels, help="out of it")
        out.add("spanedge_operator_input_records_total", stats.get("in"), labels)
        out.add("spanedge_operator_output_records_total", stats.get("out"), labels)


def _add_ingest(out: Exposition, ingest: Mapping[str, Any]) -> None:
    """The ingest's connection and counters, and per app, site and stream its records and lag."""
    for key in ("connected", "queued"):
        out.add(f"spanedge_ingest_{key}", ingest.get(key))
    for key in ("messages", "records", "duplicates", "malformed", "oversize", "site_mismatch", "commits", "connects"):
        out.add(f"spanedge_ingest_{key}_total", ingest.get(key))
    for app_name, per_site in (ingest.get("apps") or {}).items():
        for site_name, per_stream in per_site.items():
            for stream, counts in per_stream.items():
                labels = {"app": app_name, "site": site_name, "stream": stream}
                out.add("spanedge_ingest_stream_records_total", counts.get("records"), labels)
                out.add("spanedge_ingest_stream_duplicates_total", counts.get("duplicates"), labels)
                out.add("spanedge_ingest_lag_seconds", counts.get("lag_s"), labels, help="arrival minus event time")


def _add_engine(out: Exposition, engine: Mapping[str, Any]) -> None:
    """Per app its plan version, its hub operators' records in and out, and per Spark query every number."""
    for app_name, data in engine.items():
        if not isinstance(data, Mapping):
            continue
        out.add("spanedge_spark_plan_version", data.get("version"), {"app": app_name})
        for operator, figures in sorted((data.get("operators") or {}).items()):
            if isinstance(figures, Mapping):
                _add_hub_operator(out, {"app": app_name, "operator": operator}, figures)
        for query, values in (data.get("queries") or {}).items():
            labels = {"app": app_name, "query": query}
            for key, value in values.items():
                scale = 1e-3 if key == "batch_ms" else 1.0
                name = _SPARK_NAMES.get(key, metric_name("spanedge_spark", key))
                out.add(name, value, labels, help=_SPARK_HELP.get(key, ""), scale=scale)


def _add_hub_operator(out: Exposition, labels: Mapping[str, str], figures: Mapping[str, Any]) -> None:
    """A hub operator's records in and out (counted in its Spark queries), as the agents report theirs."""
    out.add(
        "spanedge_hub_operator_input_records_per_second",
        figures.get("in_rate"),
        labels,
        help="records into a hub operator per second, over its last micro-batch",
    )
    out.add(
        "spanedge_hub_operator_output_records_per_second",
        figures.get("out_rate"),
        labels,
        help="records out of a hub operator per second, over its last micro-batch",
    )
    out.add("spanedge_hub_operator_input_records_total", figures.get("in"), labels, help="records into a hub operator")
    out.add("spanedge_hub_operator_output_records_total", figures.get("out"), labels, help="records out of it")
