"""The REST API's ``/apps`` routes: deploy, list, inspect and delete apps."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, WithJsonSchema

from hub.api.errors import error, not_found
from hub.api.models import (
    AppDetail,
    AppList,
    DeleteResponse,
    DeployResponse,
    PlacementView,
    errors,
)
from hub.control.coordinator import Coordinator
from hub.control.distribution import sites_of
from hub.control.rollout.runner import MAX_SPEC_CHARS
from hub.control.state import AppRecord
from spanedge.durations import parse_duration
from spanedge.errors import InvalidName, MissingExtra, SpanEdgeError
from spanedge.loader import source_hash
from spanedge.logsafe import escaped
from spanedge.names import APP_NAME_PATTERN, check_app_name
from spanedge.placement_settings import MAX_SLO_MS, MAX_WEIGHT, WEIGHTS
from spanedge.plan import Plan

log = logging.getLogger(__name__)
audit = logging.getLogger("spanedge.audit")


# The range of slo_ms and of each weight, as documented; the deploy checks them by spanedge.placement_settings.
_SLO_SCHEMA = {"anyOf": [{"type": "number", "exclusiveMinimum": 0, "maximum": MAX_SLO_MS}, {"type": "null"}]}
_WEIGHT_PROPERTIES = {name: {"type": "number", "minimum": 0, "maximum": MAX_WEIGHT} for name in WEIGHTS}
_WEIGHTS_SCHEMA = {
    "anyOf": [{"type": "object", "properties": _WEIGHT_PROPERTIES, "additionalProperties": False}, {"type": "null"}]
}

#: The file name a deploy gives its app: any text without control characters (it names the app's module).
FILENAME_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]+$"


class DeployRequest(BaseModel):
    """``POST /apps``: an app's source and placement options.

    ``slo_ms`` and ``weights`` are read here as numbers; the coordinator checks their range
    (:mod:`spanedge.placement_settings`) and answers :class:`~spanedge.errors.InvalidSettings`.
    """

    model_config = ConfigDict(extra="forbid")

    source: str = Field(min_length=1, description="Python source that defines the App")
    filename: str = Field(
        default="app.py",
        max_length=255,
        pattern=FILENAME_PATTERN,
        description="file name used in error messages (no control characters)",
    )
    app_name: str | None = Field(default=None, description="which App in the source, if it defines several")
    slo_ms: Annotated[StrictFloat | None, WithJsonSchema(_SLO_SCHEMA)] = Field(
        default=None, description="worst source-to-sink latency allowed, in milliseconds"
    )
    weights: Annotated[dict[str, StrictFloat] | None, WithJsonSchema(_WEIGHTS_SCHEMA)] = Field(
        default=None, description="objective weights of the placement (traffic, latency, migration; 1 if left out)"
    )
    rollout: str | None = Field(
        default=None,
        max_length=MAX_SPEC_CHARS,
        description='roll the new version out in stages by site label, e.g. "kind=truck:1, kind=truck:25%, *"',
    )
    gates: str | None = Field(
        default=None,
        max_length=MAX_SPEC_CHARS,
        description='health gates every stage is checked against, e.g. "dead_letter_rate<0.01, cpu<0.8"',
    )
    hold: str | None = Field(
        default=None,
        max_length=32,
        description="how long each stage runs before its gates are checked (2m; 5 min if left out)",
    )
    all_at_once: bool = Field(
        default=False, description="deploy to every site at once, even with a rollout that cannot mix versions"
    )


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
        "handovers": [dataclasses.asdict(h) for h in plan.handovers],
        "parts": [dataclasses.asdict(p) for p in plan.parts],
        "joins": [dataclasses.asdict(j) for j in plan.joins],
        "history": [dataclasses.asdict(h) for h in record.history],
    }


class PlacementAnswers:
    """The body of ``GET /apps/{name}/placement`` per app, made once per app record.

    The coordinator replaces an app's record whenever its plan or history
    changes, so the JSON of a record (checked against
    :class:`~hub.api.models.PlacementView`) is kept until the record is replaced.
    """

    def __init__(self) -> None:
        """Start with no answer kept."""
        self._lock = threading.Lock()
        self._kept: dict[str, tuple[AppRecord, int, bytes]] = {}

    def body(self, record: AppRecord) -> bytes:
        """The JSON of :func:`placement_view` for ``record``."""
        with self._lock:
            kept = self._kept.get(record.name)
        if kept is not None and kept[0] is record and kept[1] == len(record.history):
            return kept[2]
        body = PlacementView.model_validate(placement_view(record)).model_dump_json(by_alias=True).encode()
        with self._lock:
            self._kept[record.name] = (record, len(record.history), body)
        return body


def _bad_name(name: str) -> JSONResponse | None:
    """A 422 for a name outside the app name pattern (it never reaches a file name)."""
    try:
        check_app_name(name, "the app name in the URL")
    except InvalidName as exc:
        return error(422, exc)
    return None


def _who(request: Request) -> str:
    """Who made an admin request, for the audit log: where its token was configured (never the token)."""
    grant = getattr(request.state, "grant", None)
    return f"the admin token of {grant.source}" if grant is not None else "a caller with no token check"


def _lookup(coordinator: Coordinator, name: str) -> AppRecord | JSONResponse:
    """The deployed app ``name``, or the 422 or 404 to answer."""
    if (refused := _bad_name(name)) is not None:
        return refused
    try:
        return coordinator.record(name)
    except KeyError:
        return not_found(name, coordinator)


DEPLOY_ERRORS = errors(
    403,
    413,
    422,
    500,
    e422="the request is malformed, its placement settings are out of range (InvalidSettings), "
    "the app, its sites or its placement is invalid "
    "(the message spanedge deploy --dry-run prints), "
    "or the app needs an extra the hub does not have installed (MissingExtra, naming the pip install)",
)
"""The error answers of ``POST /apps``."""


def deployed(coordinator: Coordinator, body: DeployRequest, request: Request) -> dict[str, Any] | JSONResponse:
    """Deploy or redeploy the app of ``body`` (audited): the answer of ``POST /apps``."""
    if body.rollout is not None and not body.all_at_once:
        return rolled_out(coordinator, body, request)
    try:
        record, distribution = coordinator.deploy(
            body.source, body.filename, app_name=body.app_name, slo_ms=body.slo_ms, weights=body.weights
        )
    except (SpanEdgeError, ValueError) as exc:
        if isinstance(exc, ValueError | MissingExtra):
            # the app is refused as it stands: invalid, or needing an extra this hub lacks (the message says which)
            return error(422, exc)
        log.exception("deploy failed")
        return error(500, exc)
    audit.info(
        "deployed app %s v%d, source sha256 %s, by %s",
        escaped(record.name),
        record.plan.version,
        source_hash(body.source),
        _who(request),
    )
    return {
        "app": record.name,
        "version": record.plan.version,
        "plan": record.plan.to_dict(),
        "distribution": distribution,
        "history": [dataclasses.asdict(h) for h in record.history],
    }


#: A stage's hold when a rollout names none.
DEFAULT_HOLD = "5m"


def rolled_out(coordinator: Coordinator, body: DeployRequest, request: Request) -> dict[str, Any] | JSONResponse:
    """Start a staged rollout of the app of ``body`` (audited): the answer of ``POST /apps`` with ``rollout``."""
    try:
        hold_s = parse_duration(body.hold or DEFAULT_HOLD)
        record = coordinator.rollouts.deploy(
            body.source,
            body.filename,
            app_name=body.app_name,
            stages=body.rollout or "",
            gates=body.gates or "",
            hold_s=hold_s,
        )
    except (SpanEdgeError, ValueError) as exc:
        if isinstance(exc, ValueError | MissingExtra):
            return error(422, exc)
        log.exception("starting a rollout failed")
        return error(500, exc)
    rollout = record.rollout
    audit.info(
        "started a rollout of app %s, source sha256 %s, stages %s, by %s",
        escaped(rollout.app),
        rollout.to_version,
        escaped(", ".join(s.spec for s in rollout.stages)),
        _who(request),
    )
    app = coordinator.record(rollout.app)
    return {
        "app": rollout.app,
        "version": record.plan.version,
        "plan": record.plan.to_dict(),
        "distribution": {},
        "history": [dataclasses.asdict(h) for h in app.history],
        "rollout": rollout.to_dict(),
    }


def deleted(
    coordinator: Coordinator, name: str, request: Request, on_deleted: Callable[[str], None] | None = None
) -> dict[str, Any] | JSONResponse:
    """Stop app ``name`` everywhere and forget it (audited), then call ``on_deleted``: the answer of ``DELETE /apps/{name}``."""
    if (refused := _bad_name(name)) is not None:
        return refused
    try:
        distribution = coordinator.delete(name)
    except KeyError:
        return not_found(name, coordinator)
    if on_deleted is not None:
        on_deleted(name)
    audit.info("deleted app %s, by %s", escaped(name), _who(request))
    return {"deleted": name, "distribution": distribution}


#: An app's name in a path; the pattern is documented, and checked by :func:`_bad_name` with a message that helps.
AppName = Annotated[str, Path(description="the app's name", json_schema_extra={"pattern": APP_NAME_PATTERN})]


def apps_router(
    coordinator: Coordinator, admin: Sequence[Any] = (), on_deleted: Callable[[str], None] | None = None
) -> APIRouter:
    """The ``/apps`` routes over ``coordinator``; deploying and deleting also need the ``admin`` dependencies.

    ``on_deleted`` is called with the name of each app deleted (the previews kept of it are dropped).
    """
    router = APIRouter(tags=["apps"], responses=errors(401))
    one_app = errors(404, 422, e422="the app name in the URL is invalid")

    @router.post(
        "/apps", status_code=201, response_model=DeployResponse, dependencies=list(admin), responses=DEPLOY_ERRORS
    )
    def deploy(body: DeployRequest, request: Request) -> dict[str, Any] | JSONResponse:
        """Deploy or redeploy an app: place it, persist it, publish its plan, start its hub part."""
        return deployed(coordinator, body, request)

    @router.get("/apps", response_model=AppList)
    def list_apps() -> dict[str, Any]:
        """Deployed apps."""
        return {"apps": [summary(r) for r in coordinator.records()]}

    @router.get("/apps/{name}", response_model=AppDetail, responses=one_app)
    def get_app(name: AppName) -> dict[str, Any] | JSONResponse:
        """One app: its summary and full plan."""
        record = _lookup(coordinator, name)
        return record if isinstance(record, JSONResponse) else {**summary(record), "plan": record.plan.to_dict()}

    placements = PlacementAnswers()

    @router.get("/apps/{name}/placement", response_model=PlacementView, responses=one_app)
    def get_placement(name: AppName) -> Response:
        """Where every replica runs and why, the totals against the baselines, and the plan history."""
        record = _lookup(coordinator, name)
        if isinstance(record, JSONResponse):
            return record
        return Response(placements.body(record), media_type="application/json")

    @router.delete(
        "/apps/{name}",
        response_model=DeleteResponse,
        dependencies=list(admin),
        responses={**one_app, **errors(403, 500)},
    )
    def delete_app(name: AppName, request: Request) -> dict[str, Any] | JSONResponse:
        """Stop an app everywhere and forget it."""
        return deleted(coordinator, name, request, on_deleted)

    return router
