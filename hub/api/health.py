"""The REST API's hub routes: ``/healthz`` (liveness, no token) and ``/metrics`` (Prometheus text)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from hub.api.metrics import CONTENT_TYPE, render_metrics
from hub.api.models import HealthResponse, errors_of_text_route
from hub.control.coordinator import Coordinator

StatsSource = Callable[[], Mapping[str, Any]]
"""A part of the hub that reports numbers (``Ingest.stats``, ``Engine.metrics``, extra health fields)."""


def health_router(coordinator: Coordinator, health: StatsSource | None = None) -> APIRouter:
    """The ``/healthz`` route: whether the hub runs, how many apps, and the fields ``health`` adds."""
    router = APIRouter(tags=["hub"])

    @router.get("/healthz", response_model=HealthResponse, response_model_exclude_unset=True)
    def healthz() -> dict[str, Any]:
        """Liveness; needs no token."""
        return {"status": "ok", "apps": coordinator.app_count, **(health() if health else {})}

    return router


def metrics_router(
    coordinator: Coordinator, ingest_stats: StatsSource | None = None, engine_metrics: StatsSource | None = None
) -> APIRouter:
    """The ``/metrics`` route over the sites, the deployed apps, and the ingest and engine counters if they run."""
    router = APIRouter(tags=["hub"])

    @router.get(
        "/metrics",
        response_class=PlainTextResponse,
        responses={
            200: {"description": "the Prometheus text exposition format"},
            **errors_of_text_route(401),
        },
    )
    def metrics() -> PlainTextResponse:
        """Prometheus text: per site and operator rates, backlog, ingest lag, Spark batch duration."""
        registry = coordinator.registry
        now = time.time()
        apps = [
            {
                "app": r.name,
                "version": r.plan.version,
                "replicas": len(r.plan.assignments),
                "wan_bytes_per_s": r.plan.totals.wan_bytes_per_s,
                "worst_latency_ms": r.plan.totals.worst_latency_ms,
                "frontier_lag_s": {site: now - f for site, f in coordinator.frontiers.frontiers(r.name).items()},
            }
            for r in coordinator.records()
        ]
        text = render_metrics(
            registry.status(),
            registry.matrix(),
            apps,
            ingest=ingest_stats() if ingest_stats else None,
            engine=engine_metrics() if engine_metrics else None,
        )
        return PlainTextResponse(text, media_type=CONTENT_TYPE)

    return router
