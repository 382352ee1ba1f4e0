"""The REST API's site routes: ``/sites`` (live state from heartbeats) and ``/latency`` (the matrix)."""

from __future__ import annotations

import threading
import time
from typing import Any

import orjson
from fastapi import APIRouter
from fastapi.responses import Response

from hub.api.models import LatencyResponse, SitesResponse, SiteStatus, errors
from hub.control.coordinator import Coordinator
from hub.control.registry import SiteRegistry


class SitesAnswer:
    """The body of ``GET /sites``, built for each request from rows validated once per heartbeat.

    A site's row is checked against :class:`~hub.api.models.SiteStatus` (which
    shows a heartbeat field of the wrong type as ``null``) only when its
    registry revision changed; the fields that follow the clock (``alive``,
    ``last_heartbeat_age_s``, ``latency``) are filled in per request, and the
    whole answer is serialised with orjson; so are ``revoked`` and ``joining``, which change without a heartbeat.
    """

    def __init__(self) -> None:
        """Start with nothing checked."""
        self._lock = threading.Lock()
        self._registry: SiteRegistry | None = None
        self._checked: dict[str, tuple[int, dict[str, Any]]] = {}

    def body(self, registry: SiteRegistry) -> bytes:
        """The JSON of :class:`~hub.api.models.SitesResponse` from ``registry``."""
        with self._lock:
            if registry is not self._registry:
                self._registry, self._checked = registry, {}
        sites = []
        for revision, row in registry.status_revisions():
            with self._lock:
                checked = self._checked.get(row["site"])
            if checked is None or checked[0] != revision:
                checked = (revision, SiteStatus.model_validate(row).model_dump(mode="json"))
                with self._lock:
                    self._checked[row["site"]] = checked
            shown = dict(checked[1])
            shown["alive"] = bool(row["alive"])
            shown["revoked"] = bool(row["revoked"])
            shown["joining"] = bool(row["joining"])
            age = row["last_heartbeat_age_s"]
            shown["last_heartbeat_age_s"] = None if age is None else float(age)
            shown["latency"] = {peer: _link(link) for peer, link in row["latency"].items()}
            sites.append(shown)
        return orjson.dumps({"down_after_s": float(registry.down_after_s), "sites": sites})


def _link(link: dict[str, Any]) -> dict[str, Any]:
    """A link of a status row in the types of :class:`~hub.api.models.SiteLinkModel`."""
    age = link["age_s"]
    return {
        "latency_ms": float(link["latency_ms"]),
        "p95_ms": float(link["p95_ms"]),
        "source": str(link["source"]),
        "age_s": None if age is None else float(age),
    }


def sites_router(coordinator: Coordinator) -> APIRouter:
    """The ``/sites`` and ``/latency`` routes over ``coordinator``'s site registry."""
    router = APIRouter(tags=["sites"], responses=errors(401))
    answer = SitesAnswer()

    @router.get("/sites", response_model=SitesResponse)
    def sites() -> Response:
        """Every site with its live state from heartbeats."""
        return Response(answer.body(coordinator.registry), media_type="application/json")

    @router.get("/latency", response_model=LatencyResponse)
    def latency() -> dict[str, Any]:
        """The one-way latency estimate of every ordered site pair, where it comes from and its age."""
        registry = coordinator.registry
        return {
            "generated_at": time.time(),
            "window_s": registry.latency_window_s,
            "stale_after_s": registry.stale_after_s,
            "links": registry.matrix(),
        }

    return router
