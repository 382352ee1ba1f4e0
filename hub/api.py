"""The hub's REST API (FastAPI): deploy apps, inspect sites, latencies, placements and metrics.

Every route but ``/healthz`` (and the OpenAPI docs) needs ``Authorization:
Bearer <token>``. Errors come back as JSON ``{"error": <class>, "detail":
<message>}``; a deploy the app, the sites or the placement rejects is a 422
whose message is the one ``spanedge deploy --dry-run`` prints.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from hub.auth import bearer_dependency
from hub.coordinator import Coordinator
from hub.distribution import sites_of
from hub.metrics import CONTENT_TYPE, render_metrics
from hub.state import AppRecord
from spanedge.errors import SpanEdgeError
from spanedge.loader import source_hash
from spanedge.plan import Plan

log = logging.getLogger(__name__)

StatsSource = Callable[[], Mapping[str, Any]]


class DeployRequest(BaseModel):
    """``POST /apps``: an app's source and placement options."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(min_length=1, description="Python source that defines the App")
    filename: str = Field(default="app.py", description="file name used in error messages")
    app_name: str | None = Field(default=None, description="which App in the source, if it defines several")
    slo_ms: float | None = Field(default=None, gt=0, description="worst source-to-sink latency allowed")
    weights: dict[str, float] | None = Field(default=None, description="objective weights of the placement")


def error(status: int, exc: BaseException | str, name: str | None = None) -> JSONResponse:
    """A JSON error response ``{"error", "detail"}``."""
    return JSONResponse(
        status_code=status,
        content={"error": name or type(exc).__name__, "detail": str(exc)},
    )


def _not_found(name: str, coordinator: Coordinator) -> JSONResponse:
    deployed = ", ".join(r.name for r in coordinator.records()) or "none"
    return error(404, f"no app named {name!r} is deployed (deployed: {deployed})", "NotFound")


def summary(record: AppRecord) -> dict[str, Any]:
    """The short view of a deployed app."""
    plan = record.plan
    return {
        "app": record.name,
        "version": plan.version,
        "deployed_at": record.deployed_at,
        "filename": record.filename,
        "source_sha256": source_hash(record.source),
        "slo_ms": record.slo_ms,
        "weights": record.weights,
        "sites": sorted(sites_of(plan)),
        "replicas": len(plan.assignments),
        "hub_replicas": [a.replica for a in plan.assignments if a.site == plan.hub],
        "totals": dataclasses.asdict(plan.totals),
        "last_change": dataclasses.asdict(record.history[-1]) if record.history else None,
    }


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 6) if b else None


def placement_view(record: AppRecord) -> dict[str, Any]:
    """Per replica: site and reason; totals against the baselines; the plan history."""
    plan: Plan = record.plan
    return {
        "app": plan.app,
        "version": plan.version,
        "hub": plan.hub,
        "solver": dataclasses.asdict(plan.solver),
        "replicas": [dataclasses.asdict(a) for a in plan.assignments],
        "totals": dataclasses.asdict(plan.totals),
        "baselines": {
            name: {
                **dataclasses.asdict(t),
                "wan_ratio": _ratio(plan.totals.wan_bytes_per_s, t.wan_bytes_per_s),
                "worst_latency_delta_ms": round(plan.totals.worst_latency_ms - t.worst_latency_ms, 6),
            }
            for name, t in plan.baselines.items()
        },
        "slo_ms": plan.slo_ms,
        "warnings": list(plan.warnings),
        "history": [dataclasses.asdict(h) for h in record.history],
    }


