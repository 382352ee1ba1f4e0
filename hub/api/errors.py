"""The REST API's errors: every one is JSON ``{"error": <class>, "detail": <message>}``."""

from __future__ import annotations

from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from hub.control.coordinator import Coordinator

#: The ``error`` of an HTTP error raised by FastAPI or Starlette, by status; others use the status's phrase.
_HTTP_ERRORS = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed", 413: "PayloadTooLarge"}


def error(status: int, exc: BaseException | str, name: str | None = None) -> JSONResponse:
    """A JSON error response ``{"error", "detail"}``."""
    return JSONResponse(
        status_code=status,
        content={"error": name or type(exc).__name__, "detail": str(exc)},
    )


def not_found(name: str, coordinator: Coordinator) -> JSONResponse:
    """The 404 of an app that is not deployed, naming the ones that are."""
    deployed = ", ".join(r.name for r in coordinator.records()) or "none"
    return error(404, f"no app named {name!r} is deployed (deployed: {deployed})", "NotFound")


def http_error_name(status: int) -> str:
    """The ``error`` field of an HTTP error of ``status``: ``Unauthorized``, ``NotFound``, ``PayloadTooLarge``..."""
    if status in _HTTP_ERRORS:
        return _HTTP_ERRORS[status]
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP{status}"
    words = "".join(c if c.isalnum() else " " for c in phrase).split()
    return "".join(word[:1].upper() + word[1:] for word in words)


def install_error_handlers(api: FastAPI) -> None:
    """Answer every error as JSON ``{"error", "detail"}``.

    An HTTP error raised by a route, a dependency or the router (401 without a token,
    403 for a token of too narrow a scope, 404 for an unknown path, 405 for a method
    a path does not take) keeps its status and headers; a malformed request is a 422
    (a body that is not UTF-8 too, which FastAPI answers 400) and an unexpected exception a 500.
    """

    @api.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
            return error(422, f"invalid request: body: not UTF-8 ({exc.__cause__.reason})", "InvalidRequest")
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        response = error(exc.status_code, detail, http_error_name(exc.status_code))
        response.headers.update(exc.headers or {})
        return response

    @api.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in exc.errors())
        return error(422, f"invalid request: {problems}", "InvalidRequest")

    @api.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # the server logs the traceback; the client gets the message as JSON
        return error(500, exc)
