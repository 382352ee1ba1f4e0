"""The REST API's site routes: ``/sites`` (live state from heartbeats) and ``/latency`` (the matrix)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter

from hub.api_models import LatencyResponse, SitesResponse, errors
from hub.coordinator import Coordinator


def sites_router(coordinator: Coordinator) -> APIRouter:
    """The ``/sites`` and ``/latency`` routes over ``coordinator``'s site registry."""
    router = APIRouter(tags=["sites"], responses=errors(401))

    @router.get("/sites", response_model=SitesResponse)
    def sites() -> dict[str, Any]:
        """Every site with its live state from heartbeats."""
        registry = coordinator.registry
        return {"down_after_s": registry.down_after_s, "sites": registry.status()}

    @router.get("/latency", response_model=LatencyResponse)
    def latency() -> dict[str, Any]:
        """The one-way latency estimate of every ordered site pair, where it comes from and its age."""
        registry = coordinator.registry
        return {
            "generated_at": time.time(),
            "alpha": registry.alpha,
            "stale_after_s": registry.stale_after_s,
            "links": registry.matrix(),
        }

    return router
