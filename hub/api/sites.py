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

#: The answer of ``GET /sites`` for a fleet of this many sites or more (tens of ms to build on a busy hub) is reused...
REUSE_FROM_SITES = 200
#: ... for this long, and refreshed in the background for twice as long again.
REUSE_S = 1.0


class SitesAnswer:
    """The body of ``GET /sites``, built for each request from rows validated once per heartbeat.

    A site's row is checked against :class:`~hub.api.models.SiteStatus` (which
    shows a heartbeat field of the wrong type as ``null``) only when its
    registry revision changed; the fields that follow the clock (``alive``,
    ``last_heartbeat_age_s``, ``latency``) are filled in per request, and the
    whole answer is serialised with orjson; so are ``revoked`` and ``joining``, which change without a heartbeat.
    """

    def __init__(self, reuse_from_sites: int = REUSE_FROM_SITES, reuse_s: float = REUSE_S) -> None:
        """Start with nothing checked; a fleet of ``reuse_from_sites`` has its answers reused (see :meth:`body`)."""
        self.reuse_from_sites, self.reuse_s = reuse_from_sites, reuse_s
        self._lock = threading.Lock()
        self._registry: SiteRegistry | None = None
        self._checked: dict[str, tuple[int, dict[str, Any]]] = {}
        self._last: tuple[SiteRegistry, float, bytes] | None = None  # a big fleet's answer: registry, when built, body
        self._rebuilding = False

    def body(self, registry: SiteRegistry) -> bytes:
        """The answer for ``registry``: built now, or, for a fleet of ``reuse_from_sites`` or more, reused.

        A big fleet's answer is served again while it is under ``reuse_s`` old;
        up to three times that, it is served while a fresh one is built in the
        background. A request thus never waits for a big fleet's answer once one
        exists, and sees one at most about ``reuse_s`` plus a build old; smaller
        fleets get a fresh answer each time.
        """
        now = time.monotonic()
        with self._lock:
            last = self._last if self._last is not None and self._last[0] is registry else None
            age = None if last is None else now - last[1]
            if last is not None and age is not None and age < 3 * self.reuse_s:
                if age >= self.reuse_s and not self._rebuilding:
                    self._rebuilding = True
                    threading.Thread(target=self._rebuild, args=(registry,), name="sites-answer", daemon=True).start()
                return last[2]
        return self._build(registry)

    def _rebuild(self, registry: SiteRegistry) -> None:
        try:
            self._build(registry)
        finally:
            with self._lock:
                self._rebuilding = False

    def _build(self, registry: SiteRegistry) -> bytes:
        started = time.monotonic()
        body = self.fresh(registry)
        with self._lock:
            self._last = (registry, started, body) if len(registry.sites.sites) >= self.reuse_from_sites else None
        return body

    def fresh(self, registry: SiteRegistry) -> bytes:
        """The JSON of :class:`~hub.api.models.SitesResponse` from ``registry``, built now."""
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
        """Every site with its live state from heartbeats.

        For a fleet of 200 sites or more, the answer may be up to about a second old:
        it is rebuilt in the background while the last one is served.
        """
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
