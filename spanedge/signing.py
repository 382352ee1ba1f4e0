"""HMAC-SHA256 signing of control messages (plans) between hub and agents.

The shared secret comes from ``SPANEDGE_PLAN_SECRET`` or the file named by
``SPANEDGE_PLAN_SECRET_FILE``; there is no default.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path
from typing import Any

import orjson

from spanedge.errors import InvalidPlan, SpanEdgeError

ENV = "SPANEDGE_PLAN_SECRET"
ENV_FILE = "SPANEDGE_PLAN_SECRET_FILE"


def load_secret(explicit: str | None = None) -> bytes:
    """Return the plan-signing secret, or raise with how to set one."""
    if explicit:
        return explicit.encode()
    if os.environ.get(ENV):
        return os.environ[ENV].encode()
    if os.environ.get(ENV_FILE):
        path = Path(os.environ[ENV_FILE])
        try:
            return path.read_text().strip().encode()
        except OSError as exc:
            msg = f"cannot read the plan secret file {path} ({ENV_FILE}): {exc.strerror}"
            raise SpanEdgeError(msg) from None
    msg = f"no plan-signing secret: set {ENV} (or {ENV_FILE} to a file holding it) on the hub and every agent"
    raise SpanEdgeError(msg)


def sign(payload: dict[str, Any], secret: bytes) -> bytes:
    """Return a signed message: ``{"payload": <json text>, "sig": <hex hmac>}``."""
    body = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS).decode()
    sig = hmac.new(secret, body.encode(), hashlib.sha256).hexdigest()
    return orjson.dumps({"payload": body, "sig": sig})


def verify(message: bytes, secret: bytes) -> dict[str, Any]:
    """Check a signed message and return its payload; raise :class:`InvalidPlan` if forged."""
    try:
        outer = orjson.loads(message)
        body, sig = outer["payload"], outer["sig"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        msg = "control message is not a signed envelope {payload, sig}; ignoring it"
        raise InvalidPlan(msg) from None
    expected = hmac.new(secret, str(body).encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, str(sig)):
        msg = "control message signature does not match; it was forged or signed with another secret (check SPANEDGE_PLAN_SECRET)"
        raise InvalidPlan(msg)
    payload = orjson.loads(body)
    if not isinstance(payload, dict):
        msg = "signed control payload is not an object"
        raise InvalidPlan(msg)
    return payload
