"""The hub's REST API (FastAPI): deploy apps, inspect sites, latencies, placements and metrics.

Every route but ``/healthz`` (and the OpenAPI docs) needs ``Authorization:
Bearer <token>``: reading needs any token, deploying and deleting an admin
token (:mod:`hub.api.auth`); request bodies over 4 MiB (a preview's summary: 256 KiB) get 413. Every answer has
a model (:mod:`hub.api.models`), shown at ``/docs``; errors, including 401,
403, 404 and 405, come back as JSON ``{"error": <kind>, "detail":
<message>}`` (:mod:`hub.api.errors`); a deploy the app, the sites or the
placement rejects is a 422 whose message is the one ``spanedge deploy
--dry-run`` prints. The routes live by resource: :mod:`hub.api.apps`,
:mod:`hub.api.sites`, :mod:`hub.api.health`, :mod:`hub.api.previews.routes`.
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import Depends, FastAPI

from hub.api.apps import apps_router
from hub.api.auth import BodyLimit, PathLimit, scope_dependency
from hub.api.dashboard.docs import offline_docs
from hub.api.dashboard.routes import dashboard_router
from hub.api.dashboard.snapshot import build_snapshot
from hub.api.enrolment import enrolment_router
from hub.api.errors import install_error_handlers
from hub.api.health import StatsSource, health_router, metrics_router
from hub.api.model_routes import coordinator_apps, model_router
from hub.api.previews import limits
from hub.api.previews.routes import preview_router
from hub.api.previews.store import PreviewStore
from hub.api.rollout_routes import rollout_router
from hub.api.sites import sites_router
from hub.control.coordinator import Coordinator
from hub.control.enrolment import Enrolment
from hub.models.registry import ModelRegistry
from hub.models.service import ModelService
from spanedge.tokens import Tokens, TokenScope


def create_app(
    coordinator: Coordinator,
    tokens: Tokens,
    *,
    ingest_stats: StatsSource | None = None,
    engine_metrics: StatsSource | None = None,
    health: StatsSource | None = None,
    dashboard_stream_s: float = 30.0,
    enrolment: Enrolment | None = None,
    models: ModelService | None = None,
) -> FastAPI:
    """Build the REST API over ``coordinator``.

    Args:
        coordinator: deploys apps and knows the sites.
        tokens: the API tokens and their scopes.
        ingest_stats: ``Ingest.stats`` when the data plane runs.
        engine_metrics: ``Engine.metrics`` when the engine runs.
        health: extra fields for ``/healthz`` (e.g. broker connectivity).
        dashboard_stream_s: a dashboard's event stream ends after this many seconds and the page reconnects.
        enrolment: adds, enrols and revokes sites (None: no enrolment routes).
        models: trains and keeps the apps' models (None: read-only, kept in memory, no Spark to train with).
    """
    api = FastAPI(
        title="SpanEdge hub",
        version="1",
        description="Deploy dataflows across edge sites and the Spark hub; inspect sites, latencies and placements.",
        docs_url=None,
        redoc_url=None,
    )
    offline_docs(api)
    install_error_handlers(api)
    api.include_router(health_router(coordinator, health))
    api.add_middleware(BodyLimit, paths=[PathLimit(limits.PATH_PATTERN, limits.MAX_BODY_BYTES, "a preview's summary")])
    authorized = [Depends(scope_dependency(tokens, TokenScope.READ))]
    admin = [Depends(scope_dependency(tokens, TokenScope.ADMIN))]
    previews = preview_store(coordinator)
    api.include_router(apps_router(coordinator, admin, on_deleted=previews.drop), dependencies=authorized)
    api.include_router(rollout_router(coordinator, admin), dependencies=authorized)
    api.include_router(preview_router(coordinator, previews, admin), dependencies=authorized)
    if enrolment is not None:
        api.include_router(enrolment_router(enrolment, admin))
    if models is None:  # declarations only: no versions to read (the path is never a folder), no Spark to train
        nowhere = Path(os.devnull)
        models = ModelService(ModelRegistry(nowhere / "models"), coordinator_apps(coordinator), nowhere, None)
    api.include_router(model_router(coordinator, models, admin), dependencies=authorized)
    api.include_router(sites_router(coordinator), dependencies=authorized)
    api.include_router(metrics_router(coordinator, ingest_stats, engine_metrics), dependencies=authorized)
    # the page at / is public (it holds no data); its event stream checks the token itself
    snapshot = lambda: build_snapshot(coordinator, engine_metrics, ingest_stats, models, previews)  # noqa: E731
    api.include_router(
        dashboard_router(snapshot, scope_dependency(tokens, TokenScope.READ), max_stream_s=dashboard_stream_s)
    )
    return api


def preview_store(coordinator: Coordinator) -> PreviewStore:
    """The previews of the deployed apps, under ``<state_dir>/previews`` if the coordinator has a state store."""
    store = coordinator.deployments.store
    root = store.root / "previews" if store is not None else None
    return PreviewStore(root, deployed=coordinator.app_names())
