"""The REST API of a standby hub (``--ha``): health, the apps read from the shared database, writes redirected.

A standby runs no coordinator. It answers ``/healthz`` with its role and the
leader's name, epoch and URL; ``GET /apps``, ``GET /apps/{name}`` and ``GET
/apps/{name}/placement`` from the apps the leader stored in the database
(with ``X-SpanEdge-Role: standby``); and a write (POST, PUT, PATCH, DELETE)
with **307** to the same path on the leader's URL, where the leader checks
the token. Everything else (the live state: sites, heartbeats, metrics, the
dashboard), and a write while no leader's URL is known, gets 503 naming the
leader, with ``Retry-After``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from hub.api.apps import AppName, placement_view, summary
from hub.api.auth import scope_dependency
from hub.api.errors import error, install_error_handlers
from hub.api.health import StatsSource
from hub.api.models import AppDetail, AppList, HealthResponse, PlacementView
from hub.control.state import AppRecord
from spanedge.errors import InvalidName, SpanEdgeError
from spanedge.names import check_app_name
from spanedge.tokens import Tokens, TokenScope

AppsSource = Callable[[str | None], list[AppRecord]]
"""The apps stored in the shared database (only the one named, if a name is given): :func:`hub.ha.pg_state.stored_apps`."""

#: The header of an answer a standby made itself from the shared database.
ROLE_HEADER = "X-SpanEdge-Role"
#: The methods a standby sends on to the leader.
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def redirect_location(method: str, leader_url: str | None, path: str, query: str = "") -> str | None:
    """Where a standby redirects a request: the same path and query on the leader's URL for a write, else None."""
    if method.upper() not in WRITES or not leader_url:
        return None
    return leader_url.rstrip("/") + path + (f"?{query}" if query else "")


def _target(request: Request) -> tuple[str, str]:
    """The request's path as sent (still percent-encoded) and its query string."""
    raw = request.scope.get("raw_path") or request.scope["path"].encode()
    return raw.decode("latin-1"), request.scope.get("query_string", b"").decode("latin-1")


def _answer(model: type[BaseModel], body: dict[str, Any]) -> Response:
    """``body`` as ``model`` writes it, marked as a standby's answer."""
    text = model.model_validate(body).model_dump_json(by_alias=True)
    return Response(text, media_type="application/json", headers={ROLE_HEADER: "standby"})


def _apps_routes(api: FastAPI, role: StatsSource, tokens: Tokens, apps: AppsSource) -> None:
    """``GET /apps``, ``/apps/{name}`` and ``/apps/{name}/placement`` from ``apps``, for a read token."""
    read = [Depends(scope_dependency(tokens, TokenScope.READ))]

    def stored(name: str | None = None) -> list[AppRecord] | JSONResponse:
        if name is not None:
            try:
                check_app_name(name, "the app name in the URL")
            except InvalidName as exc:
                return error(422, exc)
        try:
            return apps(name)
        except SpanEdgeError as exc:
            leader = role().get("leader") or "(none yet)"
            msg = f"this standby cannot read the apps from the hub's database: {exc}; ask the leader {leader}"
            answer = error(503, msg, "standby")
            answer.headers["Retry-After"] = "1"
            return answer

    def one(name: str) -> AppRecord | JSONResponse:
        found = stored(name)
        if isinstance(found, JSONResponse):
            return found
        if found:
            return found[0]
        every = stored()
        names = ", ".join(r.name for r in every) if isinstance(every, list) and every else "none"
        return error(404, f"no app named {name!r} is deployed (deployed: {names})", "NotFound")

    @api.get("/apps", dependencies=read)
    def list_apps() -> Response:
        records = stored()
        return records if isinstance(records, JSONResponse) else _answer(AppList, {"apps": list(map(summary, records))})

    @api.get("/apps/{name}", dependencies=read)
    def get_app(name: AppName) -> Response:
        record = one(name)
        if isinstance(record, JSONResponse):
            return record
        return _answer(AppDetail, {**summary(record), "plan": record.plan.to_dict()})

    @api.get("/apps/{name}/placement", dependencies=read)
    def get_placement(name: AppName) -> Response:
        record = one(name)
        return record if isinstance(record, JSONResponse) else _answer(PlacementView, placement_view(record))


def standby_app(role: StatsSource, tokens: Tokens | None = None, apps: AppsSource | None = None) -> FastAPI:
    """The REST API of a standby hub: ``/healthz`` with ``role``'s fields, the apps' reads, writes redirected.

    ``role`` gives ``role``, ``leader``, ``epoch`` and ``leader_url``; without ``tokens`` and ``apps`` the
    standby reads nothing, and every request but ``/healthz`` and the writes it redirects gets 503.
    """
    api = FastAPI(title="SpanEdge hub (standby)", docs_url=None, redoc_url=None, openapi_url=None)
    install_error_handlers(api)

    @api.get("/healthz", response_model=HealthResponse, response_model_exclude_unset=True)
    def healthz() -> dict[str, Any]:
        """Liveness; needs no token."""
        return {"status": "ok", "apps": 0, **role()}

    if tokens is not None and apps is not None:
        _apps_routes(api, role, tokens, apps)

    @api.api_route("/{path:path}", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"])
    def elsewhere(request: Request) -> JSONResponse:
        fields = role()
        leader, epoch, url = fields.get("leader"), fields.get("epoch"), fields.get("leader_url")
        path, query = _target(request)
        body = {"error": "standby", "leader": leader, "epoch": epoch, "leader_url": url}
        location = redirect_location(request.method, url, path, query)
        if location is not None:
            detail = f"this hub is a standby: {request.method} {path} is sent on to the leader {leader} at {url}"
            return JSONResponse({**body, "detail": detail}, status_code=307, headers={"Location": location})
        where = f" at {url}" if url else ""
        detail = (
            f"this hub is a standby: {request.method} {path} is served by the leader "
            f"{leader or '(none yet)'}{where} (epoch {epoch}); send it there, or retry here once this hub leads"
        )
        return JSONResponse({**body, "detail": detail}, status_code=503, headers={"Retry-After": "1"})

    return api
