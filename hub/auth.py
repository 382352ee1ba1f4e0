"""Bearer-token authentication of the hub's REST API.

The token comes from ``SPANEDGE_TOKEN`` or a file (``--token-file``); there is
no default, so a hub never starts open by accident.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spanedge.errors import SpanEdgeError

ENV = "SPANEDGE_TOKEN"


def load_token(token_file: Path | None = None) -> str:
    """Return the API token from ``token_file`` or ``SPANEDGE_TOKEN``; raise with how to set one.

    Args:
        token_file: a file whose stripped content is the token; wins over the environment.

    Raises:
        SpanEdgeError: no token is configured, or the file is unreadable or empty.
    """
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            msg = f"cannot read the token file {token_file}: {exc.strerror}"
            raise SpanEdgeError(msg) from None
        if not token:
            msg = f"the token file {token_file} is empty; write a long random token into it"
            raise SpanEdgeError(msg)
        return token
    token = os.environ.get(ENV, "").strip()
    if token:
        return token
    msg = (
        f"the hub needs an API token and has none: export {ENV}=<a long random string> "
        "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))') or pass --token-file FILE"
    )
    raise SpanEdgeError(msg)


def bearer_dependency(token: str) -> Callable[..., None]:
    """Return a FastAPI dependency that rejects requests without ``Authorization: Bearer <token>``.

    It declares the HTTP bearer scheme, so ``/docs`` offers an Authorize button.
    """
    from fastapi import Depends, HTTPException, status
    from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

    expected = token.encode()
    scheme = HTTPBearer(auto_error=False, description="the hub's API token (SPANEDGE_TOKEN)")

    def require_token(credentials: Any = Depends(scheme)) -> None:  # noqa: B008
        given = credentials.credentials.encode() if isinstance(credentials, HTTPAuthorizationCredentials) else b""
        if not hmac.compare_digest(given, expected):
            raise HTTPException(
                status_code=status.HTTP_401_UNAUTHORIZED,
                detail="missing or wrong bearer token; send Authorization: Bearer $SPANEDGE_TOKEN",
                headers={"WWW-Authenticate": "Bearer"},
            )

    return require_token
