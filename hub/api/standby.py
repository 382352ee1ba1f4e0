"""The REST API of a standby hub (``--ha``): health and the apps from the shared database, the rest from the leader.

A standby runs no coordinator. It answers ``/healthz`` with its role and the
leader's name, epoch and URL; ``GET /apps``, ``GET /apps/{name}`` and ``GET
/apps/{name}/placement`` from the apps the leader stored in the database; a
write (POST, PUT, PATCH, DELETE) with **307** to the same path on the leader's
URL, where the leader checks the token; and every other GET or HEAD (the live
state: sites, heartbeats, metrics, rollouts, models, the dashboard and its
event stream, the API docs) by sending it on to the leader's URL with the
caller's token (:mod:`hub.api.forwarding`) and passing the leader's answer
back, with ``X-SpanEdge-Served-By`` naming the leader. These answers, the
redirects and the errors carry ``X-SpanEdge-Role: standby``. While no leader's
URL is known, or the leader cannot be reached, a request gets 503 naming the
leader, with ``Retry-After``; a leader's answer larger than a standby passes
on gets 502.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel

from hub.api.apps import AppName, placement_view, summary
from hub.api.auth import scope_dependency
from hub.api.errors import error, install_error_handlers
from hub.api.forwarding import FORWARDED_HEADER, AnswerTooLarge, Forwarder, LeaderUnreachable
from hub.api.health import StatsSource
from hub.api.models import AppDetail, AppList, HealthResponse, PlacementView
from hub.control.state import AppRecord
from spanedge.errors import InvalidName, SpanEdgeError
from spanedge.names import check_app_name
from spanedge.tokens import Tokens, TokenScope

AppsSource = Callable[[str | None], list[AppRecord]]
"""The apps stored in the shared database (only the one named, if a name is given): :func:`hub.ha.pg_state.stored_apps`."""

#: The header of a standby's answers (its own and the leader's it passes on): ``standby``.
ROLE_HEADER = "X-SpanEdge-Role"
#: The header of an answer a standby passed on from the leader: the leader's name.
SERVED_BY_HEADER = "X-SpanEdge-Served-By"
#: The methods a standby redirects to the leader.
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: The methods a standby sends on to the leader itself, passing its answer back.
READS = frozenset({"GET", "HEAD"})


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


def _unavailable(fields: Mapping[str, Any], method: str, path: str, why: str | None = None) -> JSONResponse:
    """503 naming the leader: it has no URL yet, or ``why`` it could not be reached."""
    leader, epoch, url = fields.get("leader"), fields.get("epoch"), fields.get("leader_url")
    where = f" at {url}" if url else ""
    reach = f"; it cannot be reached from here: {why}" if why else ""
    detail = (
        f"this hub is a standby: {method} {path} is served by the leader "
        f"{leader or '(none yet)'}{where} (epoch {epoch}){reach}; send it there, or retry here once this hub leads"
    )
    body = {"error": "standby", "leader": leader, "epoch": epoch, "leader_url": url, "detail": detail}
    return JSONResponse(body, status_code=503, headers={"Retry-After": "1", ROLE_HEADER: "standby"})


def _forwarded(forwarder: Forwarder, request: Request, fields: Mapping[str, Any], url: str) -> Response:
    """The leader's answer to ``request``, sent on to ``url``; 503 if it cannot be reached, 502 if too large."""
    path, query = _target(request)
    if FORWARDED_HEADER in request.headers:  # the leader's URL leads to a standby: do not send it round again
        why = f"{url} is a standby's URL too (it sent this request on); check the leader's --ha-url"
        return _unavailable(fields, request.method, path, why)
    try:
        answer = forwarder.send(url, request.method, path + (f"?{query}" if query else ""), request.headers)
        if answer.streams:
            response: Response = StreamingResponse(forwarder.events(answer), answer.status)
        else:
            response = Response(forwarder.body(answer), answer.status)
    except AnswerTooLarge as exc:
        refused = error(502, exc, "standby")
        refused.headers[ROLE_HEADER] = "standby"
        return refused
    except LeaderUnreachable as exc:
        return _unavailable(fields, request.method, path, str(exc))
    head = request.method == "HEAD"
    own = [(k, v) for k, v in response.raw_headers if not (head and k == b"content-length")]
    leader = str(fields.get("leader") or "")
    copied = [(k, _here(v, url) if k.lower() == "location" else v) for k, v in answer.headers]
    copied = [(k, v) for k, v in copied if k.lower() not in (ROLE_HEADER.lower(), SERVED_BY_HEADER.lower())]
    copied += [(ROLE_HEADER, "standby"), (SERVED_BY_HEADER, leader)]
    response.raw_headers = own + [(k.lower().encode("latin-1"), v.encode("latin-1", "replace")) for k, v in copied]
    return response


def _here(location: str, leader_url: str) -> str:
    """A leader's redirect to its own URL made relative, so that it stays on this standby."""
    base = leader_url.rstrip("/")
    if location == base or location.startswith(base + "/"):
        return location[len(base) :] or "/"
    return location


def standby_app(
    role: StatsSource, tokens: Tokens | None = None, apps: AppsSource | None = None, forwarder: Forwarder | None = None
) -> FastAPI:
    """The REST API of a standby hub: ``/healthz`` with ``role``'s fields, the apps' reads, the rest from the leader.

    ``role`` gives ``role``, ``leader``, ``epoch`` and ``leader_url``; without ``tokens`` and ``apps`` the
    standby reads no apps itself and sends their reads on too. ``forwarder`` sends reads on to the leader
    (by default one that trusts the system's CAs).
    """
    api = FastAPI(title="SpanEdge hub (standby)", docs_url=None, redoc_url=None, openapi_url=None)
    install_error_handlers(api)
    leader_reads = forwarder or Forwarder()

    @api.get("/healthz", response_model=HealthResponse, response_model_exclude_unset=True)
    def healthz() -> dict[str, Any]:
        """Liveness; needs no token."""
        return {"status": "ok", "apps": 0, **role()}

    if tokens is not None and apps is not None:
        _apps_routes(api, role, tokens, apps)

    @api.api_route("/{path:path}", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"])
    def elsewhere(request: Request) -> Response:
        fields = role()
        leader, epoch, url = fields.get("leader"), fields.get("epoch"), fields.get("leader_url")
        if url and request.method in READS:
            return _forwarded(leader_reads, request, fields, url)
        path, query = _target(request)
        location = redirect_location(request.method, url, path, query)
        if location is None:
            return _unavailable(fields, request.method, path)
        detail = f"this hub is a standby: {request.method} {path} is sent on to the leader {leader} at {url}"
        body = {"error": "standby", "leader": leader, "epoch": epoch, "leader_url": url, "detail": detail}
        return JSONResponse(body, status_code=307, headers={"Location": location, ROLE_HEADER: "standby"})

    return api
