"""The REST API's rollout routes: an app's staged rollout, and rolling it back by hand.

* ``GET /apps/{name}/rollout``: the stage, the sites on each version, the gate
  values of every step and why the rollout stopped, if it did;
* ``POST /apps/{name}/rollout/rollback`` (admin): give every site the rollout
  changed the previous version back.

A rollout starts with ``POST /apps`` and a ``rollout`` field (:mod:`hub.api.apps`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from hub.api.apps import AppName, _bad_name, _who
from hub.api.errors import error, not_found
from hub.api.models import errors
from hub.control.coordinator import Coordinator
from hub.control.rollout.records import RolloutRecord
from hub.control.rollout.steps import changed_by, due
from spanedge.errors import InvalidRollout
from spanedge.logsafe import escaped

audit = logging.getLogger("spanedge.audit")


class GateResultModel(BaseModel):
    """A gate's outcome over a stage's sites."""

    gate: str = Field(description="the gate as written, e.g. cpu<0.8")
    value: float | None = Field(description="the worst site's value (null: none could be measured)")
    limit: float
    passed: bool
    site: str | None = Field(description="the worst site")
    failed: list[str] = Field(description="every site that failed the gate")
    note: str = ""


class StepModel(BaseModel):
    """One step of a rollout."""

    at: float = Field(description="epoch seconds (the hub's clock)")
    stage: int = Field(description="the stage it concerns, 0 for the first")
    status: str
    reason: str
    sites: list[str] = Field(default_factory=list, description="the sites it gave a version to")
    gates: list[GateResultModel] = Field(default_factory=list, description="the gates' results, if it checked them")


class StageModel(BaseModel):
    """One stage: its spec, the sites on the new version once it is done, and those it changes itself."""

    spec: str
    sites: list[str]
    changes: list[str]


class SiteVersionModel(BaseModel):
    """The version a site was given, since when, and whether it reported running it."""

    version: str
    since: float
    running: bool


class RolloutView(BaseModel):
    """``GET /apps/{name}/rollout``: where an app's staged rollout is."""

    app: str
    status: str = Field(description="running, holding, passed, failed (rolling back) or rolled_back")
    stage: int = Field(description="the current stage, 0 for the first")
    stages: list[StageModel]
    from_version: str = Field(description="the SHA-256 of the previous version's source")
    to_version: str = Field(description="the SHA-256 of the new version's source")
    filename: str = Field(description="the new version's file name")
    versions: dict[str, list[str]] = Field(description="per version, the sites given it")
    gates: str
    hold_s: float
    take_up_s: float
    started_at: float
    held_from: float | None
    due: float | None = Field(description="when the hub checks the rollout next (null: when sites report)")
    reason: str = Field(description="the last step's reason: why the rollout is where it is")
    sites: dict[str, SiteVersionModel]
    steps: list[StepModel]


def rollout_view(record: RolloutRecord) -> dict[str, Any]:
    """The body of ``GET /apps/{name}/rollout``."""
    rollout = record.rollout
    data = rollout.to_dict()
    data["stages"] = [
        {"spec": s.spec, "sites": list(s.sites), "changes": list(changed_by(rollout, i))}
        for i, s in enumerate(rollout.stages)
    ]
    data["steps"] = [{"sites": [], "gates": [], **step} for step in data["steps"]]
    versions = {v: list(rollout.on(v)) for v in (rollout.from_version, rollout.to_version)}
    return {
        **data,
        "filename": record.filename,
        "versions": versions,
        "due": due(rollout),
        "reason": rollout.steps[-1].reason if rollout.steps else "",
    }


def rollout_router(coordinator: Coordinator, admin: Sequence[Any] = ()) -> APIRouter:
    """The rollout routes over ``coordinator``; rolling back also needs the ``admin`` dependencies."""
    router = APIRouter(tags=["rollouts"], responses=errors(401))
    runner = coordinator.rollouts

    def found(name: str) -> RolloutRecord | JSONResponse:
        if (refused := _bad_name(name)) is not None:
            return refused
        record = runner.record(name)
        if record is None:
            if name not in coordinator.app_names():
                return not_found(name, coordinator)
            return error(404, f"app {name!r} has had no rollout; start one with spanedge deploy --rollout", "NotFound")
        return record

    @router.get(
        "/apps/{name}/rollout",
        response_model=RolloutView,
        responses=errors(404, 422, e404="no such app is deployed, or it has had no rollout"),
    )
    def get_rollout(name: AppName) -> dict[str, Any] | JSONResponse:
        """An app's staged rollout, in progress or its last one: stage, sites per version, gate values, steps."""
        record = found(name)
        return record if isinstance(record, JSONResponse) else rollout_view(record)

    @router.post(
        "/apps/{name}/rollout/rollback",
        response_model=RolloutView,
        dependencies=list(admin),
        responses=errors(403, 404, 409, 422, e404="no such app is deployed, or it has had no rollout"),
    )
    def rollback(name: AppName, request: Request) -> dict[str, Any] | JSONResponse:
        """Roll an app's rollout back by hand: every site it changed gets the previous version back."""
        record = found(name)
        if isinstance(record, JSONResponse):
            return record
        try:
            record = runner.roll_back(name, f"rolled back by hand, by {_who(request)}")
        except InvalidRollout as exc:
            return error(409, exc)
        audit.info("rolled back the rollout of app %s, by %s", escaped(name), _who(request))
        return rollout_view(record)

    return router
