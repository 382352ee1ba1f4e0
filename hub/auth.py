"""Who may call the hub's REST API: scoped bearer tokens, and a bound on request bodies.

Tokens come from :func:`spanedge.tokens.load_tokens` (``SPANEDGE_TOKEN`` or
``--token-file`` for the admin token, ``SPANEDGE_READ_TOKEN`` for a read-only
one, ``SPANEDGE_TOKENS_FILE`` for more); a hub never starts without an admin
token, and every token is at least 32 bytes. Reading needs any token;
deploying or deleting an app, which runs its code on the hub and every agent,
needs an admin token and is written to the audit log.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from spanedge.tokens import Grant, Tokens, TokenScope

audit = logging.getLogger("spanedge.audit")

#: Request bodies larger than this are refused with 413 before they are read whole (an app's source is small).
MAX_BODY_BYTES = 4 * 2**20

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def scope_dependency(tokens: Tokens, needed: TokenScope) -> Callable[..., Grant]:
    """A FastAPI dependency that admits a bearer token of scope ``needed`` (or wider).

    No or an unknown token is a 401; a known token of too narrow a scope is a 403.
    It declares the HTTP bearer scheme, so ``/docs`` offers an Authorize button.
    """
    scheme = HTTPBearer(auto_error=False, description="a hub API token (read or admin scope)")

    def require(request: Request, credentials: Any = Depends(scheme)) -> Grant:  # noqa: B008
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
        if needed is TokenScope.ADMIN:
            audit.info("%s %s by the admin token of %s", request.method, request.url.path, grant.source)
        return grant

    return require


class BodyLimit:
    """ASGI middleware: a request whose body exceeds ``limit`` bytes gets 413, before it is read whole.

    A declared ``Content-Length`` over the limit is refused at once; a body sent without one
    is counted as it arrives and refused once it passes the limit.
    """

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], limit: int = MAX_BODY_BYTES) -> None:
        """Wrap ``app``."""
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on unless its body is too large."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(send)
            return
        seen = 0

        async def counted() -> MutableMapping[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        import orjson

        body = orjson.dumps(
            {
                "error": "PayloadTooLarge",
                "detail": f"request body over {self.limit} bytes; an app's source must be smaller",
            }
        )
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    """The body passed the limit while it was read."""
