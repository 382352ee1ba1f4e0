"""The REST API's preview routes: a live preview's summary, posted by ``spanedge preview``, and the last ones kept.

* ``POST /apps/{name}/previews`` (admin, audited): keep a summary; bodies over
  :data:`~hub.api.previews.limits.MAX_BODY_BYTES` get 413;
* ``GET /apps/{name}/previews``: the app's last previews, newest first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from hub.api.apps import AppName, _lookup, _who
from hub.api.errors import error
from hub.api.models import errors
from hub.api.previews.limits import MAX_BODY_BYTES
from hub.api.previews.models import PreviewList, PreviewReport, PreviewView
from hub.api.previews.store import PreviewStore
from hub.control.coordinator import Coordinator
from spanedge.logsafe import escaped

log = logging.getLogger(__name__)
audit = logging.getLogger("spanedge.audit")

_ONE_APP = errors(404, 422, e422="the app name in the URL is invalid")


def preview_router(
    coordinator: Coordinator,
    store: PreviewStore,
    admin: Sequence[Any] = (),
    clock: Callable[[], float] = time.time,
) -> APIRouter:
    """The preview routes over ``store``; posting also needs the ``admin`` dependencies."""
    router = APIRouter(tags=["previews"], responses=errors(401))

    @router.post(
        "/apps/{name}/previews",
        status_code=201,
        response_model=PreviewView,
        dependencies=list(admin),
        responses={
            **_ONE_APP,
            **errors(
                403,
                413,
                422,
                500,
                e413=f"the body is over {MAX_BODY_BYTES} bytes",
                e422="the app name in the URL or the summary is invalid",
                e500="the hub could not write the preview to its state directory",
            ),
        },
    )
    def post_preview(name: AppName, body: PreviewReport, request: Request) -> dict[str, Any] | JSONResponse:
        """Keep the summary of a live preview of a deployed app (the hub keeps the last 20 per app)."""
        record = _lookup(coordinator, name)
        if isinstance(record, JSONResponse):
            return record
        view = {**body.model_dump(mode="json"), "app": name, "received_at": clock()}
        try:
            store.add(name, view)
        except OSError as exc:
            log.exception("keeping a preview of app %s failed", escaped(name))
            return error(500, f"cannot write the preview to the hub's state directory: {exc.strerror or exc}")
        audit.info(
            "kept a preview of app %s at site %s, candidate %s sha256 %s, by %s",
            escaped(name),
            escaped(body.site),
            escaped(body.candidate_file),
            body.candidate_sha256,
            _who(request),
        )
        return view

    @router.get("/apps/{name}/previews", response_model=PreviewList, responses=_ONE_APP)
    def list_previews(name: AppName) -> dict[str, Any] | JSONResponse:
        """The last previews of a deployed app, newest first: site, times, candidate, both versions' figures."""
        record = _lookup(coordinator, name)
        if isinstance(record, JSONResponse):
            return record
        return {"app": name, "keep": store.keep, "previews": store.latest(name)}

    return router
