"""Who may call the hub's REST API: scoped bearer tokens, and a bound on request bodies.

Tokens come from :func:`spanedge.tokens.load_tokens` (``SPANEDGE_TOKEN`` or
``--token-file`` for the admin token, ``SPANEDGE_READ_TOKEN`` for a read-only
one, ``SPANEDGE_TOKENS_FILE`` for more); a hub never starts without an admin
token, and every token is at least 32 bytes. Reading needs any token;
deploying or deleting an app, which runs its code on the hub and every agent,
needs an admin token and is written to the audit log (``spanedge.audit``):
the method, the path, where the token was configured (never the token) and,
for a deploy, the SHA-256 of the app's source.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from spanedge.loader import source_hash
from spanedge.logsafe import escaped
from spanedge.tokens import Grant, Tokens, TokenScope

audit = logging.getLogger("spanedge.audit")

#: Request bodies larger than this are refused with 413 before they are read whole (an app's source is small).
MAX_BODY_BYTES = 4 * 2**20

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def scope_dependency(tokens: Tokens, needed: TokenScope) -> Callable[..., Awaitable[Grant]]:
    """A FastAPI dependency that admits a bearer token of scope ``needed`` (or wider).

    No or an unknown token is a 401; a known token of too narrow a scope is a 403.
    It declares the HTTP bearer scheme, so ``/docs`` offers an Authorize button.
    The grant is kept as ``request.state.grant``; an admin request is written
    to the audit log with the token's source and the SHA-256 of the app source
    it carries, if any.
    """
    scheme = HTTPBearer(auto_error=False, description="a hub API token (read or admin scope)")

    async def require(request: Request, credentials: Any = Depends(scheme)) -> Grant:  # noqa: B008
        given = credentials.credentials if isinstance(credentials, HTTPAuthorizationCredentials) else None
        grant = tokens.identify(given)
        if grant is None:
            raise HTTPException(
                status_code=status.HTTP_401_UNAUTHORIZED,
                detail="missing or wrong bearer token; send Authorization: Bearer $SPANEDGE_TOKEN",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not grant.scope.allows(needed):
            raise HTTPException(
                status_code=status.HTTP_403_FORBIDDEN,
                detail=f"this token has the {grant.scope} scope; {request.method} {request.url.path} needs {needed}",
            )
        request.state.grant = grant
        if needed is TokenScope.ADMIN:
            code = source_sha256(await request.body())
            carried = f", app source sha256 {code}" if code else ""
            audit.info(
                "%s %s by the admin token of %s%s",
                escaped(request.method),
                escaped(request.scope["path"]),  # as decoded: request.url drops newlines and tabs
                grant.source,
                carried,
            )
        return grant

    return require


def source_sha256(body: bytes) -> str | None:
    """The SHA-256 of the app source a request body carries (``{"source": ...}``), or ``None``."""
    try:
        parsed = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return None
    source = parsed.get("source") if isinstance(parsed, dict) else None
    return source_hash(source) if isinstance(source, str) else None


#: What the default limit bounds, as its 413 says.
APP_SOURCE = "an app's source"


@dataclass(frozen=True)
class PathLimit:
    """A smaller body limit for the paths that match ``pattern`` (a regular expression), naming what it bounds."""

    pattern: str
    limit: int
    what: str


class BodyLimit:
    """ASGI middleware: a request whose body exceeds ``limit`` bytes gets 413, before it is read whole.

    A declared ``Content-Length`` over the limit is refused at once; a body sent without one
    is counted as it arrives and refused once it passes the limit. A path that matches one of
    ``paths`` has that entry's limit instead.
    """

    def __init__(
        self,
        app: Callable[[Scope, Receive, Send], Awaitable[None]],
        limit: int = MAX_BODY_BYTES,
        paths: Sequence[PathLimit] = (),
    ) -> None:
        """Wrap ``app``."""
        self.app = app
        self.limit = limit
        self.paths = [(re.compile(p.pattern), p.limit, p.what) for p in paths]

    def _limit_of(self, path: str) -> tuple[int, str]:
        return next(
            ((limit, what) for pattern, limit, what in self.paths if pattern.match(path)), (self.limit, APP_SOURCE)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on unless its body is too large."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, what = self._limit_of(str(scope.get("path", "")))
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _refuse(send, limit, what)
            return
        seen = 0

        async def counted() -> MutableMapping[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge(limit, what)
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await _refuse(send, limit, what)


async def _refuse(send: Send, limit: int, what: str) -> None:
    body = orjson.dumps({"error": "PayloadTooLarge", "detail": _too_large(limit, what)})
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _too_large(limit: int, what: str) -> str:
    return f"request body over {limit} bytes; {what} must be smaller"


class _TooLarge(HTTPException):
    """The body passed the limit while it was read: a 413.

    An HTTP error, so that the route reading the body passes it on as it is (FastAPI
    turns any other exception raised while it reads a body into a 400).
    """

    def __init__(self, limit: int, what: str) -> None:
        super().__init__(status_code=413, detail=_too_large(limit, what))