def create_app(
    coordinator: Coordinator,
    token: str,
    *,
    ingest_stats: StatsSource | None = None,
    engine_metrics: StatsSource | None = None,
    health: StatsSource | None = None,
) -> FastAPI:
    """Build the REST API over ``coordinator``.

    Args:
        coordinator: deploys apps and knows the sites.
        token: the bearer token every route but ``/healthz`` requires.
        ingest_stats: ``Ingest.stats`` when the data plane runs.
        engine_metrics: ``Engine.metrics`` when the engine runs.
        health: extra fields for ``/healthz`` (e.g. broker connectivity).
    """
    if not token:
        msg = "the REST API needs a non-empty token"
        raise SpanEdgeError(msg)
    api = FastAPI(
        title="SpanEdge hub",
        version="1",
        description="Deploy dataflows across edge sites and the Spark hub; inspect sites, latencies and placements.",
    )

    @api.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in exc.errors())
        return error(422, f"invalid request: {problems}", "InvalidRequest")

    @api.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # the server logs the traceback; the client gets the message as JSON
        return error(500, exc)

    @api.get("/healthz", tags=["hub"])
    def healthz() -> dict[str, Any]:
        """Liveness; needs no token."""
        return {"status": "ok", "apps": coordinator.app_count, **(health() if health else {})}

    router = APIRouter(dependencies=[Depends(bearer_dependency(token))])

    @router.post("/apps", status_code=201, tags=["apps"], response_model=None)
    def deploy(body: DeployRequest) -> dict[str, Any] | JSONResponse:
        """Deploy or redeploy an app: place it, persist it, publish its plan, start its hub part."""
        try:
            record, distribution = coordinator.deploy(
                body.source, body.filename, app_name=body.app_name, slo_ms=body.slo_ms, weights=body.weights
            )
        except (SpanEdgeError, ValueError) as exc:
            if isinstance(exc, ValueError):
                return error(422, exc)
            log.exception("deploy failed")
            return error(500, exc)
        return {
            "app": record.name,
            "version": record.plan.version,
            "plan": record.plan.to_dict(),
            "distribution": distribution,
            "history": [dataclasses.asdict(h) for h in record.history],
        }

    @router.get("/apps", tags=["apps"])
    def list_apps() -> dict[str, Any]:
        """Deployed apps."""
        return {"apps": [summary(r) for r in coordinator.records()]}

    @router.get("/apps/{name}", tags=["apps"], response_model=None)
    def get_app(name: str) -> dict[str, Any] | JSONResponse:
        """One app: its summary and full plan."""
        try:
            record = coordinator.record(name)
        except KeyError:
            return _not_found(name, coordinator)
        return {**summary(record), "plan": record.plan.to_dict()}

    @router.get("/apps/{name}/placement", tags=["apps"], response_model=None)
    def get_placement(name: str) -> dict[str, Any] | JSONResponse:
        """Where every replica runs and why, the totals against the baselines, and the plan history."""
        try:
            record = coordinator.record(name)
        except KeyError:
            return _not_found(name, coordinator)
        return placement_view(record)

    @router.delete("/apps/{name}", tags=["apps"], response_model=None)
    def delete_app(name: str) -> dict[str, Any] | JSONResponse:
        """Stop an app everywhere and forget it."""
        try:
            distribution = coordinator.delete(name)
        except KeyError:
            return _not_found(name, coordinator)
        return {"deleted": name, "distribution": distribution}

    @router.get("/sites", tags=["sites"])
    def sites() -> dict[str, Any]:
        """Every site with its live state from heartbeats."""
        registry = coordinator.registry
        return {"down_after_s": registry.down_after_s, "sites": registry.status()}

    @router.get("/latency", tags=["sites"])
    def latency() -> dict[str, Any]:
        """The one-way latency estimate of every ordered site pair, where it comes from and its age."""
        registry = coordinator.registry
        return {
            "generated_at": time.time(),
            "alpha": registry.alpha,
            "stale_after_s": registry.stale_after_s,
            "links": registry.matrix(),
        }

    @router.get("/metrics", tags=["hub"], response_class=PlainTextResponse)
    def metrics() -> PlainTextResponse:
        """Prometheus text: per site and operator rates, backlog, ingest lag, Spark batch duration."""
        registry = coordinator.registry
        apps = [
            {
                "app": r.name,
                "version": r.plan.version,
                "replicas": len(r.plan.assignments),
                "wan_bytes_per_s": r.plan.totals.wan_bytes_per_s,
                "worst_latency_ms": r.plan.totals.worst_latency_ms,
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

    api.include_router(router)
    return api
