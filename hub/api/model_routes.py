"""The REST API's model routes: ``GET /apps/{name}/models/{model}`` and ``POST .../train``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from hub.api.errors import error
from hub.api.models import ErrorResponse, errors
from hub.control.coordinator import Coordinator
from hub.models.service import ModelService, NoSpark, TrainingBusy
from hub.models.training import TrainingFailed
from spanedge.app import App
from spanedge.errors import InvalidName
from spanedge.loader import load_app_source, source_hash
from spanedge.logsafe import escaped
from spanedge.models.portable import encode_model
from spanedge.models.version import ModelVersion
from spanedge.names import APP_NAME_PATTERN, NAME_PATTERN, check_app_name

log = logging.getLogger(__name__)
audit = logging.getLogger("spanedge.audit")


class FeatureStatsView(BaseModel):
    """One feature's training statistics: mean, standard deviation, range, decile bins and their shares."""

    field: str
    mean: float
    std: float
    min: float
    max: float
    edges: list[float] = Field(description="the inner bin edges (bin i holds values up to edges[i])")
    shares: list[float] = Field(description="the share of training rows in each bin")


class VersionView(BaseModel):
    """One trained version: why, on what, and how well."""

    version: int
    trained_at: float = Field(description="seconds since the epoch")
    reason: str = Field(description="why it was trained: 'on demand', 'scheduled'")
    rows: int = Field(description="training records")
    held_out: int = Field(description="records held out for the metrics")
    time_from: float | None = Field(description="the earliest event time trained on")
    time_to: float | None = Field(description="the latest event time trained on")
    metrics: dict[str, float] = Field(
        description="on the held-out records: auc, accuracy, log_loss; rmse, mae, r2; silhouette"
    )
    size_bytes: int = Field(description="the size of its portable parameters as JSON")
    signed: bool = Field(description="whether the hub holds it signed with its plan key")
    switch_at: float | None = Field(
        description="the event time from which it scores, fixed when it was sent to the sites (null: not sent)"
    )
    stats: list[FeatureStatsView]


class SiteModelView(BaseModel):
    """What one site that predicts with the model holds and reports."""

    sent: int | None = Field(description="the version the site's broker acknowledged from the hub")
    held: int | None = Field(description="the newest version the site reports installed")
    report: dict[str, float] = Field(
        description="the site's last drift report: version, records, psi, psi.<feature>, error, labelled"
    )


class ModelDetail(BaseModel):
    """A model of an app: its declaration and its versions, oldest first."""

    app: str
    model: str
    algorithm: str
    features: list[str]
    label: str | None
    train_on: str = Field(description="the stream whose records it learns from")
    every_s: float | None = Field(description="seconds between scheduled trainings (null: on demand only)")
    min_rows: int
    params: dict[str, int]
    location: str = Field(description="file:line of its declaration")
    size_estimate_bytes: int = Field(description="the placement's estimate of a version's size")
    cost_per_record_s: float = Field(description="the placement's estimate of CPU core-seconds per record scored")
    max_psi: float = Field(description="a site's PSI over this trains a new version")
    max_error: float | None = Field(description="a site's live error over this trains a new version (null: none)")
    history_s: float = Field(description="the hub keeps the labelled records of this many seconds back to train on")
    history_rows: int = Field(description="the most labelled records the hub keeps to train on (the newest)")
    versions: list[VersionView]
    sites: dict[str, SiteModelView] = Field(description="per site that predicts with it or was sent a version")


