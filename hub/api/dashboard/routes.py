"""The dashboard's routes: the page, its two assets and the live snapshot stream.

``GET /`` serves the page, which holds no data and needs no token; the page
asks for a token, keeps it in the browser's ``sessionStorage`` and sends it
as ``Authorization: Bearer`` on ``GET /dashboard/events``, a Server-Sent
Events stream with one snapshot (:mod:`hub.api.dashboard.snapshot`) at connect
and then every ``interval_s``. A stream ends itself after ``max_stream_s``
and the page reconnects at once, so an open tab never holds the server up
for longer than that when it shuts down.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from importlib import resources
from typing import Any

import anyio
import orjson
from fastapi import APIRouter, Depends
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from hub.api.models import errors_of_text_route

log = logging.getLogger(__name__)

#: The page's Content-Security-Policy: its own script, styles and connections, nothing inline, no frames.
PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

#: The page's headers: its policy, no content sniffing, no referrer, revalidated on every load.
_PAGE_HEADERS = {
    "Content-Security-Policy": PAGE_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

_ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}


def asset(name: str) -> bytes:
    """The bytes of one of the dashboard's files (``index.html``, ``app.js``, ``style.css``)."""
    return (resources.files("hub.api.dashboard") / name).read_bytes()


def sse_event(data: Any, event: str = "snapshot") -> bytes:
    """One Server-Sent Event carrying ``data`` as JSON on a single ``data:`` line."""
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data, default=str) + b"\n\n"


async def snapshot_events(
    snapshot: Callable[[], Mapping[str, Any]], interval_s: float, max_stream_s: float
) -> AsyncIterator[bytes]:
    """Server-Sent Events: a snapshot now and every ``interval_s``, until ``max_stream_s`` passed.

    A snapshot that cannot be read is an ``event: problem`` with ``{"detail"}``; the stream goes on.
    """
    ends = time.monotonic() + max_stream_s
    while True:
        try:
            data = await run_in_threadpool(snapshot)
        except Exception as exc:
            log.warning("dashboard snapshot failed: %s", exc, exc_info=True)
            yield sse_event({"detail": f"{type(exc).__name__}: {exc}"}, event="problem")
        else:
            yield sse_event(data)
        if time.monotonic() >= ends:
            return
        await anyio.sleep(interval_s)


def _events_responses() -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of the event stream: Server-Sent Events, or a JSON error.

    In OpenAPI 3.1 the schema of ``text/event-stream`` describes one event: its fields ``event`` and ``data``.
    """
    stream = {
        "type": "object",
        "description": "one Server-Sent Event: `event: snapshot` or `event: problem`, with one `data:` line of JSON",
        "properties": {
            "event": {"type": "string", "enum": ["snapshot", "problem"]},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "description": "the snapshot, or {detail} of a snapshot that could not be read",
            },
        },
        "required": ["event", "data"],
    }
    return {
        200: {"description": "a stream of snapshot events", "content": {"text/event-stream": {"schema": stream}}},
        **errors_of_text_route(401),
    }


def dashboard_router(
    snapshot: Callable[[], Mapping[str, Any]],
    token_check: Callable[..., Any],
    *,
    interval_s: float = 1.0,
    max_stream_s: float = 30.0,
) -> APIRouter:
    """The dashboard's routes.

    Args:
        snapshot: returns the current snapshot (see :class:`hub.api.dashboard.snapshot.Snapshot`);
            it is called in a worker thread, so it may take locks.
        token_check: a FastAPI dependency that rejects a request without a valid bearer token,
            e.g. ``hub.api.auth.scope_dependency(tokens, TokenScope.READ)``.
        interval_s: seconds between two snapshots on a stream.
        max_stream_s: a stream ends after this many seconds (the page reconnects at once).

    Returns:
        A router with ``GET /`` (the page), ``GET /dashboard/app.js``, ``GET /dashboard/style.css``
        and ``GET /dashboard/events`` (the stream; needs the token).
    """
    router = APIRouter(tags=["dashboard"])
    files = {name: asset(name) for name in _ASSETS}

    @router.get("/", include_in_schema=False)
    def page() -> Response:
        return Response(files["index.html"], media_type=_ASSETS["index.html"], headers=_PAGE_HEADERS)

    @router.get("/dashboard/app.js", include_in_schema=False)
    def script() -> Response:
        return Response(files["app.js"], media_type=_ASSETS["app.js"], headers={"Cache-Control": "no-cache"})

    @router.get("/dashboard/style.css", include_in_schema=False)
    def style() -> Response:
        return Response(files["style.css"], media_type=_ASSETS["style.css"], headers={"Cache-Control": "no-cache"})

    @router.get(
        "/dashboard/events",
        summary="Live dashboard snapshots",
        dependencies=[Depends(token_check)],
        response_class=StreamingResponse,
        responses=_events_responses(),
    )
    def events() -> StreamingResponse:
        """Server-Sent Events: an ``event: snapshot`` with the JSON snapshot at connect, then every second.

        A snapshot that cannot be read is an ``event: problem`` with ``{"detail"}``; the stream goes on.
        The stream closes after half a minute; reconnect to go on.
        """
        return StreamingResponse(
            snapshot_events(snapshot, interval_s, max_stream_s),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    return router