class TrainRequest(BaseModel):
    """``POST /apps/{name}/models/{model}/train``: why (kept with the version)."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(default="on demand", min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")


class TrainResponse(BaseModel):
    """The version a training made."""

    app: str
    model: str
    version: VersionView


def version_view(service: ModelService, v: ModelVersion) -> dict[str, Any]:
    """One version as ``GET /apps/{name}/models/{model}`` lists it."""
    return {
        "version": v.version,
        "trained_at": v.trained_at,
        "reason": v.reason,
        "rows": v.rows,
        "held_out": v.held_out,
        "time_from": v.time_from,
        "time_to": v.time_to,
        "metrics": v.metrics,
        "size_bytes": len(encode_model(v.params)),
        "signed": service.registry.signed(v.app, v.model, v.version) is not None,
        "switch_at": v.switch_at,
        "stats": [{f: getattr(s, f) for f in FeatureStatsView.model_fields} for s in v.stats],
    }


def model_sites(service: ModelService, app: str, model: str) -> dict[str, dict[str, Any]]:
    """Per site: the version sent to it, the version it holds and its last drift report."""
    link = service.link
    if link is None:
        return {}
    sent = link.distributor.where(app, model)
    reports = service.drift_reports(app, model)
    out = {}
    for site in sorted(sent.keys() | reports.keys()):
        report = reports.get(site, {})
        held = report.get("held")
        out[site] = {"sent": sent.get(site), "held": int(held) if held is not None else None, "report": report}
    return out


def coordinator_apps(coordinator: Coordinator) -> Callable[[str], App]:
    """The loaded App of a deployed app (``KeyError`` if none), loaded once per source."""
    cache: dict[str, tuple[str, App]] = {}
    lock = threading.Lock()

    def app_of(name: str) -> App:
        record = coordinator.record(name)
        digest = source_hash(record.source)
        with lock:
            held = cache.get(name)
            if held is not None and held[0] == digest:
                return held[1]
        app = load_app_source(record.source, record.filename, record.app_name)
        with lock:
            cache[name] = (digest, app)
        return app

    return app_of


AppName = Annotated[str, Path(description="the app's name", json_schema_extra={"pattern": APP_NAME_PATTERN})]
ModelName = Annotated[str, Path(description="the model's name", json_schema_extra={"pattern": NAME_PATTERN})]

#: The parts of a model's declaration its REST view shows as declared.
_DECLARED = (
    "algorithm",
    "features",
    "label",
    "train_on",
    "every_s",
    "min_rows",
    "params",
    "location",
    "history_s",
    "history_rows",
)
_CONFLICT = {"model": ErrorResponse, "description": "another model is training at this hub; try again later"}
_NO_SPARK = {"model": ErrorResponse, "description": "this hub runs without Spark, so it cannot train"}


def model_router(coordinator: Coordinator, service: ModelService, admin: Sequence[Any] = ()) -> APIRouter:
    """The model routes over ``service``; training also needs the ``admin`` dependencies."""
    router = APIRouter(tags=["models"], responses=errors(401))
    one = errors(404, 422, e404="no such app is deployed, or it has no such model", e422="a name in the URL is invalid")

    def lookup(name: str, model: str) -> JSONResponse | None:
        try:
            check_app_name(name, "the app name in the URL")
            check_app_name(model, "the model name in the URL")
        except InvalidName as exc:
            return error(422, exc, "InvalidName")
        try:
            service.spec(name, model)
        except KeyError as exc:
            detail = (
                exc.args[0] if name in {r.name for r in coordinator.records()} else f"no app named {name!r} is deployed"
            )
            return error(404, str(detail), "NotFound")
        return None

    @router.get("/apps/{name}/models/{model}", response_model=ModelDetail, responses=one)
    def get_model(name: AppName, model: ModelName) -> dict[str, Any] | JSONResponse:
        """A model's declaration and every version: training rows, time range, metrics, feature statistics."""
        if (refused := lookup(name, model)) is not None:
            return refused
        spec = service.spec(name, model)
        declared = spec.to_dict()
        return {
            "app": name,
            "model": model,
            **{k: declared[k] for k in _DECLARED},
            "size_estimate_bytes": spec.size_bytes,
            "cost_per_record_s": spec.cost_per_record,
            "max_psi": spec.max_psi,
            "max_error": spec.max_error,
            "versions": [version_view(service, v) for v in service.registry.versions(name, model)],
            "sites": model_sites(service, name, model),
        }

    @router.post(
        "/apps/{name}/models/{model}/train",
        status_code=201,
        response_model=TrainResponse,
        dependencies=list(admin),
        responses={**one, **errors(403, 413), 409: _CONFLICT, 503: _NO_SPARK},
    )
    def train_model(
        name: AppName, model: ModelName, request: Request, body: TrainRequest | None = None
    ) -> dict[str, Any] | JSONResponse:
        """Train the next version now, from the records the hub holds for the model's ``train_on`` stream."""
        if (refused := lookup(name, model)) is not None:
            return refused
        reason = body.reason if body is not None else "on demand"
        try:
            version = service.train(name, model, reason)
        except TrainingFailed as exc:
            return error(422, exc)
        except TrainingBusy as exc:
            return error(409, exc, "Busy")
        except NoSpark as exc:
            return error(503, exc, "NoSpark")
        audit.info(
            "trained model %s of app %s: version %d (%s)",
            escaped(model),
            escaped(name),
            version.version,
            escaped(reason),
        )
        return {"app": name, "model": model, "version": version_view(service, version)}

    return router
